package e2e

// The end-to-end harness: the built binary as a child process, the reference
// Reporting API as a child process, a RabbitMQ virtual host of the test's own
// on the real broker, and the real oslo.messaging Notifier.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

const brokerAddr = testkit.BrokerAddr

// vhost is a test's RabbitMQ virtual host (testkit.NewVhost): nothing
// another test (or package) publishes reaches it, and closing its
// connections touches no one else's. While a test has one it holds the
// broker lock shared, so no test restarts the broker under it.
type vhost = testkit.Vhost

func TestMain(m *testing.M) {
	if os.Getenv(bareConsumerEnv) != "" {
		// This binary started again as BenchmarkEndToEnd's bare consumer.
		os.Exit(bareConsumerMain())
	}
	os.Exit(testkit.Main(m))
}

// binaries are built once per test binary.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

type bins struct{ collector, api string }

func buildBinaries(tb testing.TB) bins {
	tb.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tally-e2e-bin-")
		if buildErr != nil {
			return
		}
		goBin := testkit.GoBin(tb)
		for _, b := range []struct{ out, pkg string }{
			{"tally-openstack-collector", ".."},
			{"reporting-api", "../../../examples/reporting-api"},
		} {
			cmd := exec.Command(goBin, "build", "-o", filepath.Join(buildDir, b.out), b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return bins{collector: filepath.Join(buildDir, "tally-openstack-collector"), api: filepath.Join(buildDir, "reporting-api")}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stack skips in -short mode, else starts what the daemon's end-to-end tests
// share: the built binaries, a virtual host of the test's own with the
// service exchanges declared as a cloud's broker has them, and the reference
// Reporting API.
func stack(t *testing.T, exchanges ...string) (bins, *vhost, *api) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	testkit.RequireBroker(t)
	b := buildBinaries(t)
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, exchanges...)
	return b, v, startAPI(t, b)
}

// novaCollector is a collector, not yet started, consuming the nova exchange
// of a stack of its own with the settings extra; with the stack's virtual
// host and Reporting API.
func novaCollector(t *testing.T, extra ...string) (*collector, *vhost, *api) {
	t.Helper()
	b, v, a := stack(t, "nova")
	return newCollector(t, b, v, a.url(), a.token, append([]string{"TALLY_OSC_EXCHANGES=nova"}, extra...)...), v, a
}

// queueDepth answers the ready and unacknowledged messages of a queue, -1
// and -1 when there is no such queue.
func queueDepth(tb testing.TB, v *vhost, queue string) (ready, unacked int) {
	tb.Helper()
	c, ok := v.QueueCounts(tb, queue)
	if !ok {
		return -1, -1
	}
	return c.Ready, c.Unacked
}

// notification is one oslo message the tests publish, with the event_id the
// collector must deliver for it.
type notification struct {
	Service     string          `json:"service"`
	Exchange    string          `json:"exchange"`
	PublisherID string          `json:"publisher_id"`
	EventType   string          `json:"event_type"`
	Payload     json.RawMessage `json:"payload"`
	Context     json.RawMessage `json:"context,omitempty"`
}

// corpus is the mix the tests publish: real notifications of the five
// services, each of a type a built-in mapper claims and maps to one event.
type corpus struct {
	items []notification
}

func loadCorpus(tb testing.TB) *corpus {
	tb.Helper()
	b := testkit.ReadFile(tb, "testdata/corpus.json")
	var c corpus
	if err := json.Unmarshal(b, &c.items); err != nil {
		tb.Fatalf("corpus: %v", err)
	}
	if len(c.items) == 0 {
		tb.Fatal("empty corpus")
	}
	return &c
}

func (c *corpus) exchanges() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range c.items {
		if !seen[n.Exchange] {
			seen[n.Exchange] = true
			out = append(out, n.Exchange)
		}
	}
	return out
}

// messageID is the oslo message_id of the i-th notification of a run; the
// Python publisher computes the same ids.
func messageID(prefix string, i int) string {
	return fmt.Sprintf("%s-0000-4000-8000-%012x", prefix, i)
}

// secretFor is the token every published context carries; it must never
// reach the Reporting API.
func secretFor(prefix string) string { return "e2e-secret-" + prefix }

const osloTimestampLayout = "2006-01-02 15:04:05.000000"

// publishRaw publishes notifications [from, to) of c round-robin as oslo's
// messagingv2 driver writes them: the envelope with the inner message as a
// string, routing key notifications.info, JSON content type. The timestamp of
// notification i is fixed, so a slice published again (after the broker
// closed the publisher's connection) is a duplicate the API recognises.
func publishRaw(tb testing.TB, v *vhost, c *corpus, prefix string, from, to int) {
	tb.Helper()
	if err := publishRawRetry(v.URL(), c, prefix, from, to); err != nil {
		tb.Fatal(err)
	}
}

// publishRawRetry publishes [from, to) to the AMQP URL url (a virtual host's
// exchanges), starting over on a lost connection
// (closed connections, a broker restarted by another package's test) for up
// to two minutes. It does not use the testing.TB, so it may run off the test
// goroutine.
func publishRawRetry(url string, c *corpus, prefix string, from, to int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := publishRawErr(url, c, prefix, from, to)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dialChannel opens a connection to the AMQP URL url, under the name the
// broker lists it by, and a channel on it; the caller closes the
// connection. It does not use a testing.TB, so it may run off the test
// goroutine or in a child process.
func dialChannel(url, name string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": name}})
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("channel: %w", err)
	}
	return conn, ch, nil
}

var publishEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func publishRawErr(url string, c *corpus, prefix string, from, to int) error {
	conn, ch, err := dialChannel(url, "tally-e2e-publisher")
	if err != nil {
		return err
	}
	defer conn.Close()
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx := context.Background()
	var pending []*amqp.DeferredConfirmation
	flush := func() error {
		for _, d := range pending {
			if ok, err := d.WaitContext(ctx); err != nil || !ok {
				return fmt.Errorf("publish not confirmed: %w", err)
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := from; i < to; i++ {
		n := c.items[i%len(c.items)]
		inner := map[string]any{
			"message_id":   messageID(prefix, i),
			"publisher_id": n.PublisherID,
			"event_type":   n.EventType,
			"priority":     "INFO",
			"payload":      n.Payload,
			"timestamp":    publishEpoch.Add(time.Duration(i) * time.Millisecond).Format(osloTimestampLayout),
		}
		if len(n.Context) > 0 {
			var ctxMembers map[string]any
			_ = json.Unmarshal(n.Context, &ctxMembers)
			for k, val := range ctxMembers {
				inner["_context_"+k] = val
			}
		}
		inner["_context_auth_token"] = secretFor(prefix)
		innerJSON, _ := json.Marshal(inner)
		body, _ := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(innerJSON)})
		d, err := ch.PublishWithDeferredConfirmWithContext(ctx, n.Exchange, "notifications.info", false, false, amqp.Publishing{
			ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent, Body: body,
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		pending = append(pending, d)
		if len(pending) >= 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// publishOslo publishes notifications [from, to) through the real
// oslo.messaging Notifier (driver messagingv2), in parallel processes.
func publishOslo(tb testing.TB, v *vhost, c *corpus, prefix string, from, to, procs int) {
	tb.Helper()
	if err := publishOsloURL(v.OsloURL(), prefix, from, to, procs).Err(); err != nil {
		tb.Fatal(err)
	}
}

// osloRun is what a run of oslo publishers reports: the indexes the
// Notifier logged as not sent and dropped (it does not raise; see
// testdata/oslo_publish.py), and the failures of the processes.
type osloRun struct {
	Dropped []int
	Log     string // what the publishers that dropped something wrote on stderr
	Failed  error
}

// Err is the run's failure, a dropped notification included.
func (r osloRun) Err() error {
	if len(r.Dropped) > 0 {
		return errors.Join(r.Failed, fmt.Errorf("the oslo Notifier dropped %d notifications (%v):\n%s", len(r.Dropped), r.Dropped, tail(r.Log, 4000)))
	}
	return r.Failed
}

// publishOsloURL publishes notifications [from, to) of the corpus through the
// real oslo.messaging Notifier on the oslo transport URL url, in procs
// parallel processes; with only, just those indexes of the range. It does
// not use a testing.TB, so it may run off the test goroutine.
func publishOsloURL(url, prefix string, from, to, procs int, only ...int) osloRun {
	corpusPath, _ := filepath.Abs("testdata/corpus.json")
	script, _ := filepath.Abs("testdata/oslo_publish.py")
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		run  osloRun
		errs []error
	)
	per := (to - from + procs - 1) / procs
	for p := 0; p < procs; p++ {
		lo, hi := from+p*per, min(from+(p+1)*per, to)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/usr/bin/python3", script,
				"--url", url,
				"--corpus", corpusPath, "--prefix", prefix,
				"--from", strconv.Itoa(lo), "--to", strconv.Itoa(hi), "--only", joinInts(only))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var report struct {
				Dropped []int `json:"dropped"`
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if err == nil {
				if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &report); jerr != nil {
					err = fmt.Errorf("no report on stdout: %w", jerr)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("oslo publisher [%d,%d): %w\n%s%s", lo, hi, err, stdout.String(), stderr.String()))
				return
			}
			if len(report.Dropped) > 0 {
				run.Dropped = append(run.Dropped, report.Dropped...)
				run.Log += fmt.Sprintf("--- oslo publisher [%d,%d):\n%s", lo, hi, stderr.String())
			}
		}()
	}
	wg.Wait()
	sort.Ints(run.Dropped)
	run.Failed = errors.Join(errs...)
	return run
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// proc is a child process of a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
	done chan struct{}
	err  error
}

func startProc(tb testing.TB, name, bin string, args, env []string) *proc {
	tb.Helper()
	p := &proc{name: name, out: &testkit.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if tb.Failed() {
			tb.Logf("--- output of %s (last 6000 bytes):\n%s", name, tail(p.out.String(), 6000))
		}
	})
	return p
}

// dial connects to a listener of a collector (a plog input); the connection
// is closed when the test ends.
func dial(tb testing.TB, network, addr string) net.Conn {
	tb.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) kill9(tb testing.TB) {
	tb.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits; it returns the exit code and how long it took.
func (p *proc) stop(tb testing.TB, limit time.Duration) (int, time.Duration) {
	tb.Helper()
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		tb.Fatalf("%s did not stop within %s", p.name, limit)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		code = ee.ExitCode()
	}
	return code, time.Since(start)
}

// api is a running reference Reporting API.
type api struct {
	bin, dataDir, addr, token string
	p                         *proc
	// tls: serving https with these files (startTLSAPI); nil: plain http.
	tls *apiTLS
}

func startAPI(tb testing.TB, b bins) *api {
	tb.Helper()
	a := &api{bin: b.api, dataDir: tb.TempDir(), addr: testkit.FreeAddr(tb), token: "e2e-" + randHex(12)}
	a.start(tb)
	return a
}

func (a *api) start(tb testing.TB) {
	tb.Helper()
	args := []string{"--addr", a.addr, "--token", a.token, "--data-dir", a.dataDir}
	if a.tls != nil {
		args = append(args, "--tls-cert", a.tls.cert, "--tls-key", a.tls.key, "--tls-client-ca", a.tls.clientCA)
	}
	a.p = startProc(tb, "reporting-api", a.bin, args, os.Environ())
	testkit.WaitFor(tb, 20*time.Second, "reporting API up", func() bool {
		c, err := net.DialTimeout("tcp", a.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (a *api) url() string {
	if a.tls != nil {
		return "https://" + a.addr
	}
	return "http://" + a.addr
}

// collector is the built binary under test.
type collector struct {
	bin, httpAddr string
	env           []string
	p             *proc
	past          []*proc // the runs before p, oldest first
	runs          int
}

func newCollector(tb testing.TB, b bins, v *vhost, reportingURL, token string, extra ...string) *collector {
	tb.Helper()
	// The local broker is RabbitMQ 3.x: classic.
	return newCollectorAt(tb, b, v.URL(), reportingURL, token, append([]string{"TALLY_OSC_QUEUE_TYPE=classic"}, extra...)...)
}

// newCollectorAt is a collector on transportURL with the default queue type
// (quorum) unless extra says otherwise; extra entries override earlier ones.
func newCollectorAt(tb testing.TB, b bins, transportURL, reportingURL, token string, extra ...string) *collector {
	tb.Helper()
	c := &collector{bin: b.collector, httpAddr: testkit.FreeAddr(tb)}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALLY_OSC_QUEUE_TYPE=") {
			env = append(env, kv)
		}
	}
	c.env = append(env,
		"TALLY_OSC_TRANSPORT_URL="+transportURL,
		"TALLY_OSC_BUFFER_PATH="+filepath.Join(tb.TempDir(), "outbox"),
		"TALLY_OSC_REPORTING_URL="+reportingURL,
		"TALLY_OSC_REPORTING_TOKEN="+token,
		"TALLY_OSC_REPORTING_INSECURE=true",
		"TALLY_OSC_HTTP_ADDR="+c.httpAddr,
		"TALLY_OSC_LOG_FORMAT=json",
		"TALLY_OSC_MAPPER_CACHE_DIR="+testkit.CacheDir(tb),
		// These tests count deliveries, not deadlines: on a machine busy
		// compiling the other packages' tests a call of the default 250 ms
		// can overrun, and its notification is rightly dead-lettered.
		"TALLY_OSC_MAPPER_CALL_TIMEOUT=10s",
	)
	c.env = append(c.env, extra...)
	return c
}

func (c *collector) start(tb testing.TB) {
	tb.Helper()
	if c.p != nil {
		c.past = append(c.past, c.p)
	}
	c.runs++
	c.p = startProc(tb, fmt.Sprintf("collector#%d", c.runs), c.bin, nil, c.env)
}

func (c *collector) get(path string) (int, string, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.httpAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (c *collector) waitReady(tb testing.TB) {
	tb.Helper()
	testkit.WaitFor(tb, 60*time.Second, "collector ready", func() bool {
		if !c.p.running() {
			tb.Fatalf("collector exited: %v\n%s", c.p.err, tail(c.p.out.String(), 4000))
		}
		code, _, err := c.get("/readyz")
		return err == nil && code == 200
	})
}

var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$`)

// metrics scrapes /metrics into name{labels} -> value.
func (c *collector) metrics(tb testing.TB) map[string]float64 {
	tb.Helper()
	code, body, err := c.get("/metrics")
	if err != nil || code != 200 {
		tb.Fatalf("scrape: %d %v", code, err)
	}
	return parseMetrics(body)
}

func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := metricLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		out[m[1]+m[2]] = v
	}
	return out
}

// sum adds every series of a metric whose labels contain all of the given
// label pairs (`reason="unclaimed"`).
func sum(m map[string]float64, name string, labels ...string) float64 {
	var t float64
	for k, v := range m {
		base, lbl, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				ok = false
			}
		}
		if ok {
			t += v
		}
	}
	return t
}

func (a *api) do(tb testing.TB, method, path string, body any, out any) {
	tb.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.url()+path, rd)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	if a.tls != nil {
		client = a.tls.client
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			tb.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

type apiStats struct {
	Accepted   int64            `json:"accepted"`
	Duplicates int64            `json:"duplicates"`
	Rejected   int64            `json:"rejected"`
	Events     int64            `json:"events"`
	Requests   map[string]int64 `json:"requests"`
}

func (a *api) stats(tb testing.TB) apiStats {
	tb.Helper()
	var s apiStats
	a.do(tb, "GET", "/api/v1/stats", nil, &s)
	return s
}

// storedEvent is what the tests read back of a stored event.
type storedEvent struct {
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	Service   string `json:"service"`
	Source    struct {
		Exchange   string `json:"exchange"`
		RoutingKey string `json:"routing_key"`
		Mapper     string `json:"mapper"`
	} `json:"source"`
}

// checkStoredOnce fails the test for each id of want that the API does not
// hold exactly once. It answers how many times the API holds each event id,
// and the API's events as it wrote them.
func checkStoredOnce(t *testing.T, a *api, want map[string]bool) (seen map[string]int, raw []byte) {
	t.Helper()
	events, raw := a.events(t)
	seen = make(map[string]int, len(events))
	for _, ev := range events {
		seen[ev.EventID]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s stored %d times, want once", id, seen[id])
		}
	}
	return seen, raw
}

// events lists every stored event, and the raw listing for content checks.
func (a *api) events(tb testing.TB) ([]storedEvent, []byte) {
	tb.Helper()
	var all []storedEvent
	var raw bytes.Buffer
	after := uint64(0)
	for {
		var page struct {
			Events []json.RawMessage `json:"events"`
			Next   uint64            `json:"next"`
			More   bool              `json:"more"`
		}
		a.do(tb, "GET", fmt.Sprintf("/api/v1/events?after=%d&limit=10000", after), nil, &page)
		for _, e := range page.Events {
			var se storedEvent
			if err := json.Unmarshal(e, &se); err != nil {
				tb.Fatal(err)
			}
			all = append(all, se)
			raw.Write(e)
			raw.WriteByte('\n')
		}
		if !page.More {
			return all, raw.Bytes()
		}
		after = page.Next
	}
}

// fail makes POST /api/v1/events answer status until clearFail.
func (a *api) fail(tb testing.TB, status int) {
	tb.Helper()
	a.do(tb, "POST", "/admin/fail", map[string]any{"status": status}, nil)
}

func (a *api) clearFail(tb testing.TB) {
	tb.Helper()
	a.do(tb, "DELETE", "/admin/fail", nil, nil)
}
