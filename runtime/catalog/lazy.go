package catalog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// lazyRetry is how long a built-in module whose loading failed answers its
// calls with that failure before loading is tried again.
const lazyRetry = 30 * time.Second

// lazyModule is a built-in module known by its manifest only until the first
// call that needs it loads it (compiles it, from the compilation cache when
// there, and starts an instance). Until then it costs the catalogue its
// manifest and nothing else.
//
// Once loaded, Map is one atomic load and the loaded module's Map: no lock.
// Concurrent first calls load it once: the first does the work, the others
// wait for it (or for their ctx). A failed load is answered, for that call
// and for every call in the next lazyRetry, with a *runtime.MapError of
// runtime.ReasonLoad; then loading is tried again.
type lazyModule struct {
	name string // "builtin:<file>"
	mf   runtime.Manifest
	id   string
	load func(ctx context.Context) (module, error)
	// loaded is called after every attempt, without a lock: ok or the error,
	// and how long it took.
	loaded func(err error, took time.Duration)

	cur atomic.Pointer[moduleRef] // set once loaded

	mu      sync.Mutex
	loading chan struct{} // closed when the attempt in progress ends
	closed  bool
	err     error // of the last failed attempt
	failed  time.Time
}

// moduleRef boxes a module for an atomic pointer.
type moduleRef struct{ m module }

var _ module = (*lazyModule)(nil)

func newLazyModule(name string, mf runtime.Manifest, load func(context.Context) (module, error), loaded func(error, time.Duration)) *lazyModule {
	return &lazyModule{name: name, mf: mf, id: mf.ID(), load: load, loaded: loaded}
}

// ID is the manifest's name@version, as the loaded module answers it.
func (l *lazyModule) ID() string { return l.id }

// Manifest is the manifest read at start (or from the store beside the
// compilation cache).
func (l *lazyModule) Manifest() runtime.Manifest { return l.mf }

// compiled reports whether the module is loaded.
func (l *lazyModule) compiled() bool { return l.cur.Load() != nil }

// Map maps with the module, loading it first if this is its first call.
func (l *lazyModule) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	if r := l.cur.Load(); r != nil {
		return r.m.Map(ctx, in, src)
	}
	m, err := l.get(ctx)
	if err != nil {
		return runtime.Result{}, err
	}
	return m.Map(ctx, in, src)
}

// get returns the loaded module, loading it or waiting for the load in
// progress.
func (l *lazyModule) get(ctx context.Context) (module, error) {
	for {
		l.mu.Lock()
		if r := l.cur.Load(); r != nil {
			l.mu.Unlock()
			return r.m, nil
		}
		if l.closed {
			l.mu.Unlock()
			return nil, runtime.ErrClosed
		}
		if wait := l.loading; wait != nil {
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if l.err != nil && time.Since(l.failed) < lazyRetry {
			err := l.err
			l.mu.Unlock()
			return nil, l.failure(err)
		}
		done := make(chan struct{})
		l.loading = done
		l.mu.Unlock()
		return l.loadNow(ctx, done)
	}
}

// loadNow loads the module; done is closed when it is over.
func (l *lazyModule) loadNow(ctx context.Context, done chan struct{}) (module, error) {
	start := time.Now()
	// The load is shared with the calls waiting for it: the caller's
	// cancellation does not cut it short.
	m, err := l.load(context.WithoutCancel(ctx))
	took := time.Since(start)
	l.mu.Lock()
	l.loading = nil
	switch {
	case err != nil:
		l.err, l.failed = err, time.Now()
	case l.closed:
		// Closed while loading: the module is not kept.
		l.mu.Unlock()
		close(done)
		_ = m.Close(context.Background())
		return nil, runtime.ErrClosed
	default:
		l.err = nil
		l.cur.Store(&moduleRef{m: m})
	}
	l.mu.Unlock()
	close(done)
	if l.loaded != nil {
		l.loaded(err, took)
	}
	if err != nil {
		return nil, l.failure(err)
	}
	return m, nil
}

func (l *lazyModule) failure(err error) error {
	return &runtime.MapError{Reason: runtime.ReasonLoad, Module: l.id,
		Err: fmt.Errorf("load %s on first use: %w", l.name, err)}
}

// Close frees the module if it was loaded, after a load in progress ends.
// Calls fail with runtime.ErrClosed afterwards.
func (l *lazyModule) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	wait := l.loading
	l.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("close %s: waiting for its load: %w", l.name, ctx.Err())
		}
	}
	if r := l.cur.Load(); r != nil {
		return r.m.Close(ctx)
	}
	return nil
}

// builtinLoaded counts and logs an attempt to load a built-in module on
// first use.
func (c *Catalog) builtinLoaded(file string, mf runtime.Manifest, err error, took time.Duration) {
	id := mf.ID()
	if err != nil {
		c.metrics.builtinCompiles.WithLabelValues("error").Inc()
		c.log.Error().Str("mapper", id).Str("file", file).Err(err).Dur("took", took).Dur("retry_in", lazyRetry).
			Msg("built-in mapper failed to load on first use; the notifications it claims are dead-lettered (reason load) until it loads")
		return
	}
	c.metrics.builtinCompiles.WithLabelValues("ok").Inc()
	c.metrics.builtinsCompiled.Inc()
	c.log.Info().Str("mapper", id).Str("file", file).Dur("took", took).Msg("built-in mapper loaded on first use")
}
