package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// maxCachedRoutes bounds the per-snapshot route cache.
const maxCachedRoutes = 4096

// maxCachedTypeBytes bounds the event types the route cache and a
// migration's counters keep by name: the longest event type an event may
// carry under the event contract.
const maxCachedTypeBytes = contract.MaxIDBytes

// maxRetries bounds how often a call that met a retired module is routed again.
const maxRetries = 3

// entry is a routable (active) module of a snapshot, with its migration if a
// candidate shadows it.
type entry struct {
	ld  *loaded
	mig *migration
}

// snapshot is an immutable view of the catalogue: the active modules in tie
// order (later wins) and their migrations. Route answers from it without a
// lock; answers are cached per event type.
type snapshot struct {
	gen     uint64
	entries []entry
	byName  map[string]*entry
	retry   func(eventType string) (*route, bool) // routes again on the newest snapshot

	cache  sync.Map // event type -> *route (nil: unclaimed)
	cached atomic.Int64
}

// tieLess orders active modules for routing: built-ins first, then drop-ins;
// within each, by file name. On equal specificity the later one wins.
func tieLess(a, b *loaded) bool {
	if a.origin != b.origin {
		return a.origin == originBuiltin
	}
	if a.base != b.base {
		return a.base < b.base
	}
	return a.file < b.file
}

func newSnapshot(gen uint64, entries []entry, retry func(string) (*route, bool)) *snapshot {
	sort.SliceStable(entries, func(i, j int) bool { return tieLess(entries[i].ld, entries[j].ld) })
	s := &snapshot{gen: gen, entries: entries, retry: retry, byName: make(map[string]*entry, len(entries))}
	for i := range s.entries {
		s.byName[s.entries[i].ld.mod.Manifest().Name] = &s.entries[i]
	}
	return s
}

// route returns the route of eventType: the module whose best matching include
// glob has the most literal characters; on a tie the later one in tie order.
func (s *snapshot) route(eventType string) (*route, bool) {
	if v, ok := s.cache.Load(eventType); ok {
		r := v.(*route)
		return r, r != nil
	}
	var best *entry
	bestSpec := -1
	for i := range s.entries {
		e := &s.entries[i]
		if ok, spec := e.ld.mod.Manifest().Match(eventType); ok && spec >= bestSpec {
			best, bestSpec = e, spec
		}
	}
	var r *route
	if best != nil {
		r = &route{eventType: eventType, mod: best.ld.mod, retry: s.retry}
		if best.mig != nil {
			if ok, _ := best.mig.cand.mod.Manifest().Match(eventType); ok {
				r.mig = best.mig
				r.counters = best.mig.counters(eventType)
			}
		}
	}
	// Bounded in count and in size: an event type longer than any real one
	// (a publisher's choice) is routed every time instead of kept.
	if len(eventType) <= maxCachedTypeBytes && s.cached.Add(1) <= maxCachedRoutes {
		s.cache.Store(eventType, r)
	}
	return r, r != nil
}

// conflicts lists pairs of active modules that claim the same include glob,
// and which one wins by the tie rule.
func (s *snapshot) conflicts() []string {
	var out []string
	owner := map[string]*loaded{}
	for _, e := range s.entries {
		for _, g := range e.ld.mod.Manifest().EventTypes {
			if strings.HasPrefix(g, "!") {
				continue
			}
			if prev, ok := owner[g]; ok && prev != e.ld {
				out = append(out, fmt.Sprintf("%s (%s) and %s (%s) both claim %q; %s wins by the tie rule",
					prev.mod.ID(), prev.file, e.ld.mod.ID(), e.ld.file, g, e.ld.mod.ID()))
			}
			owner[g] = e.ld
		}
	}
	return out
}

// route is what Route hands the pipeline: the active module of an event type
// and, during a migration, the candidate that shadows it. It is immutable.
type route struct {
	eventType string
	mod       module
	mig       *migration
	counters  *typeCounters
	retry     func(eventType string) (*route, bool)
}

var _ pipeline.Mapper = (*route)(nil)

// ID is the active module's name@version.
func (r *route) ID() string { return r.mod.ID() }

// Manifest is the active module's manifest.
func (r *route) Manifest() runtime.Manifest { return r.mod.Manifest() }

// Map maps with the active module and returns its result. During a migration
// the candidate maps the same input afterwards and the two results are
// compared and counted; the candidate's result is dropped. A call that finds
// its module already retired by a reload (it was routed just before the swap)
// is routed again on the newest snapshot: a retired module produced nothing,
// so nothing is mapped twice and nothing is lost.
func (r *route) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	cur := r
	for attempt := 0; ; attempt++ {
		res, err := cur.mapOnce(ctx, in, src)
		if err == nil || !errors.Is(err, runtime.ErrClosed) || attempt == maxRetries || cur.retry == nil {
			return res, err
		}
		next, ok := cur.retry(cur.eventType)
		if !ok || next.mod == cur.mod {
			return res, err
		}
		cur = next
	}
}

func (r *route) mapOnce(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	res, err := r.mod.Map(ctx, in, src)
	if r.mig == nil || errors.Is(err, runtime.ErrClosed) {
		return res, err
	}
	cres, cerr := r.mig.cand.mod.Map(ctx, in, src)
	if errors.Is(cerr, runtime.ErrClosed) || ctx.Err() != nil {
		return res, err // the candidate was retired meanwhile, or the call was cancelled: nothing to compare
	}
	r.mig.record(r.eventType, r.counters, r.mod.ID(), res, err, cres, cerr)
	return res, err
}

// named stands for a module name rather than a version: each call goes to the
// version active at that moment (see Catalog.Named).
type named struct {
	load func() *snapshot // the newest snapshot
	name string
}

var _ pipeline.Mapper = (*named)(nil)

func (n *named) current() (*entry, bool) {
	e, ok := n.load().byName[n.name]
	return e, ok
}

// ID is the name@version active now, or the bare name when none is.
func (n *named) ID() string {
	if e, ok := n.current(); ok {
		return e.ld.mod.ID()
	}
	return n.name
}

// Manifest is the manifest of the version active now; with none, a manifest
// that claims nothing.
func (n *named) Manifest() runtime.Manifest {
	if e, ok := n.current(); ok {
		return e.ld.mod.Manifest()
	}
	return runtime.Manifest{Name: n.name}
}

// Map calls the version active now, with its candidate in shadow.
func (n *named) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	e, ok := n.current()
	if !ok {
		return runtime.Result{}, fmt.Errorf("%w: %q (removed)", ErrUnknownModule, n.name)
	}
	r := &route{mod: e.ld.mod, retry: func(string) (*route, bool) {
		e, ok := n.current()
		if !ok {
			return nil, false
		}
		return &route{mod: e.ld.mod}, true
	}}
	if e.mig != nil {
		if k, s, end := in.Lookup("event_type"); k == jsonindex.String {
			r.eventType = string(in.Bytes()[s:end])
			if ok, _ := e.mig.cand.mod.Manifest().Match(r.eventType); ok {
				r.mig = e.mig
			}
		}
	}
	return r.Map(ctx, in, src)
}
