package sender_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

func Example() {
	api, _ := server.New(server.Options{Token: "t0ken"}) // the reference Reporting API, in memory
	defer api.Close()
	ts := httptest.NewServer(api)
	defer ts.Close()

	dir, _ := os.MkdirTemp("", "sender-example")
	defer os.RemoveAll(dir)
	ob, _ := outbox.Open(outbox.Options{Dir: dir})
	defer ob.Close()
	ctx := context.Background()
	_ = ob.Append(ctx, [][]byte{event(1, 0), event(2, 0)})

	s, err := sender.New(ob, sender.Options{URL: ts.URL, Token: "t0ken", Insecure: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Run(ctx) drains continuously; Flush drains what is there now.
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println(s.Flush(fctx), ob.Depth())
	st, _ := api.Stats()
	fmt.Println(st.Accepted, st.Duplicates)

	_, err = sender.New(ob, sender.Options{URL: "http://tally.example.com", Token: "t0ken"})
	fmt.Println(err != nil)
	// Output:
	// <nil> 0
	// 2 0
	// true
}
