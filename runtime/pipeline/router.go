package pipeline

import (
	"fmt"
	"sync"
)

// StaticRouter routes by event type over a fixed set of modules: the module whose
// best matching include glob has the most literal characters wins; on a tie the
// module later in the list wins, so drop-in modules (listed after the built-in
// ones) override them. A StaticRouter is immutable and safe for concurrent use;
// it remembers its answers for up to maxCachedTypes event types.
type StaticRouter struct {
	mods  []Mapper
	cache sync.Map // event type -> routeEntry
	n     int64
	mu    sync.Mutex
}

type routeEntry struct {
	m  Mapper
	ok bool
}

const maxCachedTypes = 4096

var _ Router = (*StaticRouter)(nil)

// NewStaticRouter returns a router over mods and the conflicts it sees: two
// modules with the same include glob (the later one wins).
func NewStaticRouter(mods ...Mapper) (*StaticRouter, []string) {
	var conflicts []string
	owner := map[string]string{}
	for _, m := range mods {
		for _, g := range m.Manifest().EventTypes {
			if len(g) > 0 && g[0] == '!' {
				continue
			}
			if prev, ok := owner[g]; ok && prev != m.ID() {
				conflicts = append(conflicts, fmt.Sprintf("%s and %s both claim %q; %s wins", prev, m.ID(), g, m.ID()))
			}
			owner[g] = m.ID()
		}
	}
	return &StaticRouter{mods: append([]Mapper(nil), mods...)}, conflicts
}

// Route returns the module for eventType.
func (r *StaticRouter) Route(eventType string) (Mapper, bool) {
	if e, ok := r.cache.Load(eventType); ok {
		re := e.(routeEntry)
		return re.m, re.ok
	}
	var best Mapper
	bestSpec := -1
	for _, m := range r.mods {
		if ok, spec := m.Manifest().Match(eventType); ok && spec >= bestSpec {
			best, bestSpec = m, spec
		}
	}
	r.mu.Lock()
	if r.n < maxCachedTypes {
		r.n++
		r.cache.Store(eventType, routeEntry{best, best != nil})
	}
	r.mu.Unlock()
	return best, best != nil
}

// Modules returns the modules the router was built from.
func (r *StaticRouter) Modules() []Mapper { return append([]Mapper(nil), r.mods...) }
