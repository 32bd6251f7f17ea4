package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// spinInput makes the spin module loop len<<20 turns before it answers:
// about a second unguarded for 2 KB, far past a 100 ms deadline.
func spinInput(n int) string {
	return `{"event_type":"x","pad":"` + strings.Repeat("a", n) + `"}`
}

func wantTimeout(t *testing.T, err error) {
	t.Helper()
	var me *runtime.MapError
	if !errors.As(err, &me) || me.Reason != runtime.ReasonTimeout {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

// A watched (unguarded) call that overruns is answered at its deadline while
// its guest still runs; the abandoned call is counted until the guest
// returns, and the module runs guarded from then on.
func TestWatchedOverrunAnsweredAtDeadline(t *testing.T) {
	e := newEngine(t, runtime.Config{CallTimeout: 100 * time.Millisecond, PoolSize: 1})
	m := load(t, e, "spin", runtime.WithGuard(runtime.GuardWatched))
	if m.Guarded() {
		t.Fatal("a GuardWatched module starts guarded")
	}
	ctx := context.Background()
	if res, err := m.Map(ctx, index(t, `{"a":1}`), src); err != nil || len(res.Events) != 0 {
		t.Fatalf("short input: %v, %v", res, err)
	}

	_, err := m.Map(ctx, index(t, spinInput(4000)), src)
	wantTimeout(t, err)
	// The call came back while the guest still spun (about 2 s of turns for
	// 4 KB): it was abandoned. (How many still run is not asserted here: a
	// garbage collection waits for the spinning guest to return.)
	if n := e.Abandoned(); n != 1 {
		t.Fatalf("abandoned calls = %d, want 1", n)
	}
	if n := m.Overruns(); n != 1 {
		t.Fatalf("overruns = %d, want 1", n)
	}
	if !m.Guarded() {
		t.Fatal("the module still runs unguarded after an overrun")
	}
	if n := m.Instances(); n != 0 {
		t.Fatalf("instances = %d, want 0 (the abandoned one is not pooled)", n)
	}
	// The module goes on, guarded (its guarded variant compiled now).
	if res, err := m.Map(ctx, index(t, `{"a":1}`), src); err != nil || len(res.Events) != 0 {
		t.Fatalf("after the overrun: %v, %v", res, err)
	}
	// A second overrun is stopped by the termination checks: not abandoned.
	_, err = m.Map(ctx, index(t, spinInput(4000)), src)
	wantTimeout(t, err)
	if n := e.Abandoned(); n != 1 {
		t.Fatalf("abandoned calls after a guarded overrun = %d, want still 1", n)
	}
	testkit.WaitFor(t, 2*time.Minute, "the abandoned guest to return by itself", func() bool { return e.Runaways() == 0 })
}

// A watched guest that calls the host after its caller gave up is stopped
// there, and never reads the caller's input again: the caller reuses its
// index at once (run under -race).
func TestWatchedStoppedAtHostCall(t *testing.T) {
	e := newEngine(t, runtime.Config{CallTimeout: 50 * time.Millisecond, PoolSize: 2})
	m := load(t, e, "spinfield", runtime.WithGuard(runtime.GuardWatched))
	x := index(t, spinInput(1000))
	_, err := m.Map(context.Background(), x, src)
	wantTimeout(t, err)
	if n := e.Abandoned(); n != 1 {
		t.Fatalf("abandoned calls = %d, want 1 (the guest still spun)", n)
	}
	if err := x.Parse([]byte(`{"payload":{"x":"reused"}}`)); err != nil { // the caller's next message
		t.Fatal(err)
	}
	// The spin ends after about half a second; the loop of host calls that
	// follows would run for ever, but its first call stops it.
	testkit.WaitFor(t, time.Minute, "the abandoned guest to stop at its host call", func() bool { return e.Runaways() == 0 })
	if !m.Guarded() {
		t.Fatal("still unguarded after an overrun")
	}
}

// Closing the engine while an abandoned guest still runs neither waits for
// it nor breaks it.
func TestWatchedCloseWithRunaway(t *testing.T) {
	e, err := runtime.NewEngine(context.Background(), runtime.Config{CacheDir: testkit.CacheDir(t), CallTimeout: 50 * time.Millisecond, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, e, "spin", runtime.WithGuard(runtime.GuardWatched))
	_, err = m.Map(context.Background(), index(t, spinInput(2000)), src)
	wantTimeout(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("close with a runaway call: %v", err)
	}
	testkit.WaitFor(t, 2*time.Minute, "the abandoned guest to return", func() bool { return e.Runaways() == 0 })
}
