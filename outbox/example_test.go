package outbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)

	o, err := outbox.Open(outbox.Options{Dir: dir, MaxEvents: 1000})
	if err != nil {
		panic(err)
	}
	defer o.Close()

	_ = o.Append(ctx, [][]byte{[]byte(`{"event_id":"a"}`), []byte(`{"event_id":"b"}`)})
	first, last, evs, _ := o.Peek(ctx, 10)
	fmt.Println(first, last, len(evs), string(evs[0]))
	_ = o.Delete(ctx, first, last) // after the Reporting API answered 200
	fmt.Println(o.Depth())
	// Output:
	// 1 2 2 {"event_id":"a"}
	// 0
}
