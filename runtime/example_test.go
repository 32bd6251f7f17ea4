package runtime_test

import (
	"context"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

func Example() {
	ctx := context.Background()
	e, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: os.Getenv("TALLY_OSC_TEST_CACHE"), Logger: zerolog.Nop()})
	if err != nil {
		panic(err)
	}
	defer e.Close(ctx)

	wasm, err := os.ReadFile("testdata/fieldmap.wasm") // built by `make test-wasm`
	if err != nil {
		panic(err)
	}
	m, err := e.Load(ctx, "testdata/fieldmap.wasm", wasm)
	if err != nil {
		panic(err)
	}

	var in jsonindex.Index // one per worker, reused
	if err := in.Parse([]byte(`{"message_id":"m-1","event_type":"compute.instance.exists","publisher_id":"compute.host1"}`)); err != nil {
		panic(err)
	}
	res, err := m.Map(ctx, &in, runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"})
	if err != nil {
		panic(err)
	}
	fmt.Println(m.ID())
	for _, ev := range res.Events {
		fmt.Println(string(ev))
	}
	// Output:
	// fieldmap@1.0.0
	// {"event_type":"compute.instance.exists","event_id":"m-1","timestamp":"2024-05-01T12:00:00Z","service":"test","resource_type":"thing","resource_id":"r1","project_id":"p1","action":"map","attributes":{},"source":{"exchange":"nova","routing_key":"notifications.info","publisher_id":"compute.host1","mapper":"fieldmap@1.0.0"}}
}
