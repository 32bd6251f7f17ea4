package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func cacheDir(t testing.TB) string {
	if d := os.Getenv("TALLY_OSC_TEST_CACHE"); d != "" {
		return d
	}
	return t.TempDir()
}

func testLogger() zerolog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return zerolog.New(zerolog.NewConsoleWriter()).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

func newEngine(t testing.TB) *runtime.Engine {
	t.Helper()
	e, err := runtime.NewEngine(context.Background(), runtime.Config{CacheDir: cacheDir(t), Logger: testLogger(), PoolSize: 4,
		// Generous: these tests are about routing, not deadlines, and the
		// machine may be busy with other packages' tests.
		CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// wasm returns testdata/<name>.wasm, built by `make wasm`; when missing it is
// assembled with wat2wasm into a temporary directory.
func wasm(t testing.TB, name string) []byte {
	t.Helper()
	p := filepath.Join("testdata", name+".wasm")
	if b, err := os.ReadFile(p); err == nil {
		return b
	}
	out := filepath.Join(t.TempDir(), name+".wasm")
	if msg, err := exec.Command("wat2wasm", "-o", out, filepath.Join("testdata", name+".wat")).CombinedOutput(); err != nil {
		t.Fatalf("%s missing (run make wasm) and wat2wasm failed: %v %s", p, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

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
	opts.Logger = testLogger()
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
	EventType string `json:"event_type"`
	EventID   string `json:"event_id"`
	Variant   string `json:"variant"`
	Source    struct {
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

// waitFor polls cond until it holds or 10 s passed (a bound on a background
// reaction, not a performance assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func reload(t testing.TB, c *catalog.Catalog) catalog.ReloadResult {
	t.Helper()
	r := c.Reload(context.Background())
	if !r.Changed {
		t.Fatalf("reload saw no change: %+v", r)
	}
	return r
}

// metricValue returns the value of the series of name whose label values
// include every one of labels.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]bool{}
			for _, lp := range m.GetLabel() {
				have[lp.GetValue()] = true
			}
			for _, l := range labels {
				if !have[l] {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

var _ = fmt.Sprint
