package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
)

func TestMain(m *testing.M) {
	ConfigureLogging() // as the program does before anything logs
	os.Exit(testkit.Main(m))
}

// inProcess is a daemon run by the test's own process: its settings, its log,
// the channel that stops it, and Run's answer once it returned.
type inProcess struct {
	cfg     *settings.Config
	log     *testkit.SyncBuffer
	signals chan os.Signal
	done    chan error
}

// startLimit bounds a daemon's start in these tests. A start compiles no
// module (the built-ins are routed by the manifests the build recorded);
// when it still compiled all eleven, a cold cache under the race detector
// took 55.9 s here. The limit catches a start that hangs, not a slow one.
const startLimit = 5 * time.Minute

// defaultSettings are the daemon's settings as their defaults make them,
// with the required ones given and extra entries overriding them.
func defaultSettings(t *testing.T, extra ...string) *settings.Config {
	t.Helper()
	env := append([]string{
		"TALLY_OSC_TRANSPORT_URL=amqp://guest:guest@127.0.0.1:5672/",
		"TALLY_OSC_EXCHANGES=nova",
		"TALLY_OSC_BUFFER_PATH=" + t.TempDir(),
		"TALLY_OSC_REPORTING_URL=https://reporting.example/api",
		"TALLY_OSC_REPORTING_TOKEN=t",
	}, extra...)
	cfg, err := settings.Load(nil, env, settings.ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// daemonSettings are the settings of a daemon on the virtual host v that
// delivers to reportingURL, over the defaults of defaultSettings, with extra
// entries overriding them.
func daemonSettings(t *testing.T, v *testkit.Vhost, reportingURL string, extra ...string) *settings.Config {
	t.Helper()
	cfg := defaultSettings(t, append([]string{
		"TALLY_OSC_TRANSPORT_URL=" + v.URL(),
		"TALLY_OSC_QUEUE_TYPE=classic", // the machine's RabbitMQ is 3.x
		"TALLY_OSC_EXCHANGES=nova",
		"TALLY_OSC_BUFFER_PATH=" + filepath.Join(t.TempDir(), "outbox"),
		"TALLY_OSC_REPORTING_URL=" + reportingURL,
		"TALLY_OSC_REPORTING_TOKEN=in-process",
		"TALLY_OSC_REPORTING_INSECURE=true",
		"TALLY_OSC_HTTP_ADDR=" + testkit.FreeAddr(t),
		"TALLY_OSC_MAPPER_CACHE_DIR=" + testkit.CacheDir(t),
		"TALLY_OSC_MAPPER_CALL_TIMEOUT=10s",
		"TALLY_OSC_STOP_TIMEOUT=30s",
	}, extra...)...)
	// No watchdog process: it would run this test binary again.
	cfg.WatchdogTimeout = 0
	return cfg
}

// referenceAPI is the reference Reporting API, in memory, that accepts the
// token of daemonSettings, and the HTTP server that serves it until the test
// ends.
func referenceAPI(t *testing.T) (*server.Server, *httptest.Server) {
	t.Helper()
	api, err := server.New(server.Options{Token: "in-process"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv
}

// runInProcess starts Run on cfg in a goroutine of the test.
func runInProcess(t *testing.T, cfg *settings.Config) *inProcess {
	t.Helper()
	d := &inProcess{cfg: cfg, log: &testkit.SyncBuffer{}, signals: make(chan os.Signal, 2), done: make(chan error, 1)}
	go func() {
		d.done <- Run(cfg, zerolog.New(d.log), Options{
			Build:   BuildInfo{Version: "test", Commit: "test"},
			Signals: d.signals,
			Exit:    func(code int) { t.Errorf("the daemon asked to end the process with status %d", code) },
		})
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", d.log)
		}
		close(d.signals) // stops a daemon still running, or ends its wait for a second signal
	})
	return d
}

// waitFor waits for cond as testkit.WaitFor does; Run returning first fails t.
func (d *inProcess) waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, limit, what, func() bool {
		select {
		case err := <-d.done:
			t.Fatalf("Run returned while waiting for %s: %v\n%s", what, err, d.log)
		default:
		}
		return cond()
	})
}

// waitReady waits for /readyz to answer ok; Run returning first fails t.
func (d *inProcess) waitReady(t *testing.T) {
	t.Helper()
	d.waitFor(t, startLimit, "/readyz to answer ok", func() bool {
		code, _, err := d.get("/readyz")
		return err == nil && code == http.StatusOK
	})
}

// oneRequestClient asks each request on a connection of its own, closed once
// answered, so that a test's requests hold none of the daemon's connections.
var oneRequestClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// get answers the status and body of a GET of path on the daemon's HTTP
// listener.
func (d *inProcess) get(path string) (int, string, error) {
	resp, err := oneRequestClient.Get("http://" + d.cfg.HTTPAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricValue answers the value of the series named name (with its labels,
// as the exposition writes them) in a /metrics body; a body without it
// fails t.
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics lacks %s:\n%s", name, body)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// returned waits for Run's answer.
func (d *inProcess) returned(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-d.done:
		return err
	case <-time.After(limit):
		t.Fatalf("Run did not return within %s:\n%s", limit, d.log)
		return nil
	}
}

// checkReleased: what Run started is released once it returned: the HTTP
// listener is closed and the outbox can be opened again (Badger holds a lock
// on its directory while it is open). It answers the outbox's depth.
func checkReleased(t *testing.T, cfg *settings.Config) int64 {
	t.Helper()
	if c, err := net.DialTimeout("tcp", cfg.HTTPAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("HTTP_ADDR %s still accepts connections after Run returned", cfg.HTTPAddr)
	}
	ob, err := outbox.Open(outbox.Options{Dir: cfg.BufferPath, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("the outbox is still held after Run returned: %v", err)
	}
	defer ob.Close()
	return ob.Depth()
}

// novaNotification is a nova notification of the fixtures in oslo's
// envelope, with a message_id of its own numbered n (its event_id is made
// from it).
func novaNotification(t *testing.T, n int) []byte {
	t.Helper()
	fixture := testkit.ReadFile(t, testkit.RepoPath(t, "mappers", "nova", "testdata", "compute.instance.create.end__almanach__1.in.json"))
	var inner map[string]any
	if err := json.Unmarshal(fixture, &inner); err != nil {
		t.Fatal(err)
	}
	inner["message_id"] = fmt.Sprintf("5c1a0a6e-0000-4000-8000-%012d", n)
	innerJSON, err := json.Marshal(inner)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(innerJSON)})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestRunInProcessDeliversAndStopsCleanly: the daemon started by a test in
// its own process consumes from RabbitMQ, maps with the built-in modules and
// delivers to the reference Reporting API; the first signal stops it with
// no error, everything flushed, the listener closed and the outbox released.
func TestRunInProcessDeliversAndStopsCleanly(t *testing.T) {
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, "nova")
	api, srv := referenceAPI(t)

	cfg := daemonSettings(t, v, srv.URL)
	d := runInProcess(t, cfg)
	d.waitReady(t)

	v.Publish(t, "nova", "notifications.info", novaNotification(t, 1))
	testkit.WaitFor(t, 60*time.Second, "the event at the Reporting API", func() bool {
		st, err := api.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Rejected > 0 {
			t.Fatalf("the Reporting API rejected the event: %+v", st)
		}
		return st.Accepted == 1
	})

	d.signals <- syscall.SIGTERM
	if err := d.returned(t, 2*cfg.StopTimeout); err != nil {
		t.Fatalf("Run after a signal: %v\n%s", err, d.log)
	}
	checkCleanStop(t, d, v)
	if !strings.Contains(d.log.String(), `"message":"stopped"`) {
		t.Errorf("the log lacks the stop:\n%s", d.log)
	}
}

// checkCleanStop checks what a clean stop leaves: the log says the inputs
// stopped, the outbox flushed and closed; nothing is left in the outbox, and
// no delivery is left unacknowledged on the queue.
func checkCleanStop(t *testing.T, d *inProcess, v *testkit.Vhost) {
	t.Helper()
	log := d.log.String()
	testkit.WantAll(t, "the log", log, `"message":"inputs stopped; every delivery taken was committed and acknowledged"`, `"message":"flushed"`, `"message":"outbox closed"`)
	if depth := checkReleased(t, d.cfg); depth != 0 {
		t.Errorf("%d events left in the outbox after a clean stop", depth)
	}
	if ready, ok := v.QueueState(t, d.cfg.Queue); !ok || ready != 0 {
		t.Errorf("queue %s: %d ready (exists %v), want every delivery acknowledged", d.cfg.Queue, ready, ok)
	}
}

// TestRunReleasesWhatStartedWhenAPartFails: a part that fails to start (the
// local channel, whose socket's directory is a file, started after
// the outbox, the mappers, the HTTP listener and the background work) ends
// Run with an error naming it, through the same stop as a signal: the
// listener is closed and the outbox released.
func TestRunReleasesWhatStartedWhenAPartFails(t *testing.T) {
	v := testkit.NewVhost(t)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := daemonSettings(t, v, "http://127.0.0.1:9", "TALLY_OSC_CHANNEL_SOCKET="+filepath.Join(notDir, "channel.sock"))
	d := runInProcess(t, cfg)
	err := d.returned(t, startLimit+2*cfg.StopTimeout)
	if err == nil || !strings.HasPrefix(err.Error(), "channel: ") {
		t.Fatalf("Run with a channel socket it cannot bind: %v, want a channel error\n%s", err, d.log)
	}
	if !strings.Contains(d.log.String(), `"message":"outbox closed"`) {
		t.Errorf("the outbox was not closed:\n%s", d.log)
	}
	checkReleased(t, cfg)
}

// TestRunReleasesTheOutboxWhenHTTPCannotListen: an HTTP_ADDR in use, the
// last failure of the start, after every part was built, releases the
// outbox too.
func TestRunReleasesTheOutboxWhenHTTPCannotListen(t *testing.T) {
	v := testkit.NewVhost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := daemonSettings(t, v, "http://127.0.0.1:9", "TALLY_OSC_HTTP_ADDR="+ln.Addr().String())
	d := runInProcess(t, cfg)
	err = d.returned(t, startLimit+2*cfg.StopTimeout)
	if err == nil || !strings.Contains(err.Error(), "listen on "+cfg.HTTPAddr) {
		t.Fatalf("Run with HTTP_ADDR in use: %v, want a listen error\n%s", err, d.log)
	}
	ob, err := outbox.Open(outbox.Options{Dir: cfg.BufferPath, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("the outbox is still held after Run returned: %v", err)
	}
	_ = ob.Close()
}

// TestRunBoundsHTTPConnections: the daemon's HTTP listener holds
// HTTP_MAX_CONNECTIONS at most: three times as many slow connections (request
// heads never finished) leave no more open, displaced oldest first, and
// /livez answers through the flood.
func TestRunBoundsHTTPConnections(t *testing.T) {
	const maxConns = 16
	v := testkit.NewVhost(t)
	cfg := daemonSettings(t, v, "http://127.0.0.1:9", "TALLY_OSC_HTTP_MAX_CONNECTIONS="+strconv.Itoa(maxConns))
	d := runInProcess(t, cfg)
	d.waitFor(t, startLimit, "/livez to answer", func() bool {
		code, _, err := d.get("/livez")
		return err == nil && code == http.StatusOK
	})

	for range 3 * maxConns {
		slowConn(t, cfg.HTTPAddr)
	}
	testkit.WaitUntil(t, time.Minute, "the flood displaced", func() (bool, string) {
		code, body, err := d.get("/metrics")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("/metrics: %d %v", code, err)
		}
		open := metricValue(t, body, "tally_collector_http_connections")
		if open > maxConns {
			t.Fatalf("%v connections open, over the bound %d", open, maxConns)
		}
		evicted := metricValue(t, body, `tally_collector_http_refused_total{reason="evicted"}`)
		return evicted >= 2*maxConns, fmt.Sprintf("open %v, evicted %v", open, evicted)
	})
	if code, body, err := d.get("/livez"); err != nil || code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/livez during the flood: %d %q %v", code, body, err)
	}

	d.signals <- syscall.SIGTERM
	if err := d.returned(t, 2*cfg.StopTimeout); err != nil {
		t.Fatalf("Run after a signal: %v\n%s", err, d.log)
	}
}
