package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/tally-billing/tally-openstack-collector/runtime/internal/metering"
)

// Engine compiles, validates and runs mapper modules. It holds two wazero
// runtimes sharing one compilation cache: one compiles code with termination
// checks (guarded), the other without. Safe for concurrent use.
type Engine struct {
	cfg     Config
	log     zerolog.Logger
	cache   wazero.CompilationCache
	guarded wazero.Runtime
	free    wazero.Runtime
	modCfg  wazero.ModuleConfig

	mu      sync.Mutex
	closed  bool
	modules map[*Module]struct{}

	// compileMu serialises compilations. Concurrent loads of one module's
	// bytes were seen to panic inside wazero 1.12 (NewFunction, index out
	// of range); built-in modules loaded on first use can meet a reload
	// loading the same bytes. Each compilation uses every core already.
	compileMu sync.Mutex

	start   time.Time // origin of clock
	imu     sync.Mutex
	insts   map[*instance]struct{} // live instances, scanned by the watchdog
	stopDog chan struct{}
	dogDone chan struct{}

	runaways  atomic.Int64 // GuardWatched calls abandoned at their deadline, still running
	abandoned atomic.Int64 // GuardWatched calls abandoned at their deadline, in all
}

// Abandoned returns how many calls of GuardWatched modules were abandoned at
// their deadline so far: each overran it and was answered with a timeout
// while its guest still ran.
func (e *Engine) Abandoned() int64 { return e.abandoned.Load() }

// Runaways returns how many calls of GuardWatched modules were abandoned at
// their deadline and are still running in their guest: each keeps a core
// until its guest returns or calls the host. Zero when all is well; a process
// with a call that never ends has lost that core until it restarts.
func (e *Engine) Runaways() int { return int(e.runaways.Load()) }

// clock is a monotonic time in nanoseconds, the unit of instance deadlines.
func (e *Engine) clock() int64 { return int64(time.Since(e.start)) }

func (e *Engine) track(inst *instance) {
	e.imu.Lock()
	e.insts[inst] = struct{}{}
	e.imu.Unlock()
}

func (e *Engine) untrack(inst *instance) {
	e.imu.Lock()
	delete(e.insts, inst)
	e.imu.Unlock()
}

// watchdogTick is how often the watchdog looks for calls past their deadline:
// an eighth of the call timeout, between 1 and 25 ms.
func watchdogTick(timeout time.Duration) time.Duration {
	return min(max(timeout/8, time.Millisecond), 25*time.Millisecond)
}

// watchdog expires calls that overran their deadline. One goroutine per
// engine; a call only stores its deadline, so bounding calls costs nothing per
// call beyond two clock reads.
func (e *Engine) watchdog() {
	defer close(e.dogDone)
	t := time.NewTicker(watchdogTick(e.cfg.CallTimeout))
	defer t.Stop()
	var due []*instance
	var dues []int64
	for {
		select {
		case <-e.stopDog:
			return
		case <-t.C:
		}
		now := e.clock()
		due, dues = due[:0], dues[:0]
		e.imu.Lock()
		for inst := range e.insts {
			if d := inst.deadline.Load(); d > 0 && now > d {
				due = append(due, inst)
				dues = append(dues, d)
			}
		}
		e.imu.Unlock()
		for i, inst := range due {
			inst.expire(dues[i])
		}
	}
}

// NewEngine starts an engine with cfg (zero fields take the defaults).
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	e := &Engine{cfg: cfg, log: cfg.Logger, modules: map[*Module]struct{}{},
		start: time.Now(), insts: map[*instance]struct{}{}, stopDog: make(chan struct{}), dogDone: make(chan struct{})}
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", cfg.CacheDir, err)
		}
		e.cache = c
	} else {
		e.cache = wazero.NewCompilationCache()
	}
	go e.watchdog() // from here on failures go through Close, which stops it
	pages := cfg.MemoryLimit / wasmPage
	base := wazero.NewRuntimeConfigCompiler().
		WithCompilationCache(e.cache).
		WithMemoryLimitPages(pages).
		WithCoreFeatures(api.CoreFeaturesV2)
	e.guarded = wazero.NewRuntimeWithConfig(ctx, base.WithCloseOnContextDone(true))
	e.free = wazero.NewRuntimeWithConfig(ctx, base.WithCloseOnContextDone(false))
	for _, rt := range []wazero.Runtime{e.guarded, e.free} {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			_ = e.Close(ctx)
			return nil, fmt.Errorf("instantiate wasi: %w", err)
		}
		if err := instantiateHost(ctx, rt); err != nil {
			_ = e.Close(ctx)
			return nil, fmt.Errorf("instantiate host module: %w", err)
		}
	}
	// The clocks, the sleep and the random source are the instance's own
	// (sandbox.go), set in newInstance.
	e.modCfg = wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions()
	return e, nil
}

// Close closes every loaded module (waiting for calls in flight), then the
// runtimes. Calls after Close fail with ErrClosed.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	mods := make([]*Module, 0, len(e.modules))
	for m := range e.modules {
		mods = append(mods, m)
	}
	e.mu.Unlock()
	var errs []error
	for _, m := range mods {
		errs = append(errs, m.Close(ctx))
	}
	if e.stopDog != nil {
		select {
		case <-e.dogDone:
		default:
			close(e.stopDog)
			<-e.dogDone
		}
	}
	for _, rt := range []wazero.Runtime{e.guarded, e.free} {
		if rt != nil {
			errs = append(errs, rt.Close(ctx))
		}
	}
	if e.cache != nil {
		errs = append(errs, e.cache.Close(ctx))
	}
	return errors.Join(errs...)
}

func (e *Engine) runtime(guarded bool) wazero.Runtime {
	if guarded {
		return e.guarded
	}
	return e.free
}

// Signatures the ABI requires of the guest's exports and allows for imports.
var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64

	requiredExports = []struct {
		name            string
		params, results []api.ValueType
	}{
		{"tally_abi_version_1", nil, nil},
		{"tally_alloc", []api.ValueType{i32}, []api.ValueType{i32}},
		{"tally_manifest", nil, []api.ValueType{i64}},
		{"tally_map", []api.ValueType{i32, i32}, []api.ValueType{i64}},
	}
	tallyImports = map[string]struct{ params, results []api.ValueType }{
		"log":    {[]api.ValueType{i32, i32, i32}, nil},
		"field":  {[]api.ValueType{i32, i32}, []api.ValueType{i64}},
		"fields": {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
		"emit":   {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	}
)

const (
	hostModule = "tally"
	wasiModule = "wasi_snapshot_preview1"
)

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sigString(params, results []api.ValueType) string {
	s := "("
	for i, p := range params {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	s += ")->("
	for i, r := range results {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(r)
	}
	return s + ")"
}

// validateCompiled checks the imports and exports of a compiled module.
func validateCompiled(cm wazero.CompiledModule) error {
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		switch mod {
		case wasiModule:
			// Checked at instantiation: only the functions wazero implements exist.
		case hostModule:
			want, ok := tallyImports[name]
			if !ok {
				return fmt.Errorf("imports unknown host function %s.%s", mod, name)
			}
			if !sameTypes(def.ParamTypes(), want.params) || !sameTypes(def.ResultTypes(), want.results) {
				return fmt.Errorf("imports %s.%s with signature %s, want %s", mod, name,
					sigString(def.ParamTypes(), def.ResultTypes()), sigString(want.params, want.results))
			}
		default:
			return fmt.Errorf("imports %s.%s: only the modules %q and %q are offered", mod, name, hostModule, wasiModule)
		}
	}
	for _, mem := range cm.ImportedMemories() {
		mod, name, _ := mem.Import()
		return fmt.Errorf("imports memory %s.%s: a module must define its own memory", mod, name)
	}
	exports := cm.ExportedFunctions()
	for _, want := range requiredExports {
		def, ok := exports[want.name]
		if !ok {
			if want.name == "tally_abi_version_1" {
				return errors.New("no ABI marker: export tally_abi_version_1 is missing (this host speaks ABI v1)")
			}
			return fmt.Errorf("missing export %s", want.name)
		}
		if !sameTypes(def.ParamTypes(), want.params) || !sameTypes(def.ResultTypes(), want.results) {
			return fmt.Errorf("export %s has signature %s, want %s", want.name,
				sigString(def.ParamTypes(), def.ResultTypes()), sigString(want.params, want.results))
		}
	}
	if init, ok := exports["_initialize"]; ok && (len(init.ParamTypes()) != 0 || len(init.ResultTypes()) != 0) {
		return errors.New("export _initialize must take and return nothing")
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		return errors.New("missing export memory")
	}
	return nil
}

// Load compiles wasm (or takes it from the compilation cache), validates it
// against the ABI, starts one instance and reads its manifest. name identifies
// the module in errors and logs: a file path, or "builtin:nova.wasm". A module
// that does not meet the ABI fails with an error naming it and the reason and
// wrapping ErrInvalidModule.
func (e *Engine) Load(ctx context.Context, name string, wasm []byte, opts ...ModuleOption) (*Module, error) {
	var o moduleOptions
	for _, opt := range opts {
		opt(&o)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidModule, name, fmt.Sprintf(format, args...))
	}
	if e.cfg.Metered {
		metered, err := metering.Meter(wasm, metering.Options{Initial: e.initBudget(), Slice: BudgetSlice})
		if err != nil {
			return nil, invalid("%v", err)
		}
		wasm = metered
	}
	guarded := o.guard != GuardNever && o.guard != GuardWatched
	cm, err := e.compile(ctx, guarded, wasm)
	if err != nil {
		return nil, invalid("compile: %v", err)
	}
	if err := validateCompiled(cm); err != nil {
		_ = cm.Close(ctx)
		return nil, invalid("%v", err)
	}
	m := newModule(e, name, o)
	if o.guard == GuardUntrusted || o.guard == GuardWatched {
		m.wasm = wasm // the other variant is compiled when needed
	}
	m.compiled[boolIdx(guarded)] = cm
	inst, err := m.newInstance(ctx, guarded)
	if err != nil {
		_ = cm.Close(ctx)
		return nil, invalid("%v", err)
	}
	mf, err := inst.readManifest()
	if err != nil {
		inst.close()
		_ = cm.Close(ctx)
		return nil, invalid("%v", err)
	}
	m.setManifest(mf)
	m.idle = append(m.idle, inst)
	m.count = 1

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = m.Close(ctx)
		return nil, ErrClosed
	}
	e.modules[m] = struct{}{}
	e.mu.Unlock()
	m.log.Debug().Str("guard", o.guard.String()).Msg("mapper loaded")
	return m, nil
}

// initBudget is the budget of starting a metered instance: its start
// function and _initialize.
func (e *Engine) initBudget() int64 {
	if e.cfg.Budget > math.MaxInt64/initBudgetFactor {
		return math.MaxInt64
	}
	return e.cfg.Budget * initBudgetFactor
}

// compile compiles wasm (or takes it from the compilation cache), one
// compilation at a time.
func (e *Engine) compile(ctx context.Context, guarded bool, wasm []byte) (wazero.CompiledModule, error) {
	e.compileMu.Lock()
	defer e.compileMu.Unlock()
	cm, err := e.runtime(guarded).CompileModule(compileCtx(ctx), wasm)
	if err == nil || e.cfg.CacheDir == "" || !isCacheEntryError(err) {
		return cm, err
	}
	// An entry of the compilation cache could not be read back (truncated,
	// damaged): wazero fails the compilation rather than compile again.
	// The damaged entries are removed and the module compiled anew, which
	// writes a good entry in their place.
	removed, perr := purgeDamagedEntries(e.cfg.CacheDir)
	e.log.Warn().Err(err).Strs("removed", removed).AnErr("purge_error", perr).
		Msg("compilation cache entry damaged; removed, compiling the module again")
	return e.runtime(guarded).CompileModule(compileCtx(ctx), wasm)
}

func (e *Engine) forget(m *Module) {
	e.mu.Lock()
	delete(e.modules, m)
	e.mu.Unlock()
}

// compileCtx lets wazero compile functions on every available core.
func compileCtx(ctx context.Context) context.Context {
	return experimental.WithCompilationWorkers(ctx, goruntime.GOMAXPROCS(0))
}

func boolIdx(b bool) int {
	if b {
		return 1
	}
	return 0
}
