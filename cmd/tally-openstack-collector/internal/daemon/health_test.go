package daemon

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// fakeClock is the injectable clock of the liveness tracker.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var errDisk = errors.New("disk refused the write")

func TestLivenessTracker(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := newLivenessTracker(600*time.Second, clk.now)

	if err := tr.check(); err != nil {
		t.Fatalf("fresh tracker not live: %v", err)
	}
	tr.observe(errDisk)
	clk.advance(599 * time.Second)
	tr.observe(errDisk)
	if err := tr.check(); err != nil {
		t.Fatalf("failed before the threshold: %v", err)
	}
	clk.advance(time.Second)
	err := tr.check()
	if err == nil {
		t.Fatal("still live after 600 s of unbroken unusability")
	}
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), "10m0s") {
		t.Errorf("the error should say why and for how long: %v", err)
	}

	// One usable reading breaks the run; the clock starts over.
	tr.observe(nil)
	if err := tr.check(); err != nil {
		t.Fatalf("not live after the outbox recovered: %v", err)
	}
	tr.observe(errDisk)
	clk.advance(300 * time.Second)
	tr.observe(nil)
	clk.advance(time.Second)
	tr.observe(errDisk)
	clk.advance(599 * time.Second)
	if err := tr.check(); err != nil {
		t.Fatalf("a broken run must not add up: %v", err)
	}
	clk.advance(time.Second)
	if tr.check() == nil {
		t.Fatal("the new run reached the threshold")
	}
}

type switchable struct {
	mu  sync.Mutex
	err error
}

func (s *switchable) set(err error) { s.mu.Lock(); s.err = err; s.mu.Unlock() }
func (s *switchable) check() error  { s.mu.Lock(); defer s.mu.Unlock(); return s.err }

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func newProbeServer(t *testing.T, threshold time.Duration, clk *fakeClock) (*httptest.Server, *switchable, *switchable, *switchable, *testkit.SyncBuffer) {
	ob, broker, snd := &switchable{}, &switchable{}, &switchable{}
	logs := &testkit.SyncBuffer{}
	p := &probes{
		outbox: ob.check,
		ready:  map[string]func() error{"broker": broker.check, "sender": snd.check},
		live:   newLivenessTracker(threshold, clk.now),
		log:    zerolog.New(logs),
	}
	reg, err := newRegistry(BuildInfo{Version: "v9.9.9", Commit: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := newControlAuth(nil, true, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newMux(p, reg, guard, nil))
	t.Cleanup(srv.Close)
	return srv, ob, broker, snd, logs
}

func TestReadyz(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	srv, ob, broker, snd, logs := newProbeServer(t, time.Minute, clk)

	if code, body := get(t, srv, "/readyz"); code != 200 || body != "ok\n" {
		t.Fatalf("all well: %d %q", code, body)
	}
	secret := errors.New("dial amqp://tally:hunter2@rabbit: connection refused")
	broker.set(secret)
	code, body := get(t, srv, "/readyz")
	if code != 503 || body != "not ready\n" {
		t.Fatalf("broker down: %d %q", code, body)
	}
	broker.set(nil)
	ob.set(errDisk)
	if code, body := get(t, srv, "/readyz"); code != 503 || body != "not ready\n" {
		t.Fatalf("outbox down: %d %q", code, body)
	}
	ob.set(nil)
	snd.set(errors.New("token refused (401)"))
	if code, _ := get(t, srv, "/readyz"); code != 503 {
		t.Fatalf("token refused: %d", code)
	}
	snd.set(nil)
	if code, _ := get(t, srv, "/readyz"); code != 200 {
		t.Fatalf("recovered: %d", code)
	}
	// What failed is in the log, once per change.
	if n := strings.Count(logs.String(), `"check":"broker"`); n != 1 {
		t.Errorf("broker failure logged %d times:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"check":"outbox"`) || !strings.Contains(logs.String(), `"check":"sender"`) {
		t.Errorf("log lacks the failed checks:\n%s", logs.String())
	}
}

// TestLivezIgnoresBroker: a broker outage never fails liveness; only an
// outbox unusable for the whole threshold does.
func TestLivez(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	srv, ob, broker, _, _ := newProbeServer(t, 10*time.Second, clk)

	broker.set(errors.New("connection refused"))
	clk.advance(time.Hour)
	if code, body := get(t, srv, "/livez"); code != 200 || body != "ok\n" {
		t.Fatalf("a broker outage failed liveness: %d %q", code, body)
	}
	if code, _ := get(t, srv, "/readyz"); code != 503 {
		t.Fatal("yet readiness must fail")
	}

	ob.set(errDisk)
	if code, _ := get(t, srv, "/livez"); code != 200 {
		t.Fatal("failed at the first unusable reading")
	}
	clk.advance(9 * time.Second)
	if code, _ := get(t, srv, "/livez"); code != 200 {
		t.Fatal("failed before the threshold")
	}
	clk.advance(time.Second)
	if code, body := get(t, srv, "/livez"); code != 503 || body != "not live\n" {
		t.Fatalf("after the threshold: %d %q", code, body)
	}
	ob.set(nil)
	if code, _ := get(t, srv, "/livez"); code != 200 {
		t.Fatal("not live again after recovery")
	}
}

func TestMetricsEndpoint(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	srv, _, _, _, _ := newProbeServer(t, time.Minute, clk)
	code, body := get(t, srv, "/metrics")
	if code != 200 {
		t.Fatalf("%d", code)
	}
	if !strings.Contains(body, `tally_collector_build_info{commit="abc",go_version="go`) || !strings.Contains(body, `version="v9.9.9"} 1`) {
		t.Errorf("build info missing:\n%s", body)
	}
	if !strings.Contains(body, "process_resident_memory_bytes") {
		t.Error("process collector missing")
	}
	if code, _ := get(t, srv, "/nothing"); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
}

func TestNotStartedIsNotReady(t *testing.T) {
	p := &probes{outbox: func() error { return nil }, ready: map[string]func() error{"broker": nil},
		live: newLivenessTracker(time.Minute, nil), log: zerolog.Nop()}
	rec := httptest.NewRecorder()
	p.readyz(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 {
		t.Fatalf("a part not started yet must read as not ready: %d", rec.Code)
	}
}
