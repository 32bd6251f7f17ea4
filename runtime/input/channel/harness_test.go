package channel

// The test harness: a Server over the real pipeline (the built-in channel
// module compiled in wazero), a real Badger outbox, a real Unix socket, and
// clients, in this process or in child processes run as other users.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("CHANNEL_TEST_HELPER"); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// builtinModule is the built-in channel module loaded the way one daemon
// setting loads it, compiled once per test binary.
type builtinModule struct {
	metered bool          // MAPPER_METERED
	guard   runtime.Guard // how the daemon guards a module of that setting

	once sync.Once
	eng  *runtime.Engine
	mod  *runtime.Module
	err  error
}

func (b *builtinModule) load(tb testing.TB) pipeline.Mapper {
	tb.Helper()
	b.once.Do(func() {
		wasm := testkit.BuiltModule(tb, "mappers/dist/channel.wasm")
		ctx := context.Background()
		b.eng, b.err = runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(tb), Metered: b.metered, Logger: zerolog.Nop()})
		if b.err != nil {
			return
		}
		b.mod, b.err = b.eng.Load(ctx, "builtin:channel.wasm", wasm, runtime.WithGuard(b.guard))
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.mod
}

var (
	// As the daemon loads a built-in module unmetered
	// (MAPPER_METERED=false): watched.
	watchedModule = &builtinModule{guard: runtime.GuardWatched}
	// As the daemon loads it by default (MAPPER_METERED): metered and
	// unguarded.
	meteredModule = &builtinModule{metered: true, guard: runtime.GuardNever}
)

// channelModule is the built-in channel module loaded unmetered.
func channelModule(tb testing.TB) pipeline.Mapper {
	tb.Helper()
	return watchedModule.load(tb)
}

// meteredChannelModule is the built-in channel module as the daemon loads
// it by default.
func meteredChannelModule(tb testing.TB) pipeline.Mapper {
	tb.Helper()
	return meteredModule.load(tb)
}

// useMapper makes the harness's pipeline map with m (before start).
func (h *harness) useMapper(m pipeline.Mapper) {
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{m}, Logger: zerolog.Nop()})
	if err != nil {
		h.t.Fatal(err)
	}
	h.proc.p = p
}

// gate wraps the pipeline and can hold every call.
type gate struct {
	p    *pipeline.Pipeline
	mu   sync.RWMutex
	held atomic.Bool
}

func (g *gate) Process(ctx context.Context, m pipeline.Message) pipeline.Result {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.p.Process(ctx, m)
}

func (g *gate) hold()    { g.mu.Lock(); g.held.Store(true) }
func (g *gate) release() { g.held.Store(false); g.mu.Unlock() }

// harness is a server and what it commits to.
type harness struct {
	t      testing.TB
	dir    string // world-readable: clients of other users reach the socket
	sock   string
	boxDir string
	box    *outbox.Outbox
	proc   *gate
	reg    *prometheus.Registry
	opts   Options
	// wrap, when set, stands between the server and the outbox.
	wrap    func(input.Outbox) input.Outbox
	srv     *Server
	stopRun func()
}

// publicDir is a directory every user may enter.
func publicDir(tb testing.TB) string {
	tb.Helper()
	return testkit.PublicTempDir(tb, "tally-channel-test-")
}

// startHarness is newHarness with its server started.
func startHarness(tb testing.TB, opts Options) *harness {
	tb.Helper()
	h := newHarness(tb, opts)
	h.start()
	return h
}

// newHarness opens an outbox and a pipeline; start runs a server.
func newHarness(tb testing.TB, opts Options) *harness {
	tb.Helper()
	h := &harness{t: tb, dir: publicDir(tb), opts: opts}
	h.sock = filepath.Join(h.dir, "channel.sock")
	h.boxDir = filepath.Join(h.dir, "outbox")
	if base := os.Getenv("TALLY_OSC_BENCH_DIR"); base != "" { // benchmarks: an outbox on tmpfs
		if _, ok := tb.(*testing.B); ok {
			d, err := os.MkdirTemp(base, "channel-bench-")
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { os.RemoveAll(d) }) // after the outbox is closed below
			h.boxDir = d
		}
	}
	h.openBox()
	// The built-in channel module as the daemon loads it by default.
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{meteredChannelModule(tb)}, Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	h.proc = &gate{p: p}
	tb.Cleanup(func() {
		h.stop()
		if h.box != nil {
			h.box.Close()
		}
	})
	return h
}

func (h *harness) openBox() {
	box, err := outbox.Open(outbox.Options{Dir: h.boxDir, MinFreeBytes: -1, Logger: zerolog.Nop()})
	if err != nil {
		h.t.Fatal(err)
	}
	h.box = box
}

func (h *harness) start() {
	h.t.Helper()
	o := h.opts
	o.Socket = h.sock
	if o.SocketMode == 0 {
		o.SocketMode = 0o666
	}
	o.Processor, o.Outbox = h.proc, h.box
	if h.wrap != nil {
		o.Outbox = h.wrap(h.box)
	}
	h.reg = prometheus.NewRegistry()
	o.Registerer = h.reg
	if o.Hub.Redact == nil {
		o.Hub.Redact = broker.DumpLine
	}
	o.Logger = zerolog.Nop()
	if testing.Verbose() {
		o.Logger = zerolog.New(zerolog.NewTestWriter(h.t.(*testing.T))).Level(zerolog.DebugLevel)
	}
	srv, err := New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv, h.stopRun = srv, testkit.Background(h.t, 20*time.Second, srv.Run)
}

// stop ends the server as a daemon's graceful stop does.
func (h *harness) stop() {
	if h.srv == nil {
		return
	}
	h.stopRun()
	h.srv = nil
}

// restartBox closes and reopens the outbox, as a daemon restart does.
func (h *harness) restartBox() {
	h.box.Close()
	h.openBox()
}

// events reads every event in the outbox.
func (h *harness) events() []map[string]any {
	h.t.Helper()
	_, _, evs, err := h.box.Peek(context.Background(), 1<<30)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]map[string]any, len(evs))
	for i, ev := range evs {
		if err := json.Unmarshal(ev, &out[i]); err != nil {
			h.t.Fatalf("event %d: %v", i, err)
		}
	}
	return out
}

func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "tally_collector_channel_"+name {
			continue
		}
	metric:
		for _, m := range mf.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			}
		}
	}
	return total
}

func (h *harness) client(opts client.Options) *client.Client {
	h.t.Helper()
	opts.Socket = h.sock
	if opts.ReconnectInterval == 0 {
		opts.ReconnectInterval = 50 * time.Millisecond
	}
	c, err := client.New(opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close(context.Background(), true) })
	return c
}

// testCtx is the context of a test's calls: done a minute after it was made,
// or when the test ends.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// subscribe subscribes c to the event types regex matches (raw: the
// messages as published) and waits until the daemon took the subscription.
func subscribe(t testing.TB, ctx context.Context, c *client.Client, regex string, raw bool, fn func(client.Delivery)) *client.Subscription {
	t.Helper()
	s, err := c.Subscribe(regex, raw, fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// usage is a usage message of the generic shape with its own id.
func usage(id string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"time":"2026-01-05T10:00:00Z","type":"license.checkout","resource_type":"license",`+
		`"resource_id":"matlab","project_id":"p1","attributes":{"seats":1}}`, id))
}

// --- users ------------------------------------------------------------------

// testUser creates a system user of the tests (once; an existing one is
// used as it is) and returns its credentials.
func testUser(tb testing.TB, name string) client.Cred {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("the channel's credential tests run as root: they create users and run clients as them")
	}
	uid, gid := testkit.SystemUser(tb, name)
	return client.Cred{UID: uid, GID: gid}
}

var (
	helperBinOnce sync.Once
	helperBinPath string
	helperBinErr  error
)

// helperBin is a copy of the test binary every user may run.
func helperBin(tb testing.TB) string {
	tb.Helper()
	helperBinOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			helperBinErr = err
			return
		}
		dir, err := os.MkdirTemp("", "tally-channel-helper-")
		if err != nil {
			helperBinErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		in, err := os.Open(self)
		if err != nil {
			helperBinErr = err
			return
		}
		defer in.Close()
		helperBinPath = filepath.Join(dir, "channel-helper")
		out, err := os.OpenFile(helperBinPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			helperBinErr = err
			return
		}
		if _, err := io.Copy(out, in); err != nil {
			helperBinErr = err
		}
		out.Close()
	})
	if helperBinErr != nil {
		tb.Fatal(helperBinErr)
	}
	return helperBinPath
}

// helperProc is a client run as another user in a child process; it writes
// one JSON line per event on its standard output.
type helperProc struct {
	cmd   *exec.Cmd
	lines chan map[string]any
	done  chan error
}

// runAs starts the test binary in helper mode as cred, through setpriv.
func runAs(tb testing.TB, cred client.Cred, mode string, env ...string) *helperProc {
	tb.Helper()
	setpriv := testkit.LookPath(tb, "setpriv", "util-linux")
	args := []string{fmt.Sprintf("--reuid=%d", cred.UID), fmt.Sprintf("--regid=%d", cred.GID), "--clear-groups", helperBin(tb)}
	cmd := exec.Command(setpriv, args...)
	cmd.Env = append([]string{"CHANNEL_TEST_HELPER=" + mode, "PATH=/usr/bin:/bin"}, env...)
	return startHelper(tb, cmd, mode)
}

// startHelper starts cmd and reads its JSON lines.
func startHelper(tb testing.TB, cmd *exec.Cmd, prefix string) *helperProc {
	tb.Helper()
	cmd.Stderr = &testLogWriter{tb: tb, prefix: prefix}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start helper: %v", err)
	}
	p := &helperProc{cmd: cmd, lines: make(chan map[string]any, 1<<16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.lines <- m
			}
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	return p
}

// next waits for the helper's next line of the given kind.
func (p *helperProc) next(tb testing.TB, kind string) map[string]any {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				tb.Fatalf("helper ended before a %q line", kind)
			}
			if m["kind"] == kind {
				return m
			}
		case <-timeout:
			tb.Fatalf("no %q line from the helper within 30s", kind)
		}
	}
}

type testLogWriter struct {
	tb     testing.TB
	prefix string
}

func (w *testLogWriter) Write(b []byte) (int, error) {
	w.tb.Logf("%s: %s", w.prefix, strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// helperMain is the child process: a client of the socket in CHANNEL_SOCKET.
//
//	publish  publishes CHANNEL_COUNT messages tagged CHANNEL_TAG with
//	         permission CHANNEL_PERM (octal), as CHANNEL_AS_UID/GID when set,
//	         and prints one line per settlement ({"kind":"settled",...})
//	tap      subscribes to CHANNEL_REGEX (CHANNEL_RAW=1: raw), prints
//	         {"kind":"subscribed"} once the daemon took it, then one line per
//	         delivery ({"kind":"delivery",...}), until killed
func helperMain(mode string) int {
	sock := os.Getenv("CHANNEL_SOCKET")
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	emit := func(v map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		_ = out.Encode(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	switch mode {
	case "publish":
		c, err := client.New(client.Options{Socket: sock, Mode: client.ModePublish, ReconnectInterval: 50 * time.Millisecond,
			OnSettled: func(s client.Settlement) {
				emit(map[string]any{"kind": "settled", "seq": s.Seq, "status": s.Status.String(), "reason": s.Reason})
			}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		n, _ := strconv.Atoi(os.Getenv("CHANNEL_COUNT"))
		perm, _ := strconv.ParseUint(os.Getenv("CHANNEL_PERM"), 8, 32)
		var cred *client.Cred
		if u := os.Getenv("CHANNEL_AS_UID"); u != "" {
			uid, _ := strconv.ParseUint(u, 10, 32)
			gid, _ := strconv.ParseUint(os.Getenv("CHANNEL_AS_GID"), 10, 32)
			cred = &client.Cred{UID: uint32(uid), GID: uint32(gid)}
		}
		for i := range n {
			id := fmt.Sprintf("%s-%d-%d", os.Getenv("CHANNEL_ID_PREFIX"), os.Getuid(), i)
			if _, err := c.PublishWait(ctx, client.Message{Tag: os.Getenv("CHANNEL_TAG"), Type: client.JSON,
				Data: usage(id), Perm: uint32(perm), Cred: cred}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
		}
		// Flush waits for OnSettled too: every settled line precedes done.
		if err := errors.Join(c.Flush(ctx), c.Close(ctx, false)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		emit(map[string]any{"kind": "done"})
		return 0
	case "tap":
		c, err := client.New(client.Options{Socket: sock, Mode: client.ModeSubscribe, ReconnectInterval: 50 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		sub, err := c.Subscribe(os.Getenv("CHANNEL_REGEX"), os.Getenv("CHANNEL_RAW") == "1", func(d client.Delivery) {
			var data any
			_ = json.Unmarshal(d.Data, &data)
			emit(map[string]any{"kind": "delivery", "tag": d.Tag, "raw": d.Raw, "origin": d.Origin,
				"uid": d.UID, "gid": d.GID, "perm": d.Perm, "data": data, "dropped": d.Dropped})
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := sub.Wait(ctx); err != nil {
			emit(map[string]any{"kind": "refused", "error": err.Error()})
			return 1
		}
		emit(map[string]any{"kind": "subscribed"})
		<-ctx.Done()
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}
