package runtime_test

import (
	"context"
	"errors"
	goruntime "runtime"
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

// overrunHeldByHook maps an input that overruns with m on a goroutine of its
// own and waits for the overrun hook to report want on hooked; the caller
// must not be answered while the hook runs. It then lets the hook return by
// closing proceed, and wants the call answered with a timeout.
func overrunHeldByHook(t *testing.T, m *runtime.Module, hooked <-chan string, proceed chan<- struct{}, want string) {
	t.Helper()
	answered := make(chan error, 1)
	go func() {
		_, err := m.Map(context.Background(), index(t, spinInput(1000)), src)
		answered <- err
	}()
	if got := <-hooked; got != want {
		t.Fatalf("hook called with %q, want %s", got, want)
	}
	select {
	case err := <-answered:
		t.Fatalf("the caller was answered (%v) before the hook returned", err)
	default:
	}
	close(proceed)
	wantTimeout(t, <-answered)
}

// wantGuardedAfterOverrun checks m after its one overrun: counted, the
// module guarded from then on, and the overrun instance not kept.
func wantGuardedAfterOverrun(t *testing.T, m *runtime.Module) {
	t.Helper()
	if n := m.Overruns(); n != 1 {
		t.Fatalf("overruns = %d, want 1", n)
	}
	if !m.Guarded() {
		t.Fatal("the module still runs unguarded after an overrun")
	}
	if n := m.Instances(); n != 0 {
		t.Fatalf("instances = %d, want 0 (the overrun one is not kept)", n)
	}
}

// wantNoHook fails the test when the overrun hook reported a module on
// hooked: a guarded call's overrun must not call it.
func wantNoHook(t *testing.T, hooked <-chan string) {
	t.Helper()
	select {
	case mod := <-hooked:
		t.Fatalf("OnWatchedOverrun called for %s by a guarded call", mod)
	default:
	}
}

// A watched (unguarded) call that overruns is answered at its deadline while
// its guest still runs; the abandoned call is counted until the guest
// returns, and the module runs guarded from then on.
func TestWatchedOverrunAnsweredAtDeadline(t *testing.T) {
	testkit.NoGC(t)
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
	wantGuardedAfterOverrun(t, m)
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
	testkit.NoGC(t)
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
	testkit.NoGC(t)
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

// A watched call that overruns calls Config.OnWatchedOverrun before its
// caller is answered: a daemon can exit there, before anything it does on
// the answer (a dead letter, an acknowledgement). When the hook returns, the
// call is abandoned as without it.
func TestWatchedOverrunHookBeforeAnswer(t *testing.T) {
	testkit.NoGC(t)
	called := make(chan string, 1)
	proceed := make(chan struct{})
	e := newEngine(t, runtime.Config{CallTimeout: 50 * time.Millisecond, PoolSize: 1,
		OnWatchedOverrun: func(module string) {
			called <- module
			<-proceed
		}})
	m := load(t, e, "spin", runtime.WithGuard(runtime.GuardWatched))
	overrunHeldByHook(t, m, called, proceed, "spin@1.0.0")
	if n := e.Abandoned(); n != 1 {
		t.Fatalf("abandoned calls = %d, want 1", n)
	}
	testkit.WaitFor(t, 2*time.Minute, "the abandoned guest to return", func() bool { return e.Runaways() == 0 })
}

// Under runtime.GuardedCall a watched module runs its guarded code: a call
// that overruns is stopped at its deadline by the termination checks, never
// abandoned, the hook is not called, and the module's other calls still run
// unguarded.
func TestGuardedCallOfWatchedModule(t *testing.T) {
	testkit.NoGC(t)
	hooked := make(chan string, 4)
	e := newEngine(t, runtime.Config{CallTimeout: 50 * time.Millisecond, PoolSize: 2,
		OnWatchedOverrun: func(module string) { hooked <- module }})
	m := load(t, e, "spin", runtime.WithGuard(runtime.GuardWatched))
	ctx := runtime.GuardedCall(context.Background())
	if !runtime.IsGuardedCall(ctx) || runtime.IsGuardedCall(context.Background()) {
		t.Fatal("IsGuardedCall does not tell a GuardedCall context")
	}
	if res, err := m.Map(ctx, index(t, `{"a":1}`), src); err != nil || len(res.Events) != 0 {
		t.Fatalf("short input, guarded: %v, %v", res, err)
	}
	for range 2 {
		_, err := m.Map(ctx, index(t, spinInput(4000)), src)
		wantTimeout(t, err)
	}
	if n := e.Abandoned(); n != 0 {
		t.Fatalf("abandoned calls = %d, want 0: a guarded call is stopped, not abandoned", n)
	}
	if n := m.Overruns(); n != 0 {
		t.Fatalf("overruns = %d, want 0", n)
	}
	wantNoHook(t, hooked)
	if m.Guarded() {
		t.Fatal("the module runs guarded by default after guarded calls' timeouts")
	}
	// The module's own calls still run watched: an overrun is abandoned.
	_, err := m.Map(context.Background(), index(t, spinInput(2000)), src)
	wantTimeout(t, err)
	if n := e.Abandoned(); n != 1 {
		t.Fatalf("abandoned calls after an unguarded overrun = %d, want 1", n)
	}
	if mod := <-hooked; mod != "spin@1.0.0" {
		t.Fatalf("hook called with %q", mod)
	}
	if n := m.Instances(); n > 2 {
		t.Fatalf("instances = %d, over the pool size of 2", n)
	}
	testkit.WaitFor(t, 2*time.Minute, "the abandoned guest to return", func() bool { return e.Runaways() == 0 })
}

// handOverGoroutines counts the goroutines of watched instances that make
// their guest calls for their caller (the hand-over), from a dump of every
// goroutine's stack.
func handOverGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "runtime.(*instance).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// daemonConfig is an engine configuration as the daemon's: a hook that
// (in the daemon) ends the process, and the engine told so. hooked receives
// the module of each overrun; the hook returns once proceed is closed.
func daemonConfig(hooked chan<- string, proceed <-chan struct{}) runtime.Config {
	return runtime.Config{CallTimeout: 50 * time.Millisecond, PoolSize: 4,
		OnWatchedOverrun: func(module string) {
			hooked <- module
			<-proceed
		},
		OverrunEndsProcess: true}
}

// With an overrun hook that ends the process (Config.OverrunEndsProcess),
// watched calls run on their caller's goroutine: a pool of watched
// instances starts no goroutine, where the same pool with a hook that does
// not end the process starts one per instance (the hand-over).
func TestWatchedWithoutHandOverStartsNoGoroutine(t *testing.T) {
	testkit.NoGC(t)
	// Instances of earlier tests' engines end their goroutines when closed
	// or, abandoned, when their guest returns.
	testkit.WaitFor(t, 2*time.Minute, "the hand-over goroutines of earlier tests to end", func() bool { return handOverGoroutines() == 0 })
	ctx := context.Background()
	const pool = 4
	for _, c := range []struct {
		name       string
		endsProc   bool
		goroutines int
	}{
		{"the daemon's configuration", true, 0},
		{"a hook that returns", false, pool},
	} {
		proceed := make(chan struct{})
		close(proceed)
		cfg := daemonConfig(make(chan string, pool+1), proceed)
		cfg.OverrunEndsProcess = c.endsProc
		cfg.CallTimeout = time.Minute // no overrun here, however loaded the machine
		e := newEngine(t, cfg)
		beforeRun := handOverGoroutines()
		m := load(t, e, "spin", runtime.WithGuard(runtime.GuardWatched))
		// Counted from the first instance on: a compilation's workers may
		// still be on their way out when Load returns.
		before := goruntime.NumGoroutine()
		runtime.Grow(t, m, pool, index(t, `{"a":1}`), src)
		for range 20 {
			if res, err := m.Map(ctx, index(t, `{"a":1}`), src); err != nil || len(res.Events) != 0 {
				t.Fatalf("%s: %v, %v", c.name, res, err)
			}
		}
		if n := m.Instances(); n != pool {
			t.Fatalf("%s: instances = %d, want %d", c.name, n, pool)
		}
		if m.Guarded() {
			t.Fatalf("%s: the module runs guarded", c.name)
		}
		if got := handOverGoroutines() - beforeRun; got != c.goroutines {
			t.Errorf("%s: %d hand-over goroutines for %d watched instances, want %d", c.name, got, pool, c.goroutines)
		}
		// The first instance's goroutine, if any, was there before.
		if got, want := goruntime.NumGoroutine()-before, c.goroutines*(pool-1)/pool; got != want {
			t.Errorf("%s: %d more goroutines after growing the pool from 1 to %d instances, want %d", c.name, got, pool, want)
		}
	}
}

// In the daemon's configuration a watched call that overruns still calls
// the hook, from the engine's watchdog while the guest runs on the caller's
// goroutine, before the caller is answered. Should the hook return (it
// ends the process in the daemon), the caller gets its answer when the
// guest calls the host, where it is stopped: a timeout, nothing abandoned,
// and the module runs guarded from then on.
func TestWatchedWithoutHandOverOverrunCallsHook(t *testing.T) {
	testkit.NoGC(t)
	hooked := make(chan string, 1)
	proceed := make(chan struct{})
	e := newEngine(t, daemonConfig(hooked, proceed))
	// spinfield spins about half a second for 1 KB of input, then calls
	// the host in a loop that never ends but for that call's stop.
	m := load(t, e, "spinfield", runtime.WithGuard(runtime.GuardWatched))
	overrunHeldByHook(t, m, hooked, proceed, "spinfield@1.0.0")
	if n := e.Abandoned(); n != 0 {
		t.Fatalf("abandoned calls = %d, want 0: without a hand-over nothing is abandoned", n)
	}
	if n := e.Runaways(); n != 0 {
		t.Fatalf("runaways = %d, want 0", n)
	}
	wantGuardedAfterOverrun(t, m)
	// The module goes on, guarded: the next overrun is stopped at its
	// deadline by the termination checks, and the hook is not called.
	_, err := m.Map(context.Background(), index(t, spinInput(4000)), src)
	wantTimeout(t, err)
	wantNoHook(t, hooked)
	if n := e.Abandoned(); n != 0 {
		t.Fatalf("abandoned calls after a guarded overrun = %d, want 0", n)
	}
}
