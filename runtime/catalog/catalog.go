package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/mod/semver"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// PromoteMode says what a running catalogue does with a drop-in module that
// has the name of an active one (a new version).
type PromoteMode uint8

const (
	// PromoteShadow (the default) starts the new version as a candidate in
	// shadow; an operator promotes or aborts it.
	PromoteShadow PromoteMode = iota
	// PromoteImmediate replaces the active version as soon as the new one
	// loaded, validated and passed its fixtures.
	PromoteImmediate
)

func (p PromoteMode) String() string {
	if p == PromoteImmediate {
		return "immediate"
	}
	return "shadow"
}

// ParsePromoteMode reads "shadow" or "immediate" (the MAPPERS_PROMOTE setting).
func ParsePromoteMode(s string) (PromoteMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "shadow":
		return PromoteShadow, nil
	case "immediate":
		return PromoteImmediate, nil
	}
	return 0, fmt.Errorf("promote mode %q: want shadow or immediate", s)
}

// Defaults of Options.
const (
	defaultRefreshInterval = 30 * time.Second
	defaultDebounce        = 500 * time.Millisecond
	// DefaultMaxFileSize is the default of Options.MaxFileSize: twice the
	// largest built-in module. Compiling a module takes from about 10 to
	// about 360 times its size in memory, by the shape of its code
	// (docs/operations.md, "What a hostile publisher can do").
	DefaultMaxFileSize = 4 << 20
	// closeTimeout bounds how long a retired module may take to finish its
	// calls in flight before it is freed.
	closeTimeout = time.Minute
)

// Options configure a Catalog.
type Options struct {
	// Engine loads the modules. Required.
	Engine *runtime.Engine
	// Builtin are the built-in modules by file name (mappers.Builtin()); each
	// is known as "builtin:<file>" by its manifest, and loaded under that
	// name when the first call routed to it arrives. May be empty.
	Builtin map[string][]byte
	// BuiltinManifests are the manifests the build recorded beside the
	// built-in modules (mappers.Manifests()), keyed as Builtin. A built-in
	// with its record here is known by it, compiled by nothing until its
	// first call; one without is compiled at start to read its manifest
	// (Engine.Inspect). When the module loads, what it answers must be the
	// record, or the load fails.
	BuiltinManifests map[string][]byte
	// Dir is the drop-in directory (MAPPERS_DIR); "" for built-ins only.
	Dir string
	// MaxFileSize is the largest drop-in module file, and fixture file, that
	// is read, in bytes (MAPPER_MAX_FILE_MIB; default DefaultMaxFileSize). A
	// larger file is skipped, never read nor compiled, which also bounds the
	// memory a compilation takes.
	MaxFileSize int64
	// Promote says whether a new version of an active module starts in shadow
	// (default) or replaces it at once.
	Promote PromoteMode
	// RefreshInterval is the period of the fallback scan of Dir (default 30s).
	RefreshInterval time.Duration
	// Debounce is how long Run waits after the last change notification before
	// it scans Dir (default 500ms).
	Debounce time.Duration
	// SampleSize is the number of differences kept per migration (default 20).
	SampleSize int
	// State keeps the decisions (the version in service of every name, the
	// candidate shadowing it, the files parked) across restarts; nil: the
	// directory as it stands is the configuration at every start. See the
	// package documentation, "Restarts".
	State StateStore
	// Replica names this collector among the replicas of one deployment (the
	// daemon's REPLICA_NAME). It signs the decisions handed to OnDecision,
	// and ApplyDecision ignores the decisions signed with it: its own, come
	// back. "" for a collector that shares no decisions.
	Replica string
	// OnDecision, when set, is called after an operator's Promote or Abort
	// took effect here, with the decision as the other replicas should
	// apply it (see ApplyDecision). It runs on the caller's goroutine
	// without the catalogue's locks and may block for the ctx of the call.
	// nil error: the decision is on its way to the other replicas; an
	// error: it is not yet (the hook's owner keeps it and tries again), and
	// Promote and Abort say so in MigrationOutcome.Replicas.
	OnDecision func(ctx context.Context, d Decision) error
	// BuiltinOptions and DropInOptions are passed to Engine.Load.
	BuiltinOptions []runtime.ModuleOption
	DropInOptions  []runtime.ModuleOption

	Logger     zerolog.Logger
	Registerer prometheus.Registerer // nil: no metrics are registered
}

// slot is everything about one module name. Mutated only under Catalog.mu.
type slot struct {
	name    string
	builtin *loaded // nil when there is no built-in of this name
	active  *loaded // the built-in, or a drop-in
	mig     *migration
	last    *MigrationOutcome
}

// fileState is what the catalogue made of the last content seen at a drop-in
// path.
type fileState struct {
	key    statKey
	digest string
	sha    string
	state  string // "" (in use), "rejected", "parked" or "skipped"
	reason string
	at     time.Time
}

// Catalog knows which module serves which event type. It implements
// pipeline.Router: Route answers from an immutable snapshot behind an atomic
// pointer, so no lock is held across a mapper call. See the package
// documentation for the rules.
type Catalog struct {
	opts    Options
	log     zerolog.Logger
	metrics *metrics
	load    func(ctx context.Context, name string, wasm []byte, o origin) (module, error)
	// inspect reads a built-in module's manifest without keeping it loaded.
	inspect func(ctx context.Context, name string, wasm []byte) (runtime.Inspection, error)

	snap atomic.Pointer[snapshot]

	// reloadSem serialises reloads: a reload holds it, across the scan and
	// the compilation of modules. A channel rather than a mutex so that
	// Close and Reload wait for it no longer than their ctx.
	reloadSem chan struct{}

	mu         sync.Mutex // guards everything below; never held across a mapper call
	gen        uint64
	slots      map[string]*slot
	files      map[string]*fileState
	pending    []*loaded // retired, closed after the next publish
	lastReload *ReloadResult
	reloads    map[string]int
	closed     bool

	// Decisions across restarts (state.go): saved is what the last run
	// decided, used by the first scan that reads the directory (at start-up,
	// or later when the directory was missing or unreadable then) and
	// dropped after it; lastSaved the record as last written; scanned is set
	// once the directory was read.
	saved     *savedState
	lastSaved []byte
	scanned   bool
	// deferred are the decisions of other replicas waiting for their
	// candidate, oldest first (decision.go); saved with the decisions.
	deferred []Decision

	retiring sync.WaitGroup
}

var _ pipeline.Router = (*Catalog)(nil)

// New reads the manifests of the built-in modules (compiling none of them
// when the manifests are stored beside the compilation cache), loads the
// drop-in directory and returns the catalogue. With Options.State it restores the decisions of the last run;
// without, or on a first start, every valid module found is active at once:
// the directory as it stands is the configuration (see the package
// documentation, "Restarts"). A drop-in that fails is logged and shown in
// Status, and does not fail New; a built-in that fails does. Call Run to
// follow the directory, and Close to free the modules.
func New(ctx context.Context, opts Options) (*Catalog, error) {
	if opts.Engine == nil {
		return nil, errors.New("catalog: options: Engine is required")
	}
	c := newCatalog(opts)
	c.inspect = func(ctx context.Context, name string, wasm []byte) (runtime.Inspection, error) {
		return opts.Engine.Inspect(ctx, name, wasm, opts.BuiltinOptions...)
	}
	c.load = func(ctx context.Context, name string, wasm []byte, o origin) (module, error) {
		mo := opts.DropInOptions
		if o == originBuiltin {
			mo = opts.BuiltinOptions
		}
		return opts.Engine.Load(ctx, name, wasm, mo...)
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	if err := c.metrics.register(opts.Registerer); err != nil {
		_ = c.Close(ctx)
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return c, nil
}

func newCatalog(opts Options) *Catalog {
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = defaultRefreshInterval
	}
	if opts.Debounce <= 0 {
		opts.Debounce = defaultDebounce
	}
	if opts.SampleSize <= 0 {
		opts.SampleSize = defaultSampleSize
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	return &Catalog{
		reloadSem: make(chan struct{}, 1),
		opts:      opts,
		log:       opts.Logger,
		metrics:   newMetrics(),
		slots:     map[string]*slot{},
		files:     map[string]*fileState{},
		reloads:   map[string]int{},
	}
}

func (c *Catalog) start(ctx context.Context) error {
	compiled := 0
	for _, n := range slices.Sorted(maps.Keys(c.opts.Builtin)) {
		wasm := c.opts.Builtin[n]
		file := "builtin:" + n
		in, recorded, err := c.builtinManifest(ctx, n, file, wasm)
		if err != nil {
			_ = c.closeAll(ctx) // the load failed: err is the one to report
			return fmt.Errorf("catalog: built-in %s: %w", n, err)
		}
		if !in.Stored {
			compiled++
		}
		mod := newLazyModule(file, in.Manifest, func(ctx context.Context) (module, error) {
			m, err := c.load(ctx, file, wasm, originBuiltin)
			if err != nil || !recorded || reflect.DeepEqual(m.Manifest(), in.Manifest) {
				return m, err
			}
			_ = m.Close(ctx)
			return nil, fmt.Errorf("the module answers the manifest %+v, the build recorded %+v", m.Manifest(), in.Manifest)
		}, func(err error, took time.Duration) { c.builtinLoaded(file, in.Manifest, err, took) })
		ld := &loaded{mod: mod, origin: originBuiltin, file: file, base: n, sha: in.SHA256, at: time.Now().UTC()}
		name := in.Manifest.Name
		if prev, ok := c.slots[name]; ok {
			_ = c.closeAll(ctx) // the names clash: that is the error to report
			return fmt.Errorf("catalog: built-ins %s and %s are both named %q", prev.builtin.file, ld.file, name)
		}
		c.slots[name] = &slot{name: name, builtin: ld, active: ld}
	}
	if compiled > 0 {
		// The modules compiled only to read their manifests are closed;
		// hand their memory back now rather than as the runtime's scavenger
		// gets to it, so a first start settles where a later one does.
		debug.FreeOSMemory()
	}
	c.loadState()
	c.mu.Lock()
	c.publish()
	c.mu.Unlock()
	if c.opts.Dir != "" {
		c.reload(ctx, "start")
	}
	c.mu.Lock()
	_ = c.save() // logged
	c.mu.Unlock()
	return nil
}

// builtinManifest is the manifest of the built-in module n: the build's
// record when there is one (recorded true; nothing compiled), else what
// Engine.Inspect reads.
func (c *Catalog) builtinManifest(ctx context.Context, n, file string, wasm []byte) (in runtime.Inspection, recorded bool, err error) {
	rec, ok := c.opts.BuiltinManifests[n]
	if !ok {
		in, err = c.inspect(ctx, file, wasm)
		return in, false, err
	}
	mf, err := runtime.ParseManifest(rec)
	if err != nil {
		return in, false, fmt.Errorf("recorded manifest: %w", err)
	}
	sum := sha256.Sum256(wasm)
	return runtime.Inspection{Manifest: mf, SHA256: hex.EncodeToString(sum[:]), Stored: true}, true, nil
}

// Route returns the module for eventType; the pipeline calls it for every
// message. The answer comes from the current snapshot without a lock. During a
// migration the returned Mapper also runs the candidate in shadow.
func (c *Catalog) Route(eventType string) (pipeline.Mapper, bool) {
	r, ok := c.snap.Load().route(eventType)
	if !ok {
		return nil, false
	}
	return r, true
}

// Named returns a Mapper that stands for the module name rather than one
// version of it: every call goes to the version active at that moment (its
// candidate shadowing as usual), so a chain of modules resolved once, such as
// a plog listener's, follows reloads and promotions. ok is false when no
// active module has that name now; if the name disappears later, calls fail
// with ErrUnknownModule and Manifest claims nothing.
func (c *Catalog) Named(name string) (pipeline.Mapper, bool) {
	if _, ok := c.snap.Load().byName[name]; !ok {
		return nil, false
	}
	return &named{load: c.snap.Load, name: name}, true
}

// routeLatest is the retry path of a call that met a retired module.
func (c *Catalog) routeLatest(eventType string) (*route, bool) {
	return c.snap.Load().route(eventType)
}

// Generation counts the snapshots published; it grows by one at every change.
func (c *Catalog) Generation() uint64 { return c.snap.Load().gen }

// publish builds and stores a new snapshot from the slots. c.mu held.
func (c *Catalog) publish() {
	c.gen++
	entries := make([]entry, 0, len(c.slots))
	migs := 0
	for _, s := range c.slots {
		entries = append(entries, entry{ld: s.active, mig: s.mig})
		if s.mig != nil {
			migs++
		}
	}
	c.snap.Store(newSnapshot(c.gen, entries, c.routeLatest))
	c.metrics.migrations.Set(float64(migs))
	// Only now that no snapshot routes to them any more may the replaced
	// modules close; a call routed just before the swap finds them closed
	// and is routed again on this snapshot.
	for _, ld := range c.pending {
		c.closeRetired(ld)
	}
	c.pending = nil
	_ = c.save() // logged; the next change tries again
}

// retire schedules a replaced drop-in module to be closed once the next
// snapshot is published, in the background, after its calls in flight have
// finished. Built-ins stay loaded: they are the fallback of their name. c.mu
// held.
func (c *Catalog) retire(ld *loaded) {
	if ld == nil || ld.origin == originBuiltin {
		return
	}
	c.pending = append(c.pending, ld)
}

func (c *Catalog) closeRetired(ld *loaded) {
	c.retiring.Add(1)
	go func() {
		defer c.retiring.Done()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := ld.mod.Close(ctx); err != nil {
			c.log.Warn().Err(err).Str("mapper", ld.mod.ID()).Str("file", ld.file).Msg("close retired mapper")
		}
	}()
}

// park marks a drop-in file as serving no traffic until its content changes.
// c.mu held.
func (c *Catalog) park(file, reason string) {
	if fs, ok := c.files[file]; ok {
		fs.state, fs.reason, fs.at = "parked", reason, time.Now().UTC()
		c.log.Info().Str("file", file).Str("reason", reason).Msg("mapper file parked until its content changes")
	}
}

// replaceActive puts ld in service for s: the version it replaces finishes
// its calls in flight and is freed (a built-in stays loaded as the fallback),
// and its file, if another drop-in, is parked with reason. c.mu held.
func (c *Catalog) replaceActive(s *slot, ld *loaded, reason string) {
	old := s.active
	s.active = ld
	c.retire(old)
	if old.origin == originDropIn && old.file != ld.file {
		c.park(old.file, reason)
	}
}

// endMigration retires the candidate of s and records the outcome. c.mu held.
func (c *Catalog) endMigration(s *slot, result, reason string) {
	m := s.mig
	if m == nil {
		return
	}
	s.mig = nil
	out := &MigrationOutcome{
		Name: s.name, Result: result, Candidate: m.cand.mod.ID(), Reason: reason, At: time.Now().UTC(),
		Matches: m.matches.Load(), Differences: m.differences.Load(),
	}
	if s.active != nil {
		out.Active = s.active.mod.ID()
	}
	s.last = out
	if result != "promoted" {
		c.retire(m.cand)
	}
	c.log.Info().Str("mapper", s.name).Str("candidate", out.Candidate).Str("result", result).
		Str("reason", reason).Int64("matches", out.Matches).Int64("differences", out.Differences).
		Msg("mapper migration ended")
}

// removeFile applies the removal of a drop-in path: deletion wins over a
// migration. c.mu held.
func (c *Catalog) removeFile(p string, res *ReloadResult) {
	for name, s := range c.slots {
		activeGone := s.active.origin == originDropIn && s.active.file == p
		candGone := s.mig != nil && s.mig.cand.file == p
		switch {
		case activeGone:
			if s.mig != nil {
				cf := s.mig.cand.file
				c.endMigration(s, "cancelled", "the active module's file "+filepath.Base(p)+" was removed")
				if cf != p {
					c.park(cf, "migration cancelled: the active module's file was removed")
				}
			}
			old := s.active
			c.retire(old)
			res.Removed = append(res.Removed, fmt.Sprintf("%s (%s)", old.mod.ID(), old.file))
			if s.builtin != nil {
				s.active = s.builtin
			} else {
				delete(c.slots, name)
			}
		case candGone:
			id := s.mig.cand.mod.ID()
			c.endMigration(s, "cancelled", "the candidate's file "+filepath.Base(p)+" was removed")
			res.Removed = append(res.Removed, fmt.Sprintf("%s (%s)", id, p))
		}
	}
}

// place puts a freshly loaded drop-in into the catalogue. c.mu held.
func (c *Catalog) place(ld *loaded, initial bool, res *ReloadResult) {
	name := ld.mod.Manifest().Name
	// The path served another module name before: that one is removed.
	for n, s := range c.slots {
		if n == name {
			continue
		}
		if (s.active.origin == originDropIn && s.active.file == ld.file) || (s.mig != nil && s.mig.cand.file == ld.file) {
			c.removeFile(ld.file, res)
			break
		}
	}
	s := c.slots[name]
	role := "active"
	defer func() {
		if r := c.applyDeferred(name, ld); r != "" {
			role += "; " + r
		}
		res.Loaded = append(res.Loaded, fmt.Sprintf("%s (%s): %s", ld.mod.ID(), ld.file, role))
		c.log.Info().Str("mapper", ld.mod.ID()).Str("file", ld.file).Str("role", role).Msg("mapper loaded")
	}()
	resumed := false
	if initial && c.saved != nil {
		switch how, reason := c.restoreOf(name, s, ld); how {
		case restoreActive:
			if s != nil && s.active.sha != ld.sha {
				c.replaceActive(s, ld, "superseded at start-up by "+ld.mod.ID()+", in service before the restart")
				role = "active (in service before the restart)"
				return
			}
			// A new name, or the same code as the version in service:
			// placed as at any start.
		case restorePark:
			c.retire(ld)
			c.park(ld.file, reason)
			role = "parked (" + reason + ")"
			return
		case restoreLater:
			initial = false
			resumed = ld.sha == c.saved.Names[name].Candidate
		}
	}
	switch {
	case s == nil:
		c.slots[name] = &slot{name: name, active: ld}
	case s.active.sha == ld.sha:
		// The same code as the active module (a file restored, or a copy of
		// the built-in): nothing changes but a candidate is no longer wanted.
		if s.mig != nil && s.mig.cand.file == ld.file {
			c.endMigration(s, "replaced", "the candidate's file now holds the active module")
		}
		c.retire(ld)
		role = "same as active, unchanged"
	case initial:
		if s.active.origin == originDropIn {
			// Two drop-ins of one name at start-up: the higher version wins.
			keep, drop := s.active, ld
			if semverLess(s.active.mod.Manifest().Version, ld.mod.Manifest().Version) ||
				(s.active.mod.Manifest().Version == ld.mod.Manifest().Version && s.active.base < ld.base) {
				keep, drop = ld, s.active
			}
			s.active = keep
			c.retire(drop)
			c.park(drop.file, "superseded at start-up by "+keep.mod.ID()+" ("+filepath.Base(keep.file)+")")
			if drop == ld {
				role = "superseded"
			}
		} else {
			s.active = ld
		}
	case c.opts.Promote == PromoteImmediate:
		if s.mig != nil {
			cf := s.mig.cand.file
			c.endMigration(s, "replaced", ld.mod.ID()+" replaced it (immediate promotion)")
			if cf != ld.file {
				c.park(cf, "candidate replaced by "+ld.mod.ID())
			}
		}
		c.replaceActive(s, ld, "superseded by "+ld.mod.ID()+" ("+filepath.Base(ld.file)+")")
	default:
		if s.mig != nil {
			cf := s.mig.cand.file
			c.endMigration(s, "replaced", "a newer candidate "+ld.mod.ID()+" arrived")
			if cf != ld.file {
				c.park(cf, "candidate replaced by "+ld.mod.ID())
			}
		}
		mname := name
		s.mig = newMigration(ld, c.opts.SampleSize, func(match bool) {
			r := "difference"
			if match {
				r = "match"
			}
			c.metrics.shadow.WithLabelValues(mname, r).Inc()
		})
		role = "candidate in shadow of " + s.active.mod.ID()
		if resumed {
			// The migration goes on from where the last run left it; its
			// counters and samples start again from zero.
			if since := c.saved.Names[name].Since; !since.IsZero() {
				s.mig.since = since
			}
			role += " (migration resumed after the restart)"
		}
	}
}

// change is a drop-in file whose content differs from what the catalogue
// last saw at its path.
type change struct {
	f   found
	c   content
	ld  *loaded
	err error
	// skip: err says why the file was not read (or read no further):
	// not a regular file, too large, a link out of the directory.
	skip bool
}

// Reload scans the drop-in directory now and applies what changed. Run calls
// it on change notifications and periodically; tests and tools may call it
// directly. Reloads are serialised: Reload waits for the one in progress, or
// for ctx, whichever comes first (then the result's Error is ctx's).
func (c *Catalog) Reload(ctx context.Context) ReloadResult {
	return c.reload(ctx, "api")
}

func (c *Catalog) reload(ctx context.Context, trigger string) ReloadResult {
	res := ReloadResult{At: time.Now().UTC(), Trigger: trigger, OK: true}
	if c.opts.Dir == "" {
		return res
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		res.OK, res.Error = false, ErrClosed.Error()
		return res
	}
	if !c.acquireReload(ctx) {
		res.OK, res.Error = false, ctx.Err().Error()
		return res
	}
	defer func() { <-c.reloadSem }()
	c.mu.Lock()
	closed = c.closed
	known := make(map[string]fileState, len(c.files))
	for p, fs := range c.files {
		known[p] = *fs
	}
	c.mu.Unlock()
	if closed {
		res.OK, res.Error = false, ErrClosed.Error()
		return res
	}

	list, err := scanDir(c.opts.Dir, c.opts.MaxFileSize)
	if err != nil {
		// An unreadable directory changes nothing: what works keeps working.
		res.OK, res.Changed, res.Error = false, true, err.Error()
		c.finish(&res)
		return res
	}
	c.mu.Lock()
	// The first read of the directory places its files against the saved
	// decisions, as a start does: a directory that appears after a start
	// without it (a volume mounted late) resumes the last run's decisions
	// instead of taking every file as new (an aborted version back in
	// shadow, the version in service a candidate again).
	first := !c.scanned
	c.scanned = true
	c.mu.Unlock()
	seen := map[string]bool{}
	var changes []*change
	var touched []found // same content, new stat
	for _, f := range list {
		seen[f.path] = true
		fs, ok := known[f.path]
		if f.skip != nil {
			// Never opened. Unchanged, it is not counted nor logged again.
			if !ok || fs.state != "skipped" || fs.key != f.key || fs.reason != f.skip.Error() {
				changes = append(changes, &change{f: f, err: f.skip, skip: true})
			}
			continue
		}
		// The stat shortcut spares reading unchanged files; the periodic scan
		// reads everything, for filesystems whose timestamps are coarse.
		if ok && fs.key == f.key && trigger != "periodic" {
			continue
		}
		if err := ctx.Err(); err != nil {
			// Stopping: nothing was compiled yet, nothing changes.
			res.OK, res.Error = false, err.Error()
			return res
		}
		ct, err := readContent(f, c.opts.MaxFileSize)
		if err != nil {
			skip := errors.Is(err, ErrNotRegular) || errors.Is(err, ErrTooLarge)
			if skip && ok && fs.state == "skipped" && fs.key == f.key && fs.reason == err.Error() {
				continue
			}
			changes = append(changes, &change{f: f, err: err, skip: skip})
			continue
		}
		if ok && fs.digest == ct.digest {
			touched = append(touched, f)
			continue
		}
		changes = append(changes, &change{f: f, c: ct})
	}
	var removed []string
	for p := range known {
		if !seen[p] {
			removed = append(removed, p)
		}
	}
	sort.Strings(removed)

	for _, ch := range changes {
		if ch.err != nil {
			continue
		}
		ch.ld, ch.err = c.loadDropIn(ctx, ch.f, ch.c)
	}
	if ctx.Err() != nil {
		for _, ch := range changes {
			if ch.ld != nil {
				_ = ch.ld.mod.Close(context.Background())
			}
		}
		res.OK, res.Error = false, ctx.Err().Error()
		return res
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		for _, ch := range changes {
			if ch.ld != nil {
				_ = ch.ld.mod.Close(context.Background())
			}
		}
		res.OK, res.Error = false, ErrClosed.Error()
		return res
	}
	for _, f := range touched {
		if fs := c.files[f.path]; fs != nil {
			fs.key = f.key
		}
	}
	if first && c.saved != nil {
		// The version each name had in service goes in first, then its
		// candidate, then the rest, so that every other version of a name
		// is placed against the version the last run kept.
		sort.SliceStable(changes, func(i, j int) bool {
			return c.restoreRank(changes[i].c.sha) < c.restoreRank(changes[j].c.sha)
		})
	}
	for _, p := range removed {
		delete(c.files, p)
		c.removeFile(p, &res)
	}
	for _, ch := range changes {
		now := time.Now().UTC()
		if ch.skip {
			reason := ch.err.Error()
			c.files[ch.f.path] = &fileState{key: ch.f.key, state: "skipped", reason: reason, at: now}
			res.Skipped = append(res.Skipped, Rejection{File: ch.f.path, Reason: reason})
			res.OK = false
			c.metrics.skipped.WithLabelValues(skipReason(ch.err)).Inc()
			c.log.Error().Str("file", ch.f.path).Str("reason", reason).
				Msg("mapper file skipped, never read nor compiled; the other files are reloaded")
			continue
		}
		if ch.err != nil {
			reason := ch.err.Error()
			key := ch.f.key
			if ch.c.digest == "" {
				key = statKey{} // unreadable: try again at the next scan
			}
			c.files[ch.f.path] = &fileState{key: key, digest: ch.c.digest, sha: ch.c.sha, state: "rejected", reason: reason, at: now}
			res.Rejected = append(res.Rejected, Rejection{File: ch.f.path, Reason: reason})
			res.OK = false
			c.log.Error().Str("file", ch.f.path).Str("reason", reason).
				Msg("mapper module rejected; the modules in service are unchanged")
			continue
		}
		c.files[ch.f.path] = &fileState{key: ch.f.key, digest: ch.c.digest, sha: ch.c.sha, at: now}
		c.place(ch.ld, first, &res)
	}
	if first {
		c.saved = nil // used by the first read only
	}
	res.Changed = len(changes) > 0 || len(removed) > 0
	if res.Changed {
		c.publish()
	}
	if res.Changed || !res.OK {
		c.recordLocked(&res)
	}
	c.mu.Unlock()
	if res.Changed || !res.OK {
		c.report(&res)
	}
	return res
}

// finish records, counts and logs a reload that failed before it could
// change anything.
func (c *Catalog) finish(res *ReloadResult) {
	c.mu.Lock()
	c.recordLocked(res)
	c.mu.Unlock()
	c.report(res)
}

// recordLocked makes res the last reload. c.mu is held, by the same critical
// section that published what res changed: Status never shows a reload's
// modules beside the previous reload's result.
func (c *Catalog) recordLocked(res *ReloadResult) {
	if res.OK {
		c.reloads["ok"]++
	} else {
		c.reloads["error"]++
	}
	r := *res
	c.lastReload = &r
}

// report counts and logs a recorded reload.
func (c *Catalog) report(res *ReloadResult) {
	result := "ok"
	if !res.OK {
		result = "error"
	}
	c.metrics.reloads.WithLabelValues(result).Inc()
	if res.OK {
		c.metrics.lastOK.Set(1)
	} else {
		c.metrics.lastOK.Set(0)
	}
	ev := c.log.Info()
	if !res.OK {
		ev = c.log.Warn()
	}
	ev.Str("trigger", res.Trigger).Bool("ok", res.OK).Strs("loaded", res.Loaded).Strs("removed", res.Removed).
		Int("rejected", len(res.Rejected)).Str("error", res.Error).Msg("mappers reloaded")
}

// loadDropIn compiles and validates a drop-in and runs its fixture pairs.
func (c *Catalog) loadDropIn(ctx context.Context, f found, ct content) (*loaded, error) {
	mod, err := c.load(ctx, f.path, ct.wasm, originDropIn)
	if err != nil {
		return nil, err
	}
	if ct.fixtures != "" {
		if err := runFixtures(ctx, mod, ct.fixtures); err != nil {
			_ = mod.Close(ctx)
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
	}
	return &loaded{mod: mod, origin: originDropIn, file: f.path, base: f.base, sha: ct.sha, at: time.Now().UTC()}, nil
}

// Promote makes the candidate of the module name active; the previous active
// module finishes its calls in flight and is freed (a built-in stays loaded as
// the fallback of its name). With Options.OnDecision the decision is then
// handed over for the other replicas, and the outcome says whether it left
// (MigrationOutcome.Replicas).
func (c *Catalog) Promote(ctx context.Context, name string) (MigrationOutcome, error) {
	return c.decide(ctx, DecisionPromote, name)
}

// Abort ends the migration of the module name: the candidate is freed and its
// file parked until its content changes. The active module is unaffected.
// With Options.OnDecision the decision is handed over as with Promote.
func (c *Catalog) Abort(ctx context.Context, name string) (MigrationOutcome, error) {
	return c.decide(ctx, DecisionAbort, name)
}

// decide carries out an operator's promote or abort here, then hands the
// decision to Options.OnDecision without holding a lock.
func (c *Catalog) decide(ctx context.Context, action, name string) (MigrationOutcome, error) {
	if err := ctx.Err(); err != nil {
		return MigrationOutcome{}, err
	}
	c.mu.Lock()
	s, err := c.migrating(name)
	if err != nil {
		c.mu.Unlock()
		return MigrationOutcome{}, err
	}
	cand := s.mig.cand
	d := Decision{Action: action, Module: name, Candidate: cand.mod.ID(), SHA256: cand.sha,
		By: c.opts.Replica, At: time.Now().UTC()}
	if action == DecisionPromote {
		c.promoteCandidate(s, "")
	} else {
		c.abortCandidate(s, "")
	}
	// An operator's decision here is newer than any decision of another
	// replica still waiting for its candidate.
	c.supersedeDeferred(d)
	c.publish()
	out := *s.last
	c.mu.Unlock()
	if c.opts.OnDecision == nil {
		return out, nil
	}
	if err := c.opts.OnDecision(ctx, d); err != nil {
		out.Replicas, out.ReplicasError = ReplicasPending, err.Error()
		c.log.Warn().Err(err).Str("mapper", name).Str("candidate", d.Candidate).Str("action", action).
			Msg("mapper decision in effect on this replica only for now; it is sent to the other replicas once the broker confirms it")
		return out, nil
	}
	out.Replicas = ReplicasShared
	return out, nil
}

// promoteCandidate makes the candidate of s active. c.mu held; the caller
// publishes.
func (c *Catalog) promoteCandidate(s *slot, reason string) {
	cand := s.mig.cand
	c.replaceActive(s, cand, "superseded: "+cand.mod.ID()+" was promoted")
	c.endMigration(s, "promoted", reason)
}

// abortCandidate retires the candidate of s and parks its file. c.mu held;
// the caller publishes.
func (c *Catalog) abortCandidate(s *slot, reason string) {
	cf := s.mig.cand.file
	c.endMigration(s, "aborted", reason)
	why := "migration aborted; remove the file"
	if reason != "" {
		why = "migration aborted (" + reason + "); remove the file"
	}
	c.park(cf, why)
}

func (c *Catalog) migrating(name string) (*slot, error) {
	if c.closed {
		return nil, ErrClosed
	}
	s, ok := c.slots[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModule, name)
	}
	if s.mig == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoMigration, name)
	}
	return s, nil
}

// Status returns the catalogue as `mappers` and GET /mappers show it.
func (c *Catalog) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{
		Generation: c.gen,
		Dir:        c.opts.Dir,
		Promote:    c.opts.Promote.String(),
		Replica:    c.opts.Replica,
		Deferred:   append([]Decision(nil), c.deferred...),
		Reloads:    map[string]int{"ok": c.reloads["ok"], "error": c.reloads["error"]},
	}
	for _, n := range slices.Sorted(maps.Keys(c.slots)) {
		s := c.slots[n]
		ms := ModuleStatus{Name: n, State: StateActive, Active: s.active.info(), Last: s.last}
		if s.mig != nil {
			ms.State = StateMigrating
			m := s.mig.status()
			ms.Migration = &m
		}
		if s.builtin != nil && s.builtin != s.active {
			b := s.builtin.info()
			ms.Builtin = &b
		}
		st.Modules = append(st.Modules, ms)
	}
	st.Patterns = patterns(st.Modules)
	for _, p := range slices.Sorted(maps.Keys(c.files)) {
		fs := c.files[p]
		if fs.state != "" {
			st.Files = append(st.Files, FileStatus{File: p, SHA256: fs.sha, State: fs.state, Reason: fs.reason, At: fs.at})
		}
	}
	st.Conflicts = c.snap.Load().conflicts()
	if c.lastReload != nil {
		r := *c.lastReload
		st.LastReload = &r
	}
	return st
}

// Close stops serving and frees every module, waiting for calls in flight.
// Route keeps answering from the last snapshot, whose modules then fail with
// runtime.ErrClosed. The Engine is the caller's to close.
//
// Close waits for a reload in progress, and for retired modules to finish
// their calls, no longer than ctx: a reload stuck in a read (a file system
// that does not answer) does not hold the stop. Past ctx, Close frees what
// the catalogue holds and returns ctx's error; the reload, when it ends,
// sees the catalogue closed and frees what it loaded itself.
func (c *Catalog) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	if c.acquireReload(ctx) {
		defer func() { <-c.reloadSem }()
	} else {
		c.log.Warn().Str("dir", c.opts.Dir).
			Msg("a reload of the mappers directory still runs; closing without waiting for it")
		errs = append(errs, fmt.Errorf("catalog: a reload still runs: %w", ctx.Err()))
	}
	retired := make(chan struct{})
	go func() {
		c.retiring.Wait()
		close(retired)
	}()
	if !ready(ctx, retired) && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("catalog: retired modules still closing: %w", ctx.Err()))
	}
	errs = append(errs, c.closeAll(ctx))
	return errors.Join(errs...)
}

// acquireReload takes reloadSem, waiting no longer than ctx; false when
// ctx ended first. A free semaphore is taken even when ctx is done.
func (c *Catalog) acquireReload(ctx context.Context) bool {
	select {
	case c.reloadSem <- struct{}{}:
		return true
	default:
	}
	select {
	case c.reloadSem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// ready waits for done, no longer than ctx; false when ctx ended first. A
// closed done counts even when ctx is done.
func ready(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Catalog) closeAll(ctx context.Context) error {
	c.mu.Lock()
	var mods []module
	seen := map[module]bool{}
	add := func(ld *loaded) {
		if ld != nil && !seen[ld.mod] {
			seen[ld.mod] = true
			mods = append(mods, ld.mod)
		}
	}
	for _, ld := range c.pending {
		add(ld)
	}
	c.pending = nil
	for _, s := range c.slots {
		add(s.builtin)
		add(s.active)
		if s.mig != nil {
			add(s.mig.cand)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, m := range mods {
		if err := m.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// semverLess reports whether version a has a lower precedence than b
// (semver.org, item 11): MAJOR.MINOR.PATCH numerically, a pre-release below
// its release, pre-release identifiers one by one (numeric ones as numbers and
// below alphanumeric ones). Build metadata is ignored. The manifest check
// guarantees both are MAJOR.MINOR.PATCH[-pre][+build].
func semverLess(a, b string) bool {
	return semver.Compare("v"+a, "v"+b) < 0
}
