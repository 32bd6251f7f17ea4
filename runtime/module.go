package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/tetratelabs/wazero"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Source is where a message came from; the host writes it, with the publisher
// and the mapper, into the "source" member of every event.
type Source struct {
	Exchange, RoutingKey string
	// DeriveID, when set, names the events that carry no event_id (or an
	// empty one): the hex of the first 16 bytes of its SHA-256, "-<i>"
	// added for the i-th event after the first, so that a message sent
	// again yields the same ids. Inputs whose messages have no id of their
	// own (plog, the local channel) set it to the message's body.
	DeriveID []byte
	// Received is when the input received the message. A canonical event
	// (CanonicalWriter) without a timestamp is given it, as the channel's
	// module gives the time of the publish call; zero: none is given, and
	// such an event is invalid. A module's events are the module's: it is
	// not used for them.
	Received time.Time
}

// Result is what a successful Map produced.
type Result struct {
	// Events are the final event documents, "source" filled in. The caller owns
	// them.
	Events [][]byte
	// Keys[i] says where the members the completeness ledger reads lie in
	// Events[i] (ledger.Keys), as the host wrote them, so that the outbox
	// does not parse the event again. One per event.
	Keys []ledger.Keys
	// Oversize counts events left out because they were larger than
	// Config.MaxEventBytes.
	Oversize int
	// Dropped counts the members the event contract left out of Events,
	// by what they broke (docs/events.md, "The contract").
	Dropped Drops
}

// Module is a loaded mapper: its compiled code and a pool of instances, grown on
// demand up to Config.PoolSize. Map is safe for concurrent use.
type Module struct {
	e    *Engine
	name string
	opts moduleOptions
	mf   Manifest
	id   string
	log  zerolog.Logger
	glog *guestLog

	wasm     []byte                   // kept for compiling the unguarded variant late
	compiled [2]wazero.CompiledModule // [0] without, [1] with termination checks
	cmu      sync.Mutex               // guards compiled[0] when compiled late

	sem    chan struct{} // a token per instance in use
	done   chan struct{} // closed by Close
	once   sync.Once
	closed atomic.Bool
	mu     sync.Mutex
	idle   []*instance
	count  int // live instances

	good      atomic.Int64 // well-behaved guarded calls (GuardUntrusted)
	trusted   atomic.Bool  // GuardUntrusted: new instances run unguarded
	compiling atomic.Bool
	overruns  atomic.Int64 // unguarded calls that overran their deadline
	charged   atomic.Int64 // Config.Metered: the most a call was charged
}

func newModule(e *Engine, name string, o moduleOptions) *Module {
	return &Module{
		e:    e,
		name: name,
		opts: o,
		sem:  make(chan struct{}, e.cfg.PoolSize),
		done: make(chan struct{}),
		log:  e.log.With().Str("module", name).Logger(),
		glog: newGuestLog(e.log.With().Str("module", name).Str("origin", "guest").Logger()),
	}
}

func (m *Module) setManifest(mf Manifest) {
	m.mf = mf
	m.id = mf.ID()
	m.log = m.e.log.With().Str("module", m.name).Str("mapper", m.id).Logger()
	m.glog.logger = m.log.With().Str("origin", "guest").Logger()
}

// Manifest returns the module's manifest, read once at load.
func (m *Module) Manifest() Manifest { return m.mf }

// ID returns "name@version".
func (m *Module) ID() string { return m.id }

// Name returns the name the module was loaded under (a path or "builtin:...").
func (m *Module) Name() string { return m.name }

// Guarded reports whether new instances of the module run with termination
// checks.
func (m *Module) Guarded() bool { return m.wantGuarded() }

func (m *Module) wantGuarded() bool {
	switch m.opts.guard {
	case GuardNever:
		return false
	case GuardWatched:
		return m.overruns.Load() > 0 // one overrun, and new instances run guarded
	case GuardUntrusted:
		if !m.trusted.Load() {
			return true
		}
		m.cmu.Lock()
		ready := m.compiled[0] != nil
		m.cmu.Unlock()
		return !ready
	}
	return true
}

// Map runs the module on the input in (parsed JSON, or raw bytes set with
// SetRaw) and returns the events with "source" filled from src, the input's
// publisher_id and ID(). It fails with a *MapError; after any reason but
// ReasonGuestError and ReasonInvalidEvent the instance is discarded. in is
// used only during the call, by one goroutine: its lookups may build member
// tables inside it (jsonindex), so it must not be shared with another call.
//
// The call is bounded by Config.CallTimeout and by ctx's deadline, whichever
// comes first; a ctx cancelled while the guest runs does not stop it early.
func (m *Module) Map(ctx context.Context, in *jsonindex.Index, src Source) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	inst, err := m.acquire(ctx, isGuardedCall(ctx))
	if err != nil {
		return Result{}, err
	}
	timeout := m.e.cfg.CallTimeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = d
		}
	}
	if timeout <= 0 { // the caller's deadline passed while waiting for an instance
		m.release(inst, true)
		return Result{}, &MapError{Reason: ReasonTimeout, Module: m.id, Err: context.DeadlineExceeded}
	}
	res, reason, err := inst.call(in, src, timeout)
	if err == nil {
		m.release(inst, true)
		return res, nil
	}
	if inst.isAbandoned() {
		m.release(inst, false) // the slot; the instance is its guest's (close)
		m.log.Error().Dur("deadline", timeout).Int("runaways", m.e.Runaways()).
			Msg("a watched mapper call overran its deadline: answered as a timeout; its guest keeps a core until it returns or calls the host; the module now runs guarded")
		return Result{}, &MapError{Reason: reason, Module: m.id, Err: err}
	}
	keep := reason == ReasonGuestError || reason == ReasonInvalidEvent
	m.release(inst, keep)
	if !keep {
		m.log.Warn().Str("reason", string(reason)).Err(err).Msg("mapper call failed; instance discarded")
	}
	return Result{}, &MapError{Reason: reason, Module: m.id, Err: err}
}

func (m *Module) acquire(ctx context.Context, forceGuard bool) (*instance, error) {
	select {
	case m.sem <- struct{}{}: // fast path: a free slot
	default:
		select {
		case m.sem <- struct{}{}:
		case <-m.done:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if m.closed.Load() {
		<-m.sem
		return nil, ErrClosed
	}
	def := m.wantGuarded()
	want := def || (forceGuard && m.wasm != nil) // GuardNever keeps no guarded code
	var stale []*instance
	m.mu.Lock()
	var found *instance
	for i := len(m.idle) - 1; i >= 0; i-- {
		inst := m.idle[i]
		if inst.guarded == want {
			found = inst
			m.idle = slices.Delete(m.idle, i, i+1)
			break
		}
		if m.stale(inst, def) {
			m.idle = slices.Delete(m.idle, i, i+1)
			m.count--
			stale = append(stale, inst)
		}
	}
	if found == nil {
		// A new instance: the pool stays within PoolSize by closing an idle
		// one of the other kind (kept for calls that ask for it).
		if m.count >= cap(m.sem) && len(m.idle) > 0 {
			stale = append(stale, m.idle[0])
			m.idle = slices.Delete(m.idle, 0, 1)
			m.count--
		}
		m.count++
	}
	m.mu.Unlock()
	for _, inst := range stale {
		inst.close()
	}
	if found != nil {
		return found, nil
	}
	inst, err := m.newInstance(context.WithoutCancel(ctx), want)
	if err != nil {
		m.mu.Lock()
		m.count--
		m.mu.Unlock()
		<-m.sem
		reason := ReasonTrap
		if errors.Is(err, errMemory) {
			reason = ReasonMemory
		}
		return nil, &MapError{Reason: reason, Module: m.id, Err: fmt.Errorf("start instance: %w", err)}
	}
	return inst, nil
}

// stale reports whether an idle instance is never to be used again, def
// being the kind the module now runs by default: an unguarded one once the
// module runs guarded (an overrun), or one of a module that switched for
// good. A guarded instance of a module that runs unguarded by default is kept
// for the calls that ask for guarded code (GuardedCall).
func (m *Module) stale(inst *instance, def bool) bool {
	if inst.guarded == def {
		return false
	}
	return !inst.guarded || m.wasm == nil
}

func (m *Module) release(inst *instance, keep bool) {
	if keep && inst.guarded && m.opts.guard == GuardUntrusted && !m.trusted.Load() {
		if inst.lastDur < m.e.cfg.CallTimeout/4 {
			if m.good.Add(1) == trustAfter {
				m.earnTrust()
			}
		} else {
			m.good.Store(0)
		}
	}
	if keep && m.stale(inst, m.wantGuarded()) {
		keep = false // switch to the other kind of instance
	}
	if keep {
		m.mu.Lock()
		m.idle = append(m.idle, inst)
		m.mu.Unlock()
	} else {
		inst.close()
		m.mu.Lock()
		m.count--
		m.mu.Unlock()
	}
	<-m.sem
}

// compiledVariant returns the module's code with (guarded) or without
// termination checks, compiling it on first use when the module keeps its
// bytes for that (GuardUntrusted earning trust, GuardWatched turning guarded
// after an overrun). The compilation runs outside cmu, so that wantGuarded
// never waits for it; of two racing compilations one is kept.
func (m *Module) compiledVariant(ctx context.Context, guarded bool) (wazero.CompiledModule, error) {
	i := boolIdx(guarded)
	m.cmu.Lock()
	cm := m.compiled[i]
	m.cmu.Unlock()
	if cm != nil {
		return cm, nil
	}
	if m.wasm == nil {
		return nil, errors.New("no compiled code")
	}
	cm, err := m.e.compile(ctx, guarded, m.wasm)
	if err != nil {
		variant := "unguarded"
		if guarded {
			variant = "guarded"
		}
		return nil, fmt.Errorf("compile the %s variant: %w", variant, err)
	}
	m.cmu.Lock()
	if prev := m.compiled[i]; prev != nil || m.closed.Load() {
		m.cmu.Unlock()
		_ = cm.Close(ctx)
		if prev == nil {
			return nil, ErrClosed
		}
		return prev, nil
	}
	m.compiled[i] = cm
	m.cmu.Unlock()
	m.log.Info().Bool("guarded", guarded).Msg("compiled the module's other variant")
	return cm, nil
}

// demote is called when a GuardWatched call overran its deadline: the module
// runs guarded from then on (wantGuarded; its guarded variant is compiled by
// the next new instance).
func (m *Module) demote() { m.overruns.Add(1) }

// earnTrust compiles the unguarded variant in the background; once it is ready
// new instances use it.
func (m *Module) earnTrust() {
	if !m.compiling.CompareAndSwap(false, true) {
		return
	}
	m.trusted.Store(true)
	go func() {
		if _, err := m.compiledVariant(context.Background(), false); err != nil {
			m.log.Error().Err(err).Msg("compile unguarded variant; staying guarded")
			m.trusted.Store(false)
			return
		}
		m.log.Info().Int("calls", trustAfter).Msg("mapper earned trust; new instances run without termination checks")
	}()
}

// untrust is called when an unguarded call overran its deadline.
func (m *Module) untrust() {
	m.overruns.Add(1)
	if m.opts.guard == GuardUntrusted {
		m.trusted.Store(false)
		m.good.Store(0)
		m.compiling.Store(false)
	}
	m.log.Error().Dur("deadline", m.e.cfg.CallTimeout).Str("guard", m.opts.guard.String()).
		Msg("an unguarded mapper call overran its deadline and cannot be stopped; it keeps a core until it returns")
}

// Close waits for the calls in flight, then frees the instances and the
// compiled code. Map fails with ErrClosed afterwards.
func (m *Module) Close(ctx context.Context) error {
	var err error
	m.once.Do(func() {
		m.closed.Store(true)
		close(m.done)
		for range cap(m.sem) {
			select {
			case m.sem <- struct{}{}:
			case <-ctx.Done():
				err = fmt.Errorf("close %s: waiting for calls in flight: %w", m.name, ctx.Err())
				return
			}
		}
		m.mu.Lock()
		idle := m.idle
		m.idle = nil
		m.mu.Unlock()
		for _, inst := range idle {
			inst.close()
		}
		m.cmu.Lock()
		for _, cm := range m.compiled {
			if cm != nil {
				err = errors.Join(err, cm.Close(ctx))
			}
		}
		m.cmu.Unlock()
		m.e.forget(m)
	})
	return err
}

// Overruns returns how many of the module's unguarded calls overran their
// deadline (GuardWatched, GuardUntrusted and GuardNever; a guarded call that
// overruns is stopped and counted as a timeout only).
func (m *Module) Overruns() int64 { return m.overruns.Load() }

// Instances returns the number of live instances (idle and busy).
func (m *Module) Instances() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count
}

// DroppedLogLines returns how many guest log lines were dropped by the rate
// limit since the module was loaded.
func (m *Module) DroppedLogLines() int64 { return m.glog.total.Load() }
