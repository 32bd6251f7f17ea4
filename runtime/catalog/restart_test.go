package catalog_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// collector is what a restart keeps: the drop-in directory and the outbox
// directory. start opens both as a collector starting up would; stop closes
// them.
type collector struct {
	t       *testing.T
	dir     string
	state   string
	builtin map[string][]byte
	promote catalog.PromoteMode
	// replica and onDecision: see catalog.Options (decision_test.go).
	replica    string
	onDecision func(context.Context, catalog.Decision) error
	reg        *prometheus.Registry // a new one at every start when set
	handed     []catalog.Decision

	ob *outbox.Outbox
	c  *catalog.Catalog
}

func newCollector(t *testing.T, builtin map[string][]byte) *collector {
	return &collector{t: t, dir: t.TempDir(), state: t.TempDir(), builtin: builtin}
}

func (k *collector) start() *catalog.Catalog {
	k.t.Helper()
	ob, err := outbox.Open(outbox.Options{Dir: k.state, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		k.t.Fatal(err)
	}
	k.ob = ob
	k.t.Cleanup(func() { _ = ob.Close() })
	opts := catalog.Options{Builtin: k.builtin, Dir: k.dir, State: ob, Promote: k.promote,
		Replica: k.replica, OnDecision: k.onDecision}
	if k.reg != nil {
		k.reg = prometheus.NewRegistry()
		opts.Registerer = k.reg
	}
	k.c = newCatalog(k.t, opts)
	return k.c
}

func (k *collector) stop() {
	k.t.Helper()
	if err := k.c.Close(context.Background()); err != nil {
		k.t.Fatal(err)
	}
	if err := k.ob.Close(); err != nil {
		k.t.Fatal(err)
	}
}

// moveDirAside moves the drop-in directory away, as when its volume is not
// mounted yet; restoreDir puts it back.
func (k *collector) moveDirAside() {
	k.t.Helper()
	if err := os.Rename(k.dir, k.dir+".aside"); err != nil {
		k.t.Fatal(err)
	}
}

// fileForDir moves the drop-in directory aside and leaves an empty file at
// its path, which cannot be read as a directory either.
func (k *collector) fileForDir() {
	k.t.Helper()
	k.moveDirAside()
	if err := os.WriteFile(k.dir, nil, 0o644); err != nil {
		k.t.Fatal(err)
	}
}

// restoreDir puts back the directory moveDirAside or fileForDir moved away.
func (k *collector) restoreDir() {
	k.t.Helper()
	if err := os.Remove(k.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		k.t.Fatal(err)
	}
	if err := os.Rename(k.dir+".aside", k.dir); err != nil {
		k.t.Fatal(err)
	}
}

func echoBuiltin(t *testing.T) map[string][]byte {
	return map[string][]byte{"echo.wasm": wasm(t, "echo_v1")}
}

// builtinShadowed starts a collector whose built-in echo 1.0.0 is shadowed
// by echo 2.0.0, dropped in as echo.wasm.
func builtinShadowed(t *testing.T) (*collector, *catalog.Catalog) {
	t.Helper()
	k := newCollector(t, echoBuiltin(t))
	c := k.start()
	drop(t, k.dir, "echo.wasm", "echo_v2")
	reload(t, c)
	return k, c
}

func TestMigrationSurvivesRestart(t *testing.T) {
	k, c := builtinShadowed(t)
	before := mustModule(t, c, "echo")
	if before.State != catalog.StateMigrating {
		t.Fatalf("before the restart: %+v", before)
	}
	k.stop()

	// The candidate goes back into shadow; it does not take over because
	// the collector restarted.
	c = k.start()
	m := mustModule(t, c, "echo")
	if m.State != catalog.StateMigrating || m.Active.ID != "echo@1.0.0" || m.Migration.Candidate.ID != "echo@2.0.0" {
		t.Fatalf("after the restart: %+v", m)
	}
	if !m.Migration.Since.Equal(before.Migration.Since) {
		t.Errorf("migration since %v, was %v", m.Migration.Since, before.Migration.Since)
	}
	p := newPipeline(c)
	if ev := mapOne(t, p, "test.a", "m1"); ev.Source.Mapper != "echo@1.0.0" {
		t.Errorf("after the restart the active version answers, got %s", ev.Source.Mapper)
	}
	if m := mustModule(t, c, "echo"); m.Migration.Differences != 1 {
		t.Errorf("the resumed migration compares again: %+v", m.Migration)
	}

	// Promoted, then restarted: the promoted version stays in service.
	if _, err := c.Promote(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	k.stop()
	c = k.start()
	m = mustModule(t, c, "echo")
	if m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" || m.Builtin == nil {
		t.Fatalf("after promotion and restart: %+v", m)
	}
	if ev := mapOne(t, newPipeline(c), "test.a", "m2"); ev.Source.Mapper != "echo@2.0.0" {
		t.Errorf("got %s", ev.Source.Mapper)
	}
}

func TestAbortSurvivesRestart(t *testing.T) {
	k, c := builtinShadowed(t)
	if _, err := c.Abort(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	k.stop()

	c = k.start()
	m := mustModule(t, c, "echo")
	if m.State != catalog.StateActive || m.Active.ID != "echo@1.0.0" {
		t.Fatalf("an aborted candidate came back after the restart: %+v", m)
	}
	f, ok := fileState(c.Status(), k.dir, "echo.wasm")
	if !ok || f.State != "parked" || !strings.Contains(f.Reason, "aborted") {
		t.Errorf("the aborted file should stay parked with its reason: %+v", c.Status().Files)
	}
	// New content at the path is a new candidate, as without a restart.
	drop(t, k.dir, "echo.wasm", "echo_v1b")
	reload(t, c)
	if m := mustModule(t, c, "echo"); m.Migration == nil || m.Migration.Candidate.ID != "echo@1.0.1" {
		t.Errorf("new content: %+v", m)
	}
}

func TestFileAddedWhileStoppedStartsInShadow(t *testing.T) {
	k := newCollector(t, echoBuiltin(t))
	k.start()
	k.stop()

	drop(t, k.dir, "echo.wasm", "echo_v2")
	c := k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateMigrating || m.Active.ID != "echo@1.0.0" {
		t.Fatalf("a new version dropped in while stopped should shadow the version in service: %+v", m)
	}
	k.stop()

	// With immediate promotion it takes over, as it would while running.
	k.promote = catalog.PromoteImmediate
	c = k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" {
		t.Fatalf("immediate: %+v", m)
	}
}

func TestActiveRemovedWhileStoppedParksTheCandidate(t *testing.T) {
	k := newCollector(t, nil)
	drop(t, k.dir, "a-echo.wasm", "echo_v1")
	c := k.start()
	drop(t, k.dir, "b-echo.wasm", "echo_v2")
	reload(t, c)
	if m := mustModule(t, c, "echo"); m.State != catalog.StateMigrating {
		t.Fatalf("%+v", m)
	}
	k.stop()

	// Deletion wins over a migration, across a restart too: the candidate
	// is not promoted by the back door.
	remove(t, k.dir, "a-echo.wasm")
	c = k.start()
	if _, ok := module(c.Status(), "echo"); ok {
		t.Fatalf("the candidate took over: %+v", c.Status().Modules)
	}
	f, ok := fileState(c.Status(), k.dir, "b-echo.wasm")
	if !ok || f.State != "parked" || !strings.Contains(f.Reason, "echo@1.0.0") {
		t.Errorf("the candidate should be parked: %+v", c.Status().Files)
	}
}

func TestWithoutSavedDecisionsTheDirectoryIsTheConfiguration(t *testing.T) {
	k := newCollector(t, echoBuiltin(t))
	drop(t, k.dir, "echo.wasm", "echo_v2")
	// A first start: nothing saved, every valid drop-in is active.
	c := k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" {
		t.Fatalf("first start: %+v", m)
	}
	k.stop()

	// A record that cannot be read is ignored, as if nothing were saved:
	// the collector starts.
	ob, err := outbox.Open(outbox.Options{Dir: k.state, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.SaveRecord("catalog", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	remove(t, k.dir, "echo.wasm")
	c = k.start()
	if m := mustModule(t, c, "echo"); m.Active.ID != "echo@1.0.0" {
		t.Fatalf("%+v", m)
	}
	// The decisions are saved again at once.
	k.stop()
	drop(t, k.dir, "echo.wasm", "echo_v2")
	c = k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateMigrating {
		t.Fatalf("the decisions were not saved again: %+v", m)
	}
}

func TestStartWithoutTheDirectoryKeepsTheDecisions(t *testing.T) {
	k, _ := builtinShadowed(t)
	k.stop()

	// One start where the directory cannot be read (a path that is a file,
	// as when a volume is not mounted yet): the built-in serves, and the
	// decisions of the run before are not overwritten.
	k.fileForDir()
	c := k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@1.0.0" {
		t.Fatalf("without the directory: %+v", m)
	}
	k.stop()
	k.restoreDir()
	c = k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateMigrating || m.Migration.Candidate.ID != "echo@2.0.0" {
		t.Fatalf("the migration was lost: %+v", m)
	}
}

// TestDirectoryAppearingAfterStartResumesTheDecisions: a start without the
// directory (a volume mounted late) serves the built-ins; when the directory
// appears, its files are placed against the last run's decisions, as at a
// start that could read it: the version promoted over the built-in serves
// again, and an aborted version stays parked instead of shadowing again.
func TestDirectoryAppearingAfterStartResumesTheDecisions(t *testing.T) {
	k := newCollector(t, map[string][]byte{"echo.wasm": wasm(t, "echo_v1"), "flaky.wasm": wasm(t, "flaky_v1")})
	c := k.start()
	drop(t, k.dir, "echo.wasm", "echo_v2")
	drop(t, k.dir, "flaky.wasm", "flaky_v2")
	reload(t, c)
	if _, err := c.Promote(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Abort(context.Background(), "flaky"); err != nil {
		t.Fatal(err)
	}
	k.stop()

	k.moveDirAside()
	c = k.start()
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@1.0.0" {
		t.Fatalf("without the directory the built-in serves: %+v", m)
	}
	k.restoreDir()
	reload(t, c)
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" {
		t.Errorf("the version promoted before the restart should serve again: %+v", m)
	}
	if m := mustModule(t, c, "flaky"); m.State != catalog.StateActive || m.Migration != nil {
		t.Errorf("an aborted version came back into shadow: %+v", m)
	}
	if f, ok := fileState(c.Status(), k.dir, "flaky.wasm"); !ok || f.State != "parked" || !strings.Contains(f.Reason, "aborted") {
		t.Errorf("the aborted file should stay parked with its reason: %+v", c.Status().Files)
	}
	// Later changes are changes while running: a new version shadows.
	drop(t, k.dir, "echo.wasm", "echo_v1b")
	reload(t, c)
	if m := mustModule(t, c, "echo"); m.Migration == nil || m.Migration.Candidate.ID != "echo@1.0.1" {
		t.Errorf("a file changed after the first read should shadow: %+v", m)
	}
}
