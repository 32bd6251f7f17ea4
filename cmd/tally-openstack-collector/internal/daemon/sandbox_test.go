package daemon

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// TestBuiltinThatOverrunsIsAnsweredAtItsDeadline: a module loaded with the
// options the daemon gives its built-in modules by default (code without
// termination checks, watched) whose call runs far past its deadline is
// answered at the deadline with a timeout: its caller stops waiting and the
// guest runs on by itself (abandoned). The module runs guarded from then on,
// so that the next overrun is stopped outright. Before, 1,000 good calls
// earned a built-in module code without termination checks, and its caller
// waited for a looping call for ever. (A garbage collection still waits for
// the abandoned guest, which is why the daemon exits at the deadline instead,
// runawayExit, and this engine has no OnWatchedOverrun: docs/abi.md,
// "Runaway guests". Collections are off meanwhile, for the same reason.)
func TestBuiltinThatOverrunsIsAnsweredAtItsDeadline(t *testing.T) {
	old := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	wasm := testkit.WAT(t, "../../../../runtime/testdata", "spin")
	ctx := context.Background()
	e, err := runtime.NewEngine(ctx, runtime.Config{PoolSize: 1, CallTimeout: 100 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	m, err := e.Load(ctx, "builtin:spin.wasm", wasm, builtinModuleOptions(&settings.Config{MapperBuiltinGuard: runtime.GuardWatched})...)
	if err != nil {
		t.Fatal(err)
	}
	if m.Guarded() {
		t.Fatal("a built-in module starts guarded")
	}
	src := runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"}
	mapIt := func(doc string) error {
		var x jsonindex.Index
		if err := x.Parse([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := m.Map(ctx, &x, src)
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("the call still runs after 30 s: its delivery is held")
		}
		return nil
	}
	if err := mapIt(`{"event_type":"x.y"}`); err != nil {
		t.Fatal(err)
	}
	// Seconds of work for the guest, unguarded: the first call is abandoned
	// at its deadline, the second, guarded, stopped there.
	for i, pad := range []int{3000, 1000} {
		err := mapIt(`{"event_type":"x.y","pad":"` + strings.Repeat("a", pad) + `"}`)
		var me *runtime.MapError
		if !errors.As(err, &me) || me.Reason != runtime.ReasonTimeout {
			t.Fatalf("overrun %d: %v, want a timeout", i, err)
		}
		if n := e.Abandoned(); n != 1 {
			t.Fatalf("after overrun %d: %d calls abandoned, want 1 (the first)", i, n)
		}
		if !m.Guarded() {
			t.Fatalf("after overrun %d: the module still runs unguarded", i)
		}
	}
	testkit.WaitFor(t, 2*time.Minute, "the abandoned call to end", func() bool { return e.Runaways() == 0 })
}
