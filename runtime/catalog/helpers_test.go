package catalog_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func newEngine(t testing.TB) *runtime.Engine {
	t.Helper()
	e, err := runtime.NewEngine(context.Background(), runtime.Config{CacheDir: testkit.CacheDir(t), Logger: testkit.Logger(), PoolSize: 4,
		// Generous: these tests are about routing, not deadlines, and the
		// machine may be busy with other packages' tests.
		CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// wasm returns testdata/<name>.wasm, built by make test-wasm, or assembled
// from its .wat when it is not there.
func wasm(t testing.TB, name string) []byte { t.Helper(); return testkit.WAT(t, "testdata", name) }

// drop puts module name into dir as file, the way an operator would: written
// beside, then renamed into place.
func drop(t testing.TB, dir, file, name string) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+file)
	if err := os.WriteFile(tmp, wasm(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
		t.Fatal(err)
	}
}

// dropBytes puts raw bytes into dir as file.
func dropBytes(t testing.TB, dir, file string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyFixtures copies testdata/<fixtures> to dir/<stem>.fixtures.
func copyFixtures(t testing.TB, dir, stem, fixtures string) {
	t.Helper()
	dst := filepath.Join(dir, stem+catalog.FixtureSuffix)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("testdata", fixtures)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func remove(t testing.TB, dir, file string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, file)); err != nil {
		t.Fatal(err)
	}
}

func newCatalog(t testing.TB, opts catalog.Options) *catalog.Catalog {
	t.Helper()
	if opts.Engine == nil {
		opts.Engine = newEngine(t)
	}
	opts.Logger = testkit.Logger()
	c, err := catalog.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("close catalogue: %v", err)
		}
	})
	return c
}

// catalogOn drops testdata module name into opts.Dir as file (into a new
// directory when opts.Dir is empty) and opens a catalogue on that directory
// with opts. It returns the directory, the catalogue and a pipeline the
// catalogue routes.
func catalogOn(t testing.TB, opts catalog.Options, file, name string) (string, *catalog.Catalog, *pipeline.Pipeline) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	drop(t, opts.Dir, file, name)
	c := newCatalog(t, opts)
	return opts.Dir, c, newPipeline(c)
}

// migrating opens a catalogue as catalogOn does with module from as file,
// then drops module to in as next and reloads: the new version shadows the
// one in service (or replaces it at once under catalog.PromoteImmediate).
func migrating(t testing.TB, opts catalog.Options, file, from, next, to string) (string, *catalog.Catalog, *pipeline.Pipeline) {
	t.Helper()
	dir, c, p := catalogOn(t, opts, file, from)
	drop(t, dir, next, to)
	reload(t, c)
	return dir, c, p
}

func newPipeline(c *catalog.Catalog) *pipeline.Pipeline {
	p, err := pipeline.New(pipeline.Options{Router: c, Logger: zerolog.Nop()})
	if err != nil {
		panic(err) // no registry: cannot fail
	}
	return p
}

// body is an oslo messagingv2 envelope around a notification.
func body(eventType, id string) []byte {
	inner, _ := json.Marshal(map[string]any{
		"message_id": id, "event_type": eventType, "priority": "INFO",
		"publisher_id": "test.host1", "timestamp": "2024-05-01 12:00:00.000000",
		"payload":             map[string]any{"id": id},
		"_context_auth_token": "gAAAAABsecretsecret",
	})
	env, _ := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(inner)})
	return env
}

type event struct {
	EventType  string `json:"event_type"`
	EventID    string `json:"event_id"`
	Variant    string `json:"-"` // attributes.variant
	Attributes struct {
		Variant string `json:"variant"`
	} `json:"attributes"`
	Source struct {
		Mapper   string `json:"mapper"`
		Exchange string `json:"exchange"`
	} `json:"source"`
}

func decodeEvent(t testing.TB, b []byte) event {
	t.Helper()
	var ev event
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("event %s: %v", b, err)
	}
	ev.Variant = ev.Attributes.Variant
	return ev
}

// mapOne processes one message and returns its single event.
func mapOne(t testing.TB, p *pipeline.Pipeline, eventType, id string) event {
	t.Helper()
	r := p.Process(context.Background(), pipeline.Message{Body: body(eventType, id), Exchange: "test", RoutingKey: "notifications.info"})
	if r.Outcome != pipeline.Mapped || len(r.Events) != 1 {
		t.Fatalf("%s %s: outcome %v reason %q err %v, %d events", eventType, id, r.Outcome, r.Reason, r.Err, len(r.Events))
	}
	return decodeEvent(t, r.Events[0])
}

func module(st catalog.Status, name string) (catalog.ModuleStatus, bool) {
	for _, m := range st.Modules {
		if m.Name == name {
			return m, true
		}
	}
	return catalog.ModuleStatus{}, false
}

func mustModule(t testing.TB, c *catalog.Catalog, name string) catalog.ModuleStatus {
	t.Helper()
	m, ok := module(c.Status(), name)
	if !ok {
		t.Fatalf("no module %q in %+v", name, c.Status().Modules)
	}
	return m
}

func fileState(st catalog.Status, dir, file string) (catalog.FileStatus, bool) {
	for _, f := range st.Files {
		if f.File == filepath.Join(dir, file) {
			return f, true
		}
	}
	return catalog.FileStatus{}, false
}

func reload(t testing.TB, c *catalog.Catalog) catalog.ReloadResult {
	t.Helper()
	r := c.Reload(context.Background())
	if !r.Changed {
		t.Fatalf("reload saw no change: %+v", r)
	}
	return r
}
