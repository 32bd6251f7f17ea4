package runtime

import (
	"context"
	goruntime "runtime"
	"time"

	"github.com/rs/zerolog"
)

// Config holds the settings of an Engine. Zero values take the defaults.
type Config struct {
	CacheDir       string        // on-disk compilation cache; "" = none
	MemoryLimit    uint32        // bytes per instance; default 64 MiB (rounded down to 64 KiB pages)
	CallTimeout    time.Duration // default 250ms
	MaxEventBytes  int           // default 64 KiB
	MaxOutputBytes int           // default 1 MiB
	PoolSize       int           // max instances per module; default GOMAXPROCS
	Logger         zerolog.Logger

	// OnWatchedOverrun, when set, is called by the engine's watchdog when a
	// call of a GuardWatched module overruns its deadline, before its caller
	// is answered; module is the module's name@version. Its guest cannot be
	// stopped, and the next garbage collection would wait for it to return,
	// stopping every goroutine meanwhile; a daemon exits here (docs/abi.md,
	// "Runaway guests"). If it returns, the call is abandoned to its guest
	// and answered with ReasonTimeout (unless OverrunEndsProcess is set).
	OnWatchedOverrun func(module string)

	// OverrunEndsProcess declares that OnWatchedOverrun ends the process
	// and does not return. The hand-over of GuardWatched calls (each made
	// by a goroutine of the instance's own, so that the caller can be
	// answered at the deadline) then buys nothing, since nobody is
	// answered: watched calls run on their caller's goroutine, as
	// GuardNever calls do, and the watchdog still finds an overrun and
	// calls the hook. Ignored without OnWatchedOverrun.
	//
	// Should the hook return all the same, the call cannot be answered at
	// its deadline: its caller waits until the guest returns or calls the
	// host (where it is stopped), the call then fails with ReasonTimeout,
	// its instance is discarded, the module runs guarded from then on and
	// Module.Overruns counts it (Engine.Abandoned does not: nothing was
	// abandoned). That is GuardNever's behaviour at an overrun, logged as
	// an error, and the reason the hook's promise is a field of its own
	// rather than read from the hook's presence: a hook that only logs
	// keeps the hand-over and its answer at the deadline.
	OverrunEndsProcess bool

	// Metered runs every module through the metering pass before compiling
	// it (runtime/internal/metering; docs/abi.md, "Metering"): a call that
	// spends Budget instructions traps and fails with ReasonBudget, its
	// instance discarded, whatever the module's Guard; the guard and the
	// deadline stay, as a second line for what metering cannot see (a host
	// call that blocks). Off by default: the guard settings alone decide.
	Metered bool
	// Budget is the instructions a metered call may run (Wasm
	// instructions, counted as the pass counts them); default
	// DefaultBudget. Starting an instance (its start function and
	// _initialize) may run initBudgetFactor times as many.
	Budget int64
}

// Defaults.
const (
	defaultMemoryLimit    = 64 << 20
	DefaultCallTimeout    = 250 * time.Millisecond
	DefaultMaxEventBytes  = 64 << 10
	DefaultMaxOutputBytes = 1 << 20
	// DefaultBudget is 100 times the most any built-in module's call was
	// charged over the fixture corpus, rounded up (docs/performance.md,
	// "Metering"; TestBuiltinBudget keeps it so).
	DefaultBudget = 650_000_000
	// initBudgetFactor times Budget is the budget of starting an instance.
	initBudgetFactor = 100
	// BudgetSlice is the most a metered guest spends before it leaves its
	// compiled code for Go and comes back (runtime/internal/metering,
	// "Slices"): a garbage collection that must stop every goroutine waits
	// no longer than that for a running guest. The slowest guest per
	// charged instruction measured (a chain of 64-bit divisions) spends it
	// in about half a millisecond of CPU; no built-in call over the fixture
	// corpus is charged more than two slices (docs/abi.md, "Metering").
	BudgetSlice = 4_000_000
)

const wasmPage = 65536

func (c Config) withDefaults() Config {
	if c.MemoryLimit == 0 {
		c.MemoryLimit = defaultMemoryLimit
	}
	if c.MemoryLimit < wasmPage {
		c.MemoryLimit = wasmPage
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.Budget <= 0 {
		c.Budget = DefaultBudget
	}
	if c.PoolSize <= 0 {
		c.PoolSize = goruntime.GOMAXPROCS(0)
	}
	if c.OnWatchedOverrun == nil {
		c.OverrunEndsProcess = false // nothing would end it
	}
	return c
}

// Guard selects how a module's runaway calls are bounded.
type Guard uint8

const (
	// GuardAlways runs the module in code compiled with termination checks, so a
	// call that overruns its deadline is stopped there and its instance
	// discarded. This is the default: it is the only setting under which an
	// endless loop can never keep a core.
	GuardAlways Guard = iota
	// GuardUntrusted runs the module guarded until it has completed trustAfter
	// calls, none of which overran a quarter of the deadline, and unguarded
	// afterwards. An overrun by an unguarded call is detected and logged, and the
	// module goes back to guarded instances, but that call itself cannot be
	// stopped.
	GuardUntrusted
	// GuardNever runs the module without termination checks. An overrun is
	// detected and logged but cannot be stopped: only for modules that are
	// trusted not to loop.
	GuardNever
	// GuardWatched runs the module without termination checks, each call on a
	// goroutine of its instance's own while the caller waits for the result or
	// the deadline. A call that overruns is answered at its deadline with
	// ReasonTimeout, as under GuardAlways, but its guest cannot be stopped: the
	// instance is abandoned to its goroutine, which keeps a core until the
	// guest returns or calls the host (where it is stopped), and the module
	// runs guarded from then on (Module.Guarded; Engine.Runaways counts the
	// abandoned calls still running). For modules whose code is known, such as
	// the built-in ones: termination checks cost a Go guest two to four times
	// its mapping, handing the call to another goroutine about a microsecond.
	// With Config.OverrunEndsProcess the call runs on its caller's goroutine
	// instead (no hand-over): an overrun ends the process through
	// Config.OnWatchedOverrun, and nobody is answered.
	GuardWatched
)

// trustAfter is the number of well-behaved calls after which a GuardUntrusted
// module runs unguarded.
const trustAfter = 1000

func (g Guard) String() string {
	switch g {
	case GuardAlways:
		return "always"
	case GuardUntrusted:
		return "untrusted"
	case GuardNever:
		return "never"
	case GuardWatched:
		return "watched"
	}
	return "unknown"
}

// ModuleOption sets a per-module option of Load.
type ModuleOption func(*moduleOptions)

type moduleOptions struct {
	guard Guard
}

// WithGuard sets how runaway calls of the module are bounded (default GuardAlways).
func WithGuard(g Guard) ModuleOption {
	return func(o *moduleOptions) { o.guard = g }
}

type guardedCallKey struct{}

// GuardedCall returns a context under which Module.Map runs the module's code
// compiled with termination checks, whatever its Guard: for a call whose
// input may be one that loops and that nothing would deliver again if the
// process died on it (a redelivery, a replay, a message of an input without
// redelivery). A GuardNever module, which keeps no guarded code, ignores it.
func GuardedCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, guardedCallKey{}, true)
}

// isGuardedCall reports whether ctx was made by GuardedCall.
func isGuardedCall(ctx context.Context) bool {
	v, _ := ctx.Value(guardedCallKey{}).(bool)
	return v
}
