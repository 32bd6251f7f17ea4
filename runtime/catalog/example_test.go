package catalog_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// A catalogue over one built-in module and a drop-in directory; the pipeline
// routes through it. A new version dropped in while running shadows the
// active one until it is promoted.
func Example() {
	ctx := context.Background()
	engine, err := runtime.NewEngine(ctx, runtime.Config{})
	if err != nil {
		panic(err)
	}
	defer engine.Close(ctx)
	v1, _ := os.ReadFile("testdata/echo_v1.wasm")
	v2, _ := os.ReadFile("testdata/echo_v2.wasm")
	dir, _ := os.MkdirTemp("", "mappers")
	defer os.RemoveAll(dir)

	cat, err := catalog.New(ctx, catalog.Options{
		Engine:  engine,
		Builtin: map[string][]byte{"echo.wasm": v1},
		Dir:     dir,
	})
	if err != nil {
		panic(err)
	}
	defer cat.Close(ctx)
	// go cat.Run(ctx) would follow the directory; here it is reloaded by hand.
	p, err := pipeline.New(pipeline.Options{Router: cat})
	if err != nil {
		panic(err)
	}

	_ = os.WriteFile(dir+"/echo.wasm", v2, 0o644)
	cat.Reload(ctx)
	r := p.Process(ctx, pipeline.Message{Body: []byte(`{"event_type":"test.a","message_id":"m1"}`)})
	m := cat.Status().Modules[0]
	fmt.Println(r.Module, m.State, m.Migration.Candidate.ID, m.Migration.Differences)

	_, _ = cat.Promote(ctx, "echo")
	r = p.Process(ctx, pipeline.Message{Body: []byte(`{"event_type":"test.a","message_id":"m2"}`)})
	fmt.Println(r.Module, cat.Status().Modules[0].State)
	// Output:
	// echo@1.0.0 migrating echo@2.0.0 1
	// echo@2.0.0 active
}
