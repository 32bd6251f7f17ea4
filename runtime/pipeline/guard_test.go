package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// Only a first AMQP delivery may run a watched module without termination
// checks: any other message (a redelivery, a replay, another input's) that
// makes it loop is stopped at its deadline by the guarded code and fails as a
// timeout, never abandoned to a guest that keeps running.
func TestOnlyFirstDeliveriesRunWatched(t *testing.T) {
	// A garbage collection would wait for the unguarded guest below, the
	// engine's watchdog with it (docs/abi.md, "Runaway guests").
	testkit.NoGC(t)
	e, err := runtime.NewEngine(context.Background(), runtime.Config{CacheDir: testkit.CacheDir(t),
		CallTimeout: 50 * time.Millisecond, PoolSize: 2, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	// spin claims every event type and loops (len << 20) turns on an input
	// of 64 bytes or more: about two seconds unguarded for this one.
	spin, err := e.Load(context.Background(), "spin", testkit.WAT(t, "../testdata", "spin"),
		runtime.WithGuard(runtime.GuardWatched))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{spin}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	loops := []byte(`{"event_type":"x.y","pad":"` + strings.Repeat("a", 4000) + `"}`)
	for _, msg := range []pipeline.Message{
		{Body: loops, Exchange: "nova"},                                   // a redelivery, or any other input's message
		{Body: loops, Exchange: "nova", Modules: []pipeline.Mapper{spin}}, // a plog chain
	} {
		r := p.Process(context.Background(), msg)
		if r.Outcome != pipeline.Failed || r.Reason != string(runtime.ReasonTimeout) {
			t.Fatalf("outcome %v %q, want failed: timeout", r.Outcome, r.Reason)
		}
	}
	if n := e.Abandoned(); n != 0 {
		t.Fatalf("abandoned calls = %d, want 0: a message that is not a first delivery ran unguarded", n)
	}
	if spin.Guarded() {
		t.Fatal("the module runs guarded by default after guarded calls")
	}
	r := p.Process(context.Background(), pipeline.Message{Body: loops, Exchange: "nova", FirstDelivery: true})
	if r.Outcome != pipeline.Failed || r.Reason != string(runtime.ReasonTimeout) {
		t.Fatalf("first delivery: outcome %v %q, want failed: timeout", r.Outcome, r.Reason)
	}
	if n := e.Abandoned(); n != 1 {
		t.Fatalf("abandoned calls after a first delivery = %d, want 1: it ran watched", n)
	}
	testkit.WaitFor(t, 2*time.Minute, "the abandoned guest to return", func() bool { return e.Runaways() == 0 })
}
