package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// TestBuiltinThatStartsLoopingIsStopped: a module loaded with the options the
// daemon gives its built-in modules, which answers 3,000 calls well and then
// loops, is stopped at the deadline of that call and of every later one: a
// mapper that stops returning never holds its delivery for ever. Before,
// 1,000 good calls earned a built-in module code without termination checks,
// and the looping call never returned.
func TestBuiltinThatStartsLoopingIsStopped(t *testing.T) {
	wasm := testkit.WAT(t, "../../runtime/testdata", "loopafter")
	ctx := context.Background()
	e, err := runtime.NewEngine(ctx, runtime.Config{PoolSize: 1, CallTimeout: 100 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	// A call that never returns would make Close wait for ever: the engine
	// of a failed run is left to the end of the process.
	t.Cleanup(func() {
		if !t.Failed() {
			_ = e.Close(ctx)
		}
	})
	m, err := e.Load(ctx, "builtin:loopafter.wasm", wasm, builtinModuleOptions...)
	if err != nil {
		t.Fatal(err)
	}
	var x jsonindex.Index
	if err := x.Parse([]byte(`{"event_type":"x.y","message_id":"m"}`)); err != nil {
		t.Fatal(err)
	}
	src := runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"}
	// An instance loops at its 3,001st call; the runtime may replace
	// instances on the way (it did when a module earned trust), so call
	// until one call fails.
	for i := 0; i < 10000; i++ {
		done := make(chan error, 1)
		go func() {
			_, err := m.Map(ctx, &x, src)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				continue
			}
			var me *runtime.MapError
			if !errors.As(err, &me) || me.Reason != runtime.ReasonTimeout {
				t.Fatalf("call %d: %v, want a timeout", i, err)
			}
			if i < 3000 {
				t.Fatalf("call %d timed out before the module loops", i)
			}
			return
		case <-time.After(30 * time.Second):
			t.Fatalf("call %d still runs after 30 s: its delivery is held", i)
		}
	}
	t.Fatal("the module never looped")
}
