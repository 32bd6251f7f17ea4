package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestHotReloadUnderLoadExactCount maps a steady stream from many goroutines
// while the module is replaced again and again (in shadow then promoted,
// or aborted): every message must be mapped exactly once,
// none failed, none doubled.
func TestHotReloadUnderLoadExactCount(t *testing.T) {
	const workers = 8
	cycles := 30
	if testing.Short() {
		cycles = 8
	}
	dir, c, p := catalogOn(t, catalog.Options{}, "echo.wasm", "echo_v1")
	ctx := context.Background()

	var (
		stop     atomic.Bool
		progress atomic.Int64 // messages mapped so far
		mu       sync.Mutex
		seen     = map[string]int{} // event_id -> events carrying it
		byMapper = map[string]int{}
		sent     atomic.Int64
		failures []string
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				sent.Add(1)
				r := p.Process(ctx, pipeline.Message{Body: body("test.load", id), Exchange: "test", RoutingKey: "notifications.info"})
				mu.Lock()
				if r.Outcome != pipeline.Mapped {
					failures = append(failures, fmt.Sprintf("%s: %v %s %v", id, r.Outcome, r.Reason, r.Err))
				}
				for _, e := range r.Events {
					ev := decodeEvent(t, e)
					seen[ev.EventID]++
					byMapper[ev.Source.Mapper]++
				}
				mu.Unlock()
				progress.Add(1)
			}
		}()
	}

	// Wait until the stream has moved on by a few messages, so that every
	// state of the catalogue carries traffic.
	settle := func() {
		from := progress.Load()
		testkit.WaitFor(t, 10*time.Second, "traffic", func() bool { return progress.Load() >= from+int64(workers) })
	}
	versions := []string{"echo_v1b", "echo_v2", "echo_v1"}
	for i := range cycles {
		settle()
		drop(t, dir, "echo.wasm", versions[i%len(versions)])
		if r := c.Reload(ctx); !r.OK || !r.Changed {
			t.Fatalf("cycle %d: reload %+v", i, r)
		}
		settle() // the candidate shadows live traffic
		var err error
		switch i % 3 {
		case 0, 1:
			_, err = c.Promote(ctx, "echo")
		case 2:
			_, err = c.Abort(ctx, "echo")
		}
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	settle()
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("%d messages not mapped, first: %s", len(failures), failures[0])
	}
	n := sent.Load()
	if int64(len(seen)) != n {
		t.Errorf("%d distinct events for %d messages", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("event %s mapped %d times", id, k)
		}
	}
	if len(byMapper) < 3 {
		t.Errorf("traffic saw only %v; the swaps did not happen under load", byMapper)
	}
	t.Logf("%d messages, %d cycles, by mapper %v, generation %d", n, cycles, byMapper, c.Generation())
}

// TestRoutedJustBeforeASwap takes a route, lets a promotion retire its module
// completely, then calls it: the call is routed again to the module now in
// service instead of failing or being lost.
func TestRoutedJustBeforeASwap(t *testing.T) {
	dir, c, _ := catalogOn(t, catalog.Options{Promote: catalog.PromoteImmediate}, "echo.wasm", "echo_v1")
	m, ok := c.Route("test.a")
	if !ok || m.ID() != "echo@1.0.0" {
		t.Fatalf("route: %v %v", m, ok)
	}
	drop(t, dir, "echo.wasm", "echo_v2")
	reload(t, c)
	c.WaitRetired() // echo@1.0.0 is closed now

	var idx jsonindex.Index
	if err := idx.Parse([]byte(`{"event_type":"test.a","message_id":"late"}`)); err != nil {
		t.Fatal(err)
	}
	res, err := m.Map(context.Background(), &idx, runtime.Source{Exchange: "test"})
	if err != nil {
		t.Fatalf("a call routed before the swap failed: %v", err)
	}
	if len(res.Events) != 1 {
		t.Fatalf("%d events", len(res.Events))
	}
	if ev := decodeEvent(t, res.Events[0]); ev.Source.Mapper != "echo@2.0.0" || ev.EventID != "late" {
		t.Errorf("event %+v", ev)
	}
}

// TestNamedFollowsPromotions resolves a module by name once, as a plog
// listener's chain does, and sees the promoted version afterwards.
func TestNamedFollowsPromotions(t *testing.T) {
	dir, c, p := catalogOn(t, catalog.Options{}, "echo.wasm", "echo_v1")
	m, ok := c.Named("echo")
	if !ok || m.ID() != "echo@1.0.0" {
		t.Fatalf("named: %v %v", m, ok)
	}
	if _, ok := c.Named("nope"); ok {
		t.Error("an unknown name resolved")
	}
	mapVia := func(id string) (pipeline.Result, event) {
		r := p.Process(context.Background(), pipeline.Message{Body: body("test.a", id), Modules: []pipeline.Mapper{m}})
		if r.Outcome != pipeline.Mapped || len(r.Events) != 1 {
			t.Fatalf("%s: %+v", id, r)
		}
		return r, decodeEvent(t, r.Events[0])
	}
	drop(t, dir, "echo.wasm", "echo_v2")
	reload(t, c)
	if _, ev := mapVia("a"); ev.Source.Mapper != "echo@1.0.0" {
		t.Errorf("during the migration: %+v", ev)
	}
	if mg := mustModule(t, c, "echo").Migration; mg.Differences != 1 {
		t.Errorf("the named chain is shadowed too: %+v", mg)
	}
	if _, err := c.Promote(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	c.WaitRetired()
	if _, ev := mapVia("b"); ev.Source.Mapper != "echo@2.0.0" || m.ID() != "echo@2.0.0" {
		t.Errorf("after promotion: %+v, ID %s", ev, m.ID())
	}
	remove(t, dir, "echo.wasm")
	reload(t, c)
	if ok, _ := m.Manifest().Match("test.a"); ok {
		t.Error("a removed module still claims")
	}
}
