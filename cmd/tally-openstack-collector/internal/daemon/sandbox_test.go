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
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestBuiltinThatOverrunsIsAnsweredAtItsDeadline: a module loaded with the
// options the daemon gives its built-in modules unmetered (MAPPER_METERED=false:
// code without termination checks, watched) whose call runs far past its deadline is
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
	m, err := e.Load(ctx, "builtin:spin.wasm", wasm, builtinModuleOptions(&settings.Config{MapperBuiltinGuard: runtime.GuardWatched, MapperMetered: false})...)
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

// TestDefaultModulesStopTheirOwnRunaways: with the default settings the
// engine meters every module, and built-in and drop-in modules alike run
// without termination checks and unwatched; a module that loops for ever
// spends its budget and fails with reason budget, under a deadline an hour
// away: no call is handed over or abandoned, and the engine's overrun hook,
// where the daemon exits, is never called. The offline commands run the
// modules the same way.
func TestDefaultModulesStopTheirOwnRunaways(t *testing.T) {
	cfg := defaultSettings(t, "TALLY_OSC_MAPPER_CALL_TIMEOUT=1h")
	ctx := context.Background()
	ec := engineConfig(cfg, zerolog.Nop(), func(module string) { t.Errorf("%s overran its deadline: the daemon would exit", module) })
	if !ec.Metered || ec.Budget != runtime.DefaultBudget {
		t.Fatalf("engine metered %v, budget %d: want metered with the default budget", ec.Metered, ec.Budget)
	}
	e, err := runtime.NewEngine(ctx, ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	wasm := testkit.WAT(t, "../../../../runtime/testdata", "loop")
	for _, c := range []struct {
		name string
		opts []runtime.ModuleOption
	}{
		{"builtin:loop.wasm", builtinModuleOptions(cfg)},
		{"loop.wasm", dropInModuleOptions(cfg)},
		{"builtin:offline-loop.wasm", builtinModuleOptions(offline(cfg))},
		{"offline-loop.wasm", dropInModuleOptions(offline(cfg))},
	} {
		m, err := e.Load(ctx, c.name, wasm, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if m.Guarded() {
			t.Errorf("%s runs with termination checks", c.name)
		}
		var x jsonindex.Index
		if err := x.Parse([]byte(`{"event_type":"x.y"}`)); err != nil {
			t.Fatal(err)
		}
		_, err = m.Map(ctx, &x, runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"})
		var me *runtime.MapError
		if !errors.As(err, &me) || me.Reason != runtime.ReasonBudget {
			t.Fatalf("%s: %v, want reason budget", c.name, err)
		}
	}
	if n := e.Abandoned(); n != 0 {
		t.Fatalf("%d calls abandoned", n)
	}
}

// TestUnmeteredRestoresWatchedAndGuarded: MAPPER_METERED=false runs the
// built-in modules watched and the drop-in ones guarded, and the offline
// commands every module guarded.
func TestUnmeteredRestoresWatchedAndGuarded(t *testing.T) {
	cfg := defaultSettings(t, "TALLY_OSC_MAPPER_METERED=false")
	if engineConfig(cfg, zerolog.Nop(), nil).Metered {
		t.Fatal("MAPPER_METERED=false: the engine meters")
	}
	if g := builtinGuard(cfg); g != runtime.GuardWatched {
		t.Errorf("built-in guard %v, want watched", g)
	}
	if g := builtinGuard(offline(cfg)); g != runtime.GuardAlways {
		t.Errorf("offline built-in guard %v, want always", g)
	}
	ctx := context.Background()
	e, err := runtime.NewEngine(ctx, engineConfig(cfg, zerolog.Nop(), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	m, err := e.Load(ctx, "noop.wasm", testkit.WAT(t, "../../../../runtime/testdata", "noop"), dropInModuleOptions(cfg)...)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Guarded() {
		t.Error("unmetered, a drop-in module runs without termination checks")
	}
}
