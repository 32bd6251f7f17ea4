package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// initTimeout bounds instantiation and _initialize.
const initTimeout = 10 * time.Second

// deadlineFired marks, in instance.deadline, a call the watchdog found past its
// deadline.
const deadlineFired = -1

// callCtx is the context of every call into an instance. It is allocated once
// per instance and reused; its Done channel is closed when a call overruns its
// deadline, after which the instance is never used again. Host functions find
// their instance through it.
type callCtx struct {
	inst  *instance
	done  chan struct{}
	fired atomic.Bool
}

var _ context.Context = (*callCtx)(nil)

func (c *callCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(any) any               { return nil }
func (c *callCtx) Err() error {
	if c.fired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// instance is one instantiated module. It is used by one call at a time.
type instance struct {
	m       *Module
	mod     api.Module
	mem     api.Memory
	alloc   api.Function
	mapf    api.Function
	guarded bool
	cc      callCtx
	// deadline of the call in progress, in Engine.clock time; 0 when idle,
	// deadlineFired once the watchdog found it overran.
	deadline atomic.Int64
	oom      atomic.Bool
	budget   api.MutableGlobal // Config.Metered: the budget global, the current slice (metering.go)
	reserve  api.MutableGlobal // Config.Metered: the rest of the call's budget
	given    int64             // the budget the current guest call was given
	lastDur  time.Duration
	clk      vclock    // the guest's clocks (sandbox.go)
	rnd      guestRand // the guest's random source (sandbox.go)

	// watched marks the unguarded code of a GuardWatched module: an overrun
	// calls Config.OnWatchedOverrun and the module runs guarded afterwards.
	// Unless the engine's hook ends the process (Config.OverrunEndsProcess),
	// such an instance runs its guest calls on a goroutine of its own
	// (run), the hand-over: calls carries a function to call with stack,
	// results its error; calls is nil without a hand-over.
	// state is per guest call: stRunning while the guest runs, then
	// stReturned (set by run) or stAbandoned (set by the caller at the
	// deadline), whichever comes first. hostMu is held by the host functions
	// that read the caller's data (the input index, the random seed), so that
	// an abandoned guest never reads what its caller has gone on to reuse.
	watched bool
	calls   chan api.Function
	results chan error
	state   atomic.Int32
	hostMu  sync.Mutex
	job     struct { // the tally_map call handed over (guestCall(nil))
		input  []byte
		ptr, n uint32
		reason Reason
	}

	in       *jsonindex.Index // input of the call in progress (tally.field)
	cursor   jsonindex.Cursor // answers the lookups of the call in progress
	paths    [][]byte         // tally.fields: the paths of one chunk, in guest memory
	slots    []int32          // their slots in the call's table
	spans    []jsonindex.Span // their answers
	out      jsonindex.Index  // output parser, reused
	ev       eventWriter      // the event contract, applied to each event
	ids      idSeed           // derives event ids (Source.DeriveID)
	children []jsonindex.Child
	path     []byte
	src      sourceMember // the "source" member of this call
	buf      []byte       // events being built
	ends     []int
	keys     []ledger.Keys // of the events being built
	emit     emitState     // tally.emit (emit.go)
	stack    [2]uint64
}

func (m *Module) newInstance(ctx context.Context, guarded bool) (*instance, error) {
	cm, err := m.compiledVariant(ctx, guarded)
	if err != nil {
		return nil, err
	}
	inst := &instance{m: m, guarded: guarded}
	inst.cc.inst = inst
	inst.cc.done = make(chan struct{})
	inst.rnd.cc = &inst.cc
	stdout := &lineWriter{log: m.glog, level: levelStdout, stream: "stdout"}
	stderr := &lineWriter{log: m.glog, level: levelStderr, stream: "stderr", oom: &inst.oom}
	inst.clk.now = virtualStart
	inst.beginClock(int64(initTimeout), nil)
	cfg := m.e.modCfg.WithStdout(stdout).WithStderr(stderr).
		WithNanotime(inst.nanotime, sys.ClockResolution(1)).
		WithWalltime(inst.walltime, sys.ClockResolution(1)).
		WithNanosleep(inst.nanosleep).
		WithOsyield(func() {}).
		WithRandSource(&inst.rnd)

	ictx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	mod, err := m.e.runtime(guarded).InstantiateModule(ictx, cm, cfg)
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	inst.mod = mod
	inst.mem = mod.Memory()
	inst.alloc = mod.ExportedFunction("tally_alloc")
	inst.mapf = mod.ExportedFunction("tally_map")
	if inst.mem == nil || inst.alloc == nil || inst.mapf == nil {
		_ = mod.Close(ctx)
		return nil, errors.New("exports missing after instantiation")
	}
	if err := inst.findBudget(); err != nil {
		_ = mod.Close(ctx)
		return nil, err
	}
	if init := mod.ExportedFunction("_initialize"); init != nil {
		if _, err := init.Call(ictx); err != nil {
			_ = mod.Close(ctx)
			if inst.oom.Load() {
				return nil, fmt.Errorf("_initialize: %w: %w", errMemory, err)
			}
			return nil, fmt.Errorf("_initialize: %w", err)
		}
	}
	if !guarded && m.opts.guard == GuardWatched {
		inst.watched = true
		if !m.e.cfg.OverrunEndsProcess {
			inst.calls = make(chan api.Function)
			inst.results = make(chan error, 1)
			go inst.run() //nolint:gosec // G118: the instance's own goroutine lives as long as the instance, past any one call
		}
	}
	m.e.track(inst)
	return inst, nil
}

// The states of a watched guest call (instance.state).
const (
	stRunning int32 = iota
	stReturned
	stAbandoned
)

// run is the goroutine of a GuardWatched instance: it makes the guest calls
// handed over by guestCall, until the instance is closed or abandoned.
func (inst *instance) run() {
	for fn := range inst.calls {
		var err error
		if fn == nil {
			inst.job.ptr, inst.job.n, inst.job.reason, err = inst.invokeHere(inst.job.input)
		} else {
			err = fn.CallWithStack(&inst.cc, inst.stack[:])
		}
		if !inst.state.CompareAndSwap(stRunning, stReturned) {
			// Abandoned by its caller: the guest has returned at last (or was
			// stopped at a host call); nobody waits for it.
			inst.m.e.runaways.Add(-1)
			inst.m.log.Warn().Err(err).Msg("an abandoned mapper call has ended; its core is free again")
			_ = inst.mod.Close(context.Background())
			return
		}
		inst.results <- err
	}
}

// guestCall calls fn with inst.stack as its parameters and results, or, with
// fn nil, makes the whole tally_map call of inst.job (invokeHere): on the
// caller's goroutine, or for a watched instance with a hand-over on the
// instance's own, waiting until the guest returns or the watchdog finds the
// call past its deadline. In the latter case the instance is abandoned
// (errAbandoned). One hand-over per call: the two goroutine switches cost
// more than the tally_alloc call they would be spent on. A watched instance
// of an engine whose overrun hook ends the process has no hand-over: the
// watchdog sees its deadline the same way (the instance is tracked and the
// deadline stored before the call), and the hook ends the process while the
// guest still runs on the caller's goroutine.
func (inst *instance) guestCall(fn api.Function) error {
	if inst.calls == nil {
		if fn == nil {
			var err error
			inst.job.ptr, inst.job.n, inst.job.reason, err = inst.invokeHere(inst.job.input)
			return err
		}
		return fn.CallWithStack(&inst.cc, inst.stack[:])
	}
	inst.state.Store(stRunning)
	inst.calls <- fn
	select {
	case err := <-inst.results:
		return err
	case <-inst.cc.done:
	}
	if !inst.state.CompareAndSwap(stRunning, stAbandoned) {
		return <-inst.results // it returned as the deadline fired
	}
	inst.m.e.runaways.Add(1)
	inst.m.e.abandoned.Add(1)
	// Wait for a host call in progress; any later one stops the guest.
	inst.hostMu.Lock()
	inst.hostMu.Unlock() //nolint:staticcheck // SA2001: an empty critical section, a barrier for the host calls in progress
	return errAbandoned
}

// isAbandoned reports whether the instance was left to a runaway guest call.
func (inst *instance) isAbandoned() bool { return inst.state.Load() == stAbandoned }

// expire is called by the watchdog with the deadline it saw; it marks the call
// as overrun unless that call has ended in the meantime.
func (inst *instance) expire(d int64) {
	if !inst.deadline.CompareAndSwap(d, deadlineFired) {
		return
	}
	if inst.guarded {
		inst.cc.fired.Store(true)
		close(inst.cc.done) // wazero's watcher stops the guest
		return
	}
	if inst.watched {
		if f := inst.m.e.cfg.OnWatchedOverrun; f != nil {
			id := inst.m.id
			if id == "" { // the manifest's call, at load
				id = inst.m.name
			}
			f(id) // before the caller is answered: a daemon exits here
		}
		inst.cc.fired.Store(true)
		close(inst.cc.done) // with a hand-over, the caller stops waiting (guestCall)
		inst.m.demote()
		if inst.calls == nil {
			// No hand-over, and the hook said it would end the process but
			// returned: the caller runs the guest itself and is answered
			// when the guest returns or calls the host (stopped there).
			inst.m.log.Error().Dur("deadline", inst.m.e.cfg.CallTimeout).
				Msg("a watched mapper call overran its deadline and the overrun hook returned instead of ending the process: its caller waits until the guest returns or calls the host; the module now runs guarded")
		}
		return
	}
	inst.m.untrust()
}

func (inst *instance) close() {
	inst.m.e.untrack(inst)
	if inst.isAbandoned() {
		return // its guest still runs: run closes the module when it returns
	}
	if inst.calls != nil {
		close(inst.calls) // ends run
	}
	if inst.mod != nil {
		_ = inst.mod.Close(context.Background())
	}
}

func (inst *instance) readManifest() (Manifest, error) {
	fn := inst.mod.ExportedFunction("tally_manifest")
	inst.beginClock(int64(initTimeout), nil)
	d := inst.m.e.clock() + int64(initTimeout)
	inst.deadline.Store(d)
	inst.setBudget(inst.m.e.initBudget())
	err := inst.guestCall(fn)
	if !inst.deadline.CompareAndSwap(d, 0) && err == nil {
		err = errors.New("deadline passed")
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("tally_manifest failed: %w", err)
	}
	ptr, n := api.DecodeU32(inst.stack[0]>>32), api.DecodeU32(inst.stack[0])
	b, ok := inst.mem.Read(ptr, n)
	if !ok {
		return Manifest{}, fmt.Errorf("tally_manifest answered bytes [%d,+%d) outside memory of %d bytes", ptr, n, inst.mem.Size())
	}
	mf, err := parseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("bad manifest: %w", err)
	}
	return mf, nil
}

// maxSpan is the largest offset or length the tally.field result can carry.
const maxSpan = 1<<28 - 1

// call runs one mapping. On error the reason says why; the caller discards the
// instance unless the reason is ReasonGuestError.
func (inst *instance) call(in *jsonindex.Index, src Source, timeout time.Duration) (Result, Reason, error) {
	var input []byte
	if in != nil {
		input = in.Bytes()
	}
	if len(input) > maxSpan {
		return Result{}, ReasonABI, fmt.Errorf("input of %d bytes over the ABI limit of %d", len(input), maxSpan)
	}
	if timeout <= 0 {
		return Result{}, ReasonTimeout, errors.New("deadline passed before the call")
	}
	inst.in = in
	// Lookups of this call (tally.field and tally.fields) go through one
	// cursor: a path with the same parent as the one before ("payload.b"
	// after "payload.a") resumes from that parent.
	inst.cursor.Reset(in)
	inst.beginClock(int64(timeout), input)
	e := inst.m.e
	start := e.clock()
	d := start + int64(timeout)
	inst.deadline.Store(d)
	inst.setBudget(e.cfg.Budget)
	inst.emit.reset()
	ptr, len32, reason, err := inst.invoke(input)
	fired := !inst.deadline.CompareAndSwap(d, 0)
	if inst.isAbandoned() {
		// Its guest may still run and read the call's state: leave it be.
		return Result{}, ReasonTimeout, fmt.Errorf("call overran its deadline of %v: %w", timeout, err)
	}
	inst.lastDur = time.Duration(e.clock() - start)
	inst.noteCharge()
	inst.in = nil
	inst.cursor.Reset(nil)
	inst.rnd.input = nil
	if err == nil && fired {
		// Finished right at the deadline: the guest may have been stopped or
		// its context closed; do not reuse the instance.
		err, reason = fmt.Errorf("call finished at its deadline of %v", timeout), ReasonTimeout
	}
	if err != nil {
		if fired {
			return Result{}, ReasonTimeout, fmt.Errorf("call overran its deadline of %v: %w", timeout, err)
		}
		return Result{}, reason, err
	}
	if inst.emit.called {
		return inst.emitted(in, src, ptr, len32)
	}
	if int64(len32) > int64(inst.m.e.cfg.MaxOutputBytes) {
		return Result{}, ReasonInvalidOutput, fmt.Errorf("output of %d bytes over the limit of %d", len32, inst.m.e.cfg.MaxOutputBytes)
	}
	out, ok := inst.mem.Read(ptr, len32)
	if !ok {
		return Result{}, ReasonABI, fmt.Errorf("output span [%d,+%d) outside memory of %d bytes", ptr, len32, inst.mem.Size())
	}
	return inst.buildResult(in, out, src)
}

// invoke writes the input into guest memory and calls tally_map.
func (inst *instance) invoke(input []byte) (ptr, n uint32, reason Reason, err error) {
	inst.job.input = input
	err = inst.guestCall(nil)
	if errors.Is(err, errAbandoned) {
		// The job is the abandoned guest's now: not touched again.
		return 0, 0, ReasonTimeout, err
	}
	inst.job.input = nil
	return inst.job.ptr, inst.job.n, inst.job.reason, err
}

// invokeHere writes the input into guest memory and calls tally_map, on the
// goroutine that makes the instance's guest calls.
func (inst *instance) invokeHere(input []byte) (ptr, n uint32, reason Reason, err error) {
	var inPtr uint32
	if len(input) > 0 {
		inst.stack[0] = uint64(len(input))
		if err := inst.alloc.CallWithStack(&inst.cc, inst.stack[:]); err != nil {
			return 0, 0, inst.classify(err), fmt.Errorf("tally_alloc: %w", err)
		}
		inPtr = api.DecodeU32(inst.stack[0])
		if inPtr == 0 {
			return 0, 0, ReasonMemory, fmt.Errorf("tally_alloc(%d) returned 0", len(input))
		}
		// The input is the caller's: copied in under the host lock, never once
		// the caller has given up on the call.
		if !inst.lockCallerState() {
			return 0, 0, ReasonTimeout, errAbandoned
		}
		ok := inst.mem.Write(inPtr, input)
		inst.unlockCallerState()
		if !ok {
			return 0, 0, ReasonABI, fmt.Errorf("tally_alloc(%d) returned %d: outside memory of %d bytes", len(input), inPtr, inst.mem.Size())
		}
	}
	inst.stack[0] = uint64(inPtr)
	inst.stack[1] = uint64(len(input))
	inst.emit.active = true // tally.emit is answered during tally_map only
	err = inst.mapf.CallWithStack(&inst.cc, inst.stack[:])
	inst.emit.active = false
	if err != nil {
		return 0, 0, inst.classify(err), fmt.Errorf("tally_map: %w", err)
	}
	r := inst.stack[0]
	return api.DecodeU32(r >> 32), api.DecodeU32(r), "", nil
}

// classify names the reason of an error returned by a call into the guest.
func (inst *instance) classify(err error) Reason {
	if inst.deadline.Load() == deadlineFired {
		return ReasonTimeout
	}
	if inst.budgetSpent() {
		return ReasonBudget
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled) {
		return ReasonTimeout
	}
	if inst.oom.Load() || inst.nearMemoryLimit() {
		return ReasonMemory
	}
	return ReasonTrap
}

// nearMemoryLimit reports whether the instance's memory is within 1 MiB of the
// limit: a trap there is most likely a failed allocation.
func (inst *instance) nearMemoryLimit() bool {
	return uint64(inst.mem.Size())+1<<20 > uint64(inst.m.e.cfg.MemoryLimit)
}

// buildResult validates the output and writes the final events, "source"
// filled. The events are copied into one new buffer: the only allocation of a
// successful call that produces events.
func (inst *instance) buildResult(in *jsonindex.Index, out []byte, src Source) (Result, Reason, error) {
	x := &inst.out
	defer x.Reset()
	if err := x.Parse(out); err != nil {
		return Result{}, ReasonInvalidOutput, fmt.Errorf("output is not JSON: %w", err)
	}
	if k, _, _ := x.Lookup(""); k != jsonindex.Object {
		return Result{}, ReasonInvalidOutput, fmt.Errorf("output is a JSON %v, not an object", k)
	}
	if k, s, e := x.Lookup("error"); k != jsonindex.Missing {
		msg := string(out[s:e])
		if k == jsonindex.String {
			if u, err := jsonindex.AppendUnquote(nil, out[s:e]); err == nil {
				msg = string(u)
			}
		}
		return Result{}, ReasonGuestError, fmt.Errorf("guest error: %s", msg)
	}
	if k, _, _ := x.Lookup("events"); k != jsonindex.Array {
		return Result{}, ReasonInvalidOutput, errors.New(`output has neither an "events" array nor an "error"`)
	}
	inst.children = x.AppendChildren(inst.children[:0], "events")
	return inst.collect(in, src, len(inst.children), nil)
}

// writeEvent appends event i of the output document to dst with
// eventWriter.write's arguments; a failure names its reason.
func (inst *instance) writeEvent(w *eventWriter, dst []byte, i int, src sourceMember, ids *idSeed, k int, drops *Drops, keys *ledger.Keys) ([]byte, Reason, error) {
	if ev := inst.children[i]; ev.Kind != jsonindex.Object {
		return dst, ReasonInvalidOutput, fmt.Errorf("event %d is a JSON %v, not an object", i, ev.Kind)
	}
	inst.path = strconv.AppendInt(append(inst.path[:0], "events."...), int64(i), 10)
	out, err := w.write(dst, &inst.out, inst.path, src, ids, k, drops, keys)
	if err != nil {
		return out, ReasonInvalidEvent, err
	}
	return out, "", nil
}

// collect writes the n events of the call, checked against the contract,
// "source" filled in, and copies them out: the events of the output
// document, or with emitted those tally.emit wrote. (Not an interface: the
// pointers passed to an interface's method escape, which would cost an
// allocation per call.)
func (inst *instance) collect(in *jsonindex.Index, src Source, n int, emitted *emitState) (Result, Reason, error) {
	if n == 0 {
		return Result{}, "", nil
	}
	inst.buildSource(in, src)
	inst.ev.begin(time.Now())
	var ids *idSeed
	if src.DeriveID != nil {
		inst.ids = idSeed{body: src.DeriveID}
		ids = &inst.ids
	}
	maxEvent := inst.m.e.cfg.MaxEventBytes
	buf := inst.buf[:0]
	ends := inst.ends[:0]
	keys := inst.keys[:0]
	var k ledger.Keys
	var res Result
	for i := 0; i < n; i++ {
		begin := len(buf)
		var err error
		var reason Reason
		if emitted != nil {
			buf, reason, err = emitted.writeEvent(&inst.ev, buf, i, inst.src, ids, len(ends), &res.Dropped, &k)
		} else {
			buf, reason, err = inst.writeEvent(&inst.ev, buf, i, inst.src, ids, len(ends), &res.Dropped, &k)
		}
		if err != nil {
			inst.buf, inst.ends, inst.keys = buf[:0], ends[:0], keys[:0]
			if reason == ReasonInvalidEvent {
				return Result{}, reason, fmt.Errorf("%w: event %d: %w", ErrInvalidEvent, i, err)
			}
			return Result{}, reason, err
		}
		if len(buf)-begin > maxEvent {
			buf = buf[:begin]
			res.Oversize++
			continue
		}
		ends = append(ends, len(buf))
		keys = append(keys, k)
	}
	inst.buf, inst.ends, inst.keys = buf, ends, keys
	if len(ends) > 0 {
		all := make([]byte, len(buf))
		copy(all, buf)
		res.Events = make([][]byte, len(ends))
		prev := 0
		for i, end := range ends {
			res.Events[i] = all[prev:end:end]
			prev = end
		}
		res.Keys = slices.Clone(keys)
	}
	if cap(inst.buf) > 4*maxEvent && cap(inst.buf) > 1<<20 {
		inst.buf = nil // do not keep a rare huge buffer
	}
	return res, "", nil
}

// buildSource writes `"source":{...}` for this call into inst.src.
func (inst *instance) buildSource(in *jsonindex.Index, src Source) {
	inst.src = appendSource(inst.src.b[:0], in, src, inst.m.id)
}

// appendSource appends `"source":{...}` to b: the delivery's exchange and
// routing key, the input's publisher_id (in may be nil) and the mapper.
func appendSource(b []byte, in *jsonindex.Index, src Source, mapper string) sourceMember {
	begin := len(b)
	b = append(b, `"source":{"exchange":`...)
	open := len(b)
	b = jsonstr.AppendQuoted(b, src.Exchange)
	exchange := spanOf(b, begin, open)
	b = append(b, `,"routing_key":`...)
	b = jsonstr.AppendQuoted(b, src.RoutingKey)
	if in != nil {
		if k, s, e := in.Lookup("publisher_id"); k == jsonindex.String {
			b = append(b, `,"publisher_id":"`...)
			b = append(b, in.Bytes()[s:e]...)
			b = append(b, '"')
		}
	}
	b = append(b, `,"mapper":`...)
	b = jsonstr.AppendQuoted(b, mapper)
	return sourceMember{b: append(b, '}'), exchange: exchange}
}

// Host module "tally".

// hostFuncs are the functions of the host module (docs/abi.md): every
// parameter an i32, the result as listed.
var hostFuncs = []struct {
	name    string
	fn      api.GoModuleFunc
	params  []string
	results []api.ValueType
}{
	{"log", hostLog, []string{"level", "ptr", "len"}, nil},
	{"field", hostField, []string{"path_ptr", "path_len"}, []api.ValueType{i64}},
	{"fields", hostFields, []string{"paths_ptr", "count", "out_ptr"}, []api.ValueType{i32}},
	{"emit", hostEmit, []string{"ops_ptr", "count"}, []api.ValueType{i32}},
}

func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(hostModule)
	for _, f := range hostFuncs {
		params := make([]api.ValueType, len(f.params))
		for i := range params {
			params[i] = i32
		}
		b = b.NewFunctionBuilder().WithGoModuleFunction(f.fn, params, f.results).
			WithParameterNames(f.params...).Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// abortIfExpired stops an unguarded guest that overran its deadline at its
// next host call: the one place unguarded code can still be stopped.
func (cc *callCtx) abortIfExpired() {
	if cc.inst.deadline.Load() == deadlineFired {
		panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
	}
}

// hostEnter is called by a host function before it reads the state of the
// call (the input index, the random seed), and hostExit after: the guest of a
// watched instance with a hand-over, abandoned by its caller, is stopped here
// instead, and its caller waits (guestCall) for a host function in progress
// to finish before it goes on to reuse that state.
func (cc *callCtx) hostEnter() {
	cc.abortIfExpired()
	if !cc.inst.lockCallerState() {
		panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
	}
}

func (cc *callCtx) hostExit() { cc.inst.unlockCallerState() }

// lockCallerState takes the host lock of a watched instance with a
// hand-over unless its call was abandoned (false, not locked); the caller's
// data (input, index) may be read until unlockCallerState. A no-op for other
// instances, whose guest runs on the caller's goroutine.
func (inst *instance) lockCallerState() bool {
	if inst.calls == nil {
		return true
	}
	inst.hostMu.Lock()
	if inst.state.Load() == stAbandoned {
		inst.hostMu.Unlock()
		return false
	}
	return true
}

func (inst *instance) unlockCallerState() {
	if inst.calls != nil {
		inst.hostMu.Unlock()
	}
}

func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	cc, ok := ctx.(*callCtx)
	if !ok {
		return
	}
	cc.abortIfExpired()
	b, ok := mod.Memory().Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
	if !ok {
		return
	}
	cc.inst.m.glog.write(abiLevel(api.DecodeI32(stack[0])), "log", b)
}

func hostField(ctx context.Context, mod api.Module, stack []uint64) {
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	stack[0] = 0 // missing
	cc, ok := ctx.(*callCtx)
	if !ok || cc.inst.in == nil {
		return
	}
	cc.hostEnter()
	defer cc.hostExit()
	path, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return
	}
	k, s, e := cc.inst.cursor.LookupBytes(path)
	if k == jsonindex.Missing || s > maxSpan || e-s > maxSpan {
		return
	}
	stack[0] = uint64(k)<<56 | uint64(s)<<28 | uint64(e-s)
}

// maxFields is the most paths one tally.fields call may ask for.
const maxFields = 1 << 16

// fieldsChunk is the most paths of a tally.fields call looked up together
// (jsonindex.LookupMany): a call asks for them a chunk at a time, so that the
// buffers kept for it stay small whatever the guest asks.
const fieldsChunk = 256

// hostFields answers tally.fields: count (ptr, len) path pairs at paths_ptr,
// each answered as by tally.field, the packed results stored as
// little-endian i64s at out_ptr. It returns count, or -1 (nothing written)
// when either table lies outside guest memory or count is out of range. A
// path outside guest memory answers missing, as with tally.field. The paths
// are looked up together (jsonindex.LookupMany), a chunk at a time: every
// pair and path of a chunk is read before any of its results is written.
func hostFields(ctx context.Context, mod api.Module, stack []uint64) {
	ptr, count, outPtr := api.DecodeU32(stack[0]), api.DecodeI32(stack[1]), api.DecodeU32(stack[2])
	stack[0] = uint64(uint32(0xFFFFFFFF)) // -1
	cc, ok := ctx.(*callCtx)
	if !ok || count < 0 || count > maxFields {
		return
	}
	cc.hostEnter()
	defer cc.hostExit()
	mem := mod.Memory()
	table, ok1 := mem.Read(ptr, uint32(count)*8)
	out, ok2 := mem.Read(outPtr, uint32(count)*8)
	if !ok1 || !ok2 {
		return
	}
	inst := cc.inst
	if inst.in == nil {
		clear(out)
		stack[0] = uint64(uint32(count))
		return
	}
	all, _ := mem.Read(0, mem.Size()) // as mem.Read(p, n) for each path, without a call each
	for lo := 0; lo < int(count); lo += fieldsChunk {
		hi := min(int(count), lo+fieldsChunk)
		paths, slots := inst.paths[:0], inst.slots[:0]
		for i := lo; i < hi; i++ {
			p, n := uint64(binary.LittleEndian.Uint32(table[8*i:])), uint64(binary.LittleEndian.Uint32(table[8*i+4:]))
			if p+n <= uint64(len(all)) {
				paths, slots = append(paths, all[p:p+n]), append(slots, int32(i))
			}
		}
		spans := slices.Grow(inst.spans[:0], len(paths))[:len(paths)]
		inst.in.LookupMany(paths, spans)
		j := 0
		for i := lo; i < hi; i++ {
			var r uint64
			if j < len(slots) && int(slots[j]) == i {
				if sp := spans[j]; sp.Kind != jsonindex.Missing && sp.Start <= maxSpan && sp.End-sp.Start <= maxSpan {
					r = uint64(sp.Kind)<<56 | uint64(sp.Start)<<28 | uint64(sp.End-sp.Start)
				}
				j++
			}
			binary.LittleEndian.PutUint64(out[8*i:], r)
		}
		clear(paths) // keep no view of guest memory past the call
		inst.paths, inst.slots, inst.spans = paths, slots, spans
	}
	stack[0] = uint64(uint32(count))
}
