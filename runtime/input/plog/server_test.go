package plog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// canonical is a canonical event as a plog client sends it.
func canonical(id string) []byte {
	return []byte(fmt.Sprintf(`{"event_type":"compute.instance.exists","timestamp":"2024-05-01T12:00:00Z",`+
		`"service":"nova","resource_type":"instance","resource_id":%q,"project_id":"p1","action":"exists","attributes":{}}`, id))
}

// harness runs a Server over the real pipeline and a real Badger outbox.
type harness struct {
	t    testing.TB
	srv  *Server
	box  *outbox.Outbox
	reg  *prometheus.Registry
	proc *gate
	stop func() // ends Run as a daemon's graceful stop does
}

// gate wraps the real pipeline and can hold every call, to build up pressure.
type gate struct {
	p    *pipeline.Pipeline
	mu   sync.RWMutex
	held atomic.Bool
	// panicOn, when set, makes Process panic on that body: an unexpected
	// error while handling a message.
	panicOn atomic.Pointer[string]
}

func (g *gate) Process(ctx context.Context, m pipeline.Message) pipeline.Result {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if p := g.panicOn.Load(); p != nil && *p == string(m.Body) {
		panic("a message that breaks its handler")
	}
	return g.p.Process(ctx, m)
}

func (g *gate) hold()    { g.mu.Lock(); g.held.Store(true) }
func (g *gate) release() { g.held.Store(false); g.mu.Unlock() }

func newHarness(t testing.TB, maxEvents int64, opts Options, wrap ...func(input.Outbox) input.Outbox) *harness {
	t.Helper()
	return newLoggedHarness(t, maxEvents, opts, zerolog.Nop(), wrap...)
}

// newLoggedHarness is newHarness with the server logging to log. The logger
// is given before the server starts: its listeners' goroutines read it.
func newLoggedHarness(t testing.TB, maxEvents int64, opts Options, log zerolog.Logger, wrap ...func(input.Outbox) input.Outbox) *harness {
	t.Helper()
	dir := t.TempDir()
	if base := os.Getenv("TALLY_OSC_BENCH_DIR"); base != "" { // benchmarks: an outbox on tmpfs
		if _, ok := t.(*testing.B); ok {
			d, err := os.MkdirTemp(base, "plog-bench-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			dir = d
		}
	}
	box, err := outbox.Open(outbox.Options{Dir: dir, MaxEvents: maxEvents, MinFreeBytes: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	reg := prometheus.NewRegistry()
	p, err := pipeline.New(pipeline.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{p: p}
	opts.Processor, opts.Outbox, opts.Registerer, opts.Logger = g, box, reg, log
	for _, w := range wrap {
		opts.Outbox = w(opts.Outbox)
	}
	opts.Version = "test"
	for i := range opts.Listeners {
		if opts.Listeners[i].Address == "" {
			opts.Listeners[i].Address = ":0"
		}
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, srv: srv, box: box, reg: reg, proc: g}
	h.stop = testkit.Background(t, 10*time.Second, srv.Run)
	return h
}

func (h *harness) addr(i int) string { return h.srv.Listeners()[i].Addr.String() }

// rawConn is a socket of its own to listener i, as a client in another
// language would open it; it is closed when the test ends.
func (h *harness) rawConn(i int) net.Conn {
	h.t.Helper()
	c, err := net.Dial(h.srv.Listeners()[i].Network, h.addr(i))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) dial(i int) *Client {
	h.t.Helper()
	c, err := Dial(h.srv.Listeners()[i].Network, h.addr(i))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// events waits until the outbox holds n events and returns them.
func (h *harness) events(n int) []map[string]any {
	h.t.Helper()
	testkit.WaitFor(h.t, 10*time.Second, fmt.Sprintf("%d events in the outbox", n), func() bool { return h.box.Depth() >= int64(n) })
	_, _, evs, err := h.box.Peek(context.Background(), n+10)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(evs) != n {
		h.t.Fatalf("outbox holds %d events, want %d", len(evs), n)
	}
	out := make([]map[string]any, len(evs))
	for i, ev := range evs {
		if err := json.Unmarshal(ev, &out[i]); err != nil {
			h.t.Fatalf("event %d: %v", i, err)
		}
	}
	return out
}

// resourceIDs waits until the outbox holds n events and returns the distinct
// resource_ids among them.
func (h *harness) resourceIDs(n int) map[any]bool {
	h.t.Helper()
	seen := map[any]bool{}
	for _, ev := range h.events(n) {
		seen[ev["resource_id"]] = true
	}
	return seen
}

// deadLetter waits for a dead letter in the outbox and returns it; a second
// one fails the test.
func (h *harness) deadLetter() outbox.StoredDeadLetter {
	h.t.Helper()
	testkit.WaitFor(h.t, 10*time.Second, "a dead letter", func() bool { return h.box.DeadLetterCount() >= 1 })
	letters, err := h.box.ListDeadLetters(context.Background(), 0, 10)
	if err != nil || len(letters) != 1 {
		h.t.Fatalf("dead letters %d: %v", len(letters), err)
	}
	return letters[0]
}

// waitStat polls listener i's counters until cond holds.
func (h *harness) waitStat(i int, what string, cond func(Snapshot) bool) Snapshot {
	h.t.Helper()
	var s Snapshot
	testkit.WaitUntil(h.t, 10*time.Second, what, func() (bool, string) {
		s = h.srv.Stats(i)
		if cond(s) {
			return true, ""
		}
		b, _ := json.Marshal(s)
		return false, string(b)
	})
	return s
}

func udpOnly() Options { return Options{Listeners: []Listener{{Network: UDP}}} }

func TestUDPUnboxedCommitted(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	c := h.dial(0)
	for i := 0; i < 2; i++ { // the same message twice: the same event_id
		if err := c.SendUnboxed(canonical("vm-1")); err != nil {
			t.Fatal(err)
		}
	}
	evs := h.events(2)
	src := evs[0]["source"].(map[string]any)
	if src["exchange"] != "plog" || src["routing_key"] != "udp://"+h.addr(0) {
		t.Fatalf("source %v", src)
	}
	id, _ := evs[0]["event_id"].(string)
	if id == "" || evs[1]["event_id"] != id {
		t.Fatalf("derived ids %v %v", evs[0]["event_id"], evs[1]["event_id"])
	}
	s := h.waitStat(0, "counters", func(s Snapshot) bool { return s.EventsCommitted == 2 })
	if s.UDPSimpleMessages != 2 || s.Mapped != 2 {
		t.Fatalf("simple %d mapped %d", s.UDPSimpleMessages, s.Mapped)
	}
	if strings.HasPrefix(h.addr(0), "127.0.0.1:") == false {
		t.Fatalf("default bind %s", h.addr(0))
	}
}

func TestUDPFragmentedInAndOutOfOrder(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	c := h.dial(0)
	c.FragmentSize = 50
	msg := canonical(strings.Repeat("r", 200)) // several fragments
	if err := c.Send(msg); err != nil {
		t.Fatal(err)
	}
	// Out of order, with duplicates, from a raw socket.
	conn := h.rawConn(0)
	frags, _ := Fragments(77, canonical("vm-2"), nil, 40)
	if len(frags) < 4 {
		t.Fatalf("%d fragments", len(frags))
	}
	order := []int{3, 0, 0, 2}
	for i := len(frags) - 1; i >= 0; i-- {
		order = append(order, i)
	}
	for _, i := range order {
		conn.Write(frags[i])
	}
	evs := h.events(2)
	got := map[any]bool{evs[0]["resource_id"]: true, evs[1]["resource_id"]: true}
	if !got["vm-2"] || !got[strings.Repeat("r", 200)] {
		t.Fatalf("resources %v", got)
	}
	s := h.waitStat(0, "duplicates", func(s Snapshot) bool { return s.V0DuplicateFrags == uint64(len(order)-len(frags)) })
	if s.Cache.Misses != 2 || s.EventsCommitted != 2 {
		t.Fatalf("misses %d committed %d", s.Cache.Misses, s.EventsCommitted)
	}
}

func TestUDPLostFragmentEvicted(t *testing.T) {
	o := udpOnly()
	o.Listeners[0].Settings.DefragMaxAge = 50 * time.Millisecond
	h := newHarness(t, 0, o)
	conn := h.rawConn(0)
	frags, _ := Fragments(5, canonical("lost"), nil, 30)
	for _, f := range frags[1:] { // the first fragment is lost
		conn.Write(f)
	}
	s := h.waitStat(0, "eviction", func(s Snapshot) bool { return s.Cache.Evictions == 1 })
	if s.DroppedFragments[sizeBucket(len(canonical("lost")))][0] != 1 || s.DefragMessages != 0 || s.DefragBytes != 0 {
		t.Fatalf("dropped %v, defrag %d msgs %d bytes", s.DroppedFragments, s.DefragMessages, s.DefragBytes)
	}
	if h.box.Depth() != 0 {
		t.Fatal("an incomplete message reached the outbox")
	}
}

func TestUDPInvalidDatagramsCounted(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	conn := h.rawConn(0)
	bad, _ := Fragments(9, []byte("payload"), nil, 100)
	bad[0][16] ^= 0xff // checksum
	absurd := (raw{typ: 1, count: 65535, index: 0, fragSize: 65535, length: 2147483646, payload: []byte("x")}).bytes()
	tooBig := (raw{typ: 1, count: 40, index: 0, fragSize: 60000, length: 40 * 59000, payload: bytes.Repeat([]byte("x"), 60000)}).bytes()
	for _, d := range [][]byte{
		{5, 1, 2, 3},          // version 5
		{0},                   // no packet type
		{0, 9, 1},             // packet type 9
		{0, 1, 0, 1},          // short header
		bad[0],                // wrong checksum
		absurd,                // announces 2 GiB
		tooBig,                // over the 1 MiB defragmenter
		{0, 0, 'K', 'L', 'I'}, // unknown command
	} {
		conn.Write(d)
	}
	s := h.waitStat(0, "invalid", func(s Snapshot) bool { return s.UnknownCommand == 1 })
	if s.UDPInvalidVersion != 1 || s.V0InvalidType != 2 || s.V0InvalidMultipartHeader != 3 || s.V0InvalidChecksum[0] != 1 {
		b, _ := json.Marshal(s)
		t.Fatalf("counters %s", b)
	}
	if s.DefragBytes != 0 || s.Exceptions != 0 {
		t.Fatalf("defrag %d exceptions %d", s.DefragBytes, s.Exceptions)
	}
}

// echoMapper stands in for a listener's module: it wraps whatever bytes it gets
// into one canonical event, so the tests can see which module a tag selected.
type echoMapper struct{ name string }

func (m echoMapper) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	ev, _ := json.Marshal(map[string]any{"event_type": "plog.echo", "resource_type": "echo",
		"resource_id": string(in.Bytes()), "attributes": map[string]string{"module": m.name},
		"source": map[string]string{"exchange": src.Exchange, "routing_key": src.RoutingKey}})
	return runtime.Result{Events: [][]byte{ev}}, nil
}
func (m echoMapper) ID() string { return m.name + "@1.0.0" }
func (m echoMapper) Manifest() runtime.Manifest {
	return runtime.Manifest{Name: m.name, Version: "1.0.0"}
}

func TestUDPTagsSelectModule(t *testing.T) {
	o := udpOnly()
	o.Listeners[0].Mappers = []pipeline.Mapper{echoMapper{"first"}, echoMapper{"second"}}
	h := newHarness(t, 0, o)
	c := h.dial(0)
	send := func(body string, tags ...string) {
		t.Helper()
		if err := c.Send([]byte(body), tags...); err != nil {
			t.Fatal(err)
		}
	}
	send("a")                               // no tag: the chain's first module
	send("b", "kt:second", "rk:custom.key") // by name, with a routing key
	send("c", "kt:second@1.0.0")            // by id
	send("d", "kt:null")                    // dropped on purpose
	send("e", "kt:nosuch")                  // unknown module: dropped, counted
	h.waitStat(0, "routes", func(s Snapshot) bool { return s.Mapped == 3 && s.NullRoute == 1 && s.UnknownRoute == 1 })
	evs := h.events(3)
	byBody := map[string]map[string]any{}
	for _, ev := range evs {
		byBody[ev["resource_id"].(string)] = ev
	}
	module := func(b string) any { return byBody[b]["attributes"].(map[string]any)["module"] }
	if module("a") != "first" || module("b") != "second" || module("c") != "second" {
		t.Fatalf("modules a=%v b=%v c=%v", module("a"), module("b"), module("c"))
	}
	if rk := byBody["b"]["source"].(map[string]any)["routing_key"]; rk != "custom.key" {
		t.Fatalf("routing key %v", rk)
	}
}

func TestUDPCommands(t *testing.T) {
	var stopped atomic.Int32
	o := udpOnly()
	o.Listeners = append(o.Listeners, Listener{Network: UDP, Settings: Settings{AllowENVI: ptr(true), AllowKILL: ptr(true)}})
	o.Stop = func() { stopped.Add(1) }
	o.Environ = func() []string { return []string{"OS_PASSWORD=hunter2", "LANG=C"} }
	h := newHarness(t, 0, o)
	ctx := context.Background()
	c := h.dial(0)

	pong, err := c.Command(ctx, "Ping", []byte("For17575\n\n"))
	if err != nil || string(pong) != "PONGFor17575\n\n" {
		t.Fatalf("PING: %q %v", pong, err)
	}
	stat, err := c.Command(ctx, "stat", []byte("istics please, gentle service"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(stat, &m); err != nil {
		t.Fatalf("STAT %q: %v", stat, err)
	}
	for _, k := range []string{"version", "failed_to_send", "exceptions", "udp_simple_messages", "udp_invalid_version",
		"v0_invalid_type", "unknown_command", "v0_commands", "v0_invalid_multipart_header", "v0_fragments",
		"v0_invalid_fragments", "v0_invalid_checksum", "dropped_fragments", "cache", "kafka"} {
		if _, ok := m[k]; !ok {
			t.Errorf("STAT lacks %q", k)
		}
	}
	cache := m["cache"].(map[string]any)
	for _, k := range []string{"evictions", "hits", "misses"} {
		if _, ok := cache[k]; !ok {
			t.Errorf("STAT cache lacks %q", k)
		}
	}
	kafka := m["kafka"].(map[string]any)
	for _, k := range kafkaKeys {
		r, ok := kafka[k].(map[string]any)
		if !ok || r["count"] == nil || len(r["rate"].([]any)) != 3 {
			t.Errorf("STAT kafka %q: %v", k, kafka[k])
		}
	}
	if m["version"] != "test" || m["v0_commands"].(float64) != 2 {
		t.Fatalf("version %v commands %v", m["version"], m["v0_commands"])
	}
	// Refused by default: no answer. The reader handles datagrams in order, so
	// the PONG that follows proves ENVI got none.
	c2 := h.dial(0)
	c2.conn.Write([]byte("\x00\x00ENVI"))
	c2.conn.Write([]byte("\x00\x00KILL"))
	if got, err := c2.Command(ctx, "PING", []byte("x")); err != nil || string(got) != "PONGx" {
		t.Fatalf("after refused commands: %q %v", got, err)
	}
	if s := h.srv.Stats(0); s.V0RefusedCommands < 2 || stopped.Load() != 0 {
		t.Fatalf("refused %d, stopped %d", s.V0RefusedCommands, stopped.Load())
	}
	// Enabled on the second listener: ENVI redacts, KILL calls Stop.
	e := h.dial(1)
	env, err := e.Command(ctx, "envi", nil)
	if err != nil || !bytes.Contains(env, []byte("LANG=C")) || bytes.Contains(env, []byte("hunter2")) {
		t.Fatalf("ENVI: %q %v", env, err)
	}
	e.conn.Write([]byte("\x00\x00kill"))
	testkit.WaitFor(t, 5*time.Second, "KILL to call Stop", func() bool { return stopped.Load() != 0 })
	if stopped.Load() != 1 {
		t.Fatalf("KILL called Stop %d times", stopped.Load())
	}
}

func ptr[T any](v T) *T { return &v }

func TestUDPSocketBufferPressure(t *testing.T) {
	o := udpOnly()
	o.Listeners[0].Settings = Settings{ReadBufferBytes: 4096, QueueBytes: 1, Workers: 1}
	h := newHarness(t, 0, o)
	c := h.dial(0)
	h.proc.hold()
	const sent = 3000
	for i := 0; i < sent; i++ {
		if err := c.SendUnboxed(canonical(fmt.Sprintf("p-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	h.proc.release()
	// Wait for the reader to empty the socket buffer, then send a command: it is
	// the first datagram after the drops, so it carries the kernel's drop count.
	last := uint64(0)
	for {
		time.Sleep(200 * time.Millisecond)
		n := h.srv.Stats(0).UDPSimpleMessages
		if n == last {
			break
		}
		last = n
	}
	if _, err := c.Command(context.Background(), "PING", nil); err != nil {
		t.Fatal(err)
	}
	s := h.srv.Stats(0)
	if s.SocketDrops == 0 {
		t.Fatal("no socket drops counted under pressure")
	}
	if s.UDPSimpleMessages+s.SocketDrops != sent {
		t.Fatalf("received %d + dropped %d != sent %d", s.UDPSimpleMessages, s.SocketDrops, sent)
	}
	h.waitStat(0, "commit", func(s Snapshot) bool { return s.EventsCommitted == s.UDPSimpleMessages })
	if v := testutil.ToFloat64(collectorFor(t, h, "tally_collector_plog_socket_drops_total")); v != float64(s.SocketDrops) {
		t.Fatalf("metric %v, STAT %d", v, s.SocketDrops)
	}
}

// collectorFor gathers one metric of listener 0 from the harness registry.
func collectorFor(t *testing.T, h *harness, name string) prometheus.Collector {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			v := mf.GetMetric()[0].GetCounter().GetValue()
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("metric %s not exported", name)
	return nil
}

func TestUDPOutboxFullDropsAndCounts(t *testing.T) {
	o := udpOnly()
	o.Listeners[0].Settings.BatchMax = 1
	h := newHarness(t, 1, o)
	c := h.dial(0)
	c.SendUnboxed(canonical("one"))
	h.events(1)
	c.SendUnboxed(canonical("two"))
	s := h.waitStat(0, "full", func(s Snapshot) bool { return s.FailedToSend == 1 })
	if s.OutboxFull != 1 || s.EventsCommitted != 1 {
		t.Fatalf("full %d committed %d", s.OutboxFull, s.EventsCommitted)
	}
}

func tcpOnly(s Settings) Options { return Options{Listeners: []Listener{{Network: TCP, Settings: s}}} }

func TestTCPLines(t *testing.T) {
	h := newHarness(t, 0, tcpOnly(Settings{MaxLineBytes: 4096}))
	conn := h.rawConn(0)
	var b bytes.Buffer
	b.Write(canonical("t1"))
	b.WriteString("\n\x00reserved for later\n\n")
	b.WriteString(strings.Repeat("y", 10000) + "\n") // over the limit: skipped
	b.Write(canonical("t2"))
	b.WriteString("\n")
	b.Write(canonical("t3")) // no newline at the end
	conn.Write(b.Bytes())
	conn.Close()
	evs := h.events(3)
	got := map[any]bool{}
	for i := range evs {
		got[evs[i]["resource_id"]] = true
		if rk := evs[i]["source"].(map[string]any)["routing_key"]; rk != "tcp://"+h.addr(0) {
			t.Fatalf("routing key %v", rk)
		}
	}
	if !got["t1"] || !got["t2"] || !got["t3"] {
		t.Fatalf("events %v", got)
	}
	s := h.waitStat(0, "lines", func(s Snapshot) bool { return s.TCPConnections == 0 })
	if s.TCPLines != 3 || s.TCPReservedLines != 1 || s.TCPOverlongLines != 1 {
		t.Fatalf("lines %d reserved %d overlong %d", s.TCPLines, s.TCPReservedLines, s.TCPOverlongLines)
	}
}

func TestTCPSlowClientAndCap(t *testing.T) {
	h := newHarness(t, 0, tcpOnly(Settings{IdleTimeout: 300 * time.Millisecond, MaxConnections: 2}))
	slow := h.rawConn(0)
	slow.Write([]byte(`{"event_type":`)) // and never finishes the line
	h.waitStat(0, "slow client", func(s Snapshot) bool { return s.TCPConnections == 1 })

	good := h.rawConn(0)
	h.waitStat(0, "good client", func(s Snapshot) bool { return s.TCPConnections == 2 })
	// Over the cap: closed at once.
	extra := h.rawConn(0)
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection over the cap: %v", err)
	}
	extra.Close()
	// The good client is served while the slow one stalls.
	good.Write(append(canonical("g1"), '\n'))
	h.events(1)
	// The slow one is cut at the idle timeout.
	slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(slow).ReadByte(); err != io.EOF && !isReset(err) {
		t.Fatalf("slow client not closed: %v", err)
	}
	s := h.waitStat(0, "timeouts", func(s Snapshot) bool { return s.TCPTimeouts >= 1 })
	if s.TCPRefused != 1 || s.Unparseable != 0 {
		t.Fatalf("refused %d unparseable %d", s.TCPRefused, s.Unparseable)
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

func TestTCPBackPressureOnFullOutbox(t *testing.T) {
	h := newHarness(t, 2, tcpOnly(Settings{BatchMax: 1}))
	c := h.dial(0)
	for i := 0; i < 5; i++ {
		if err := c.Send(canonical(fmt.Sprintf("bp-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	h.waitStat(0, "full", func(s Snapshot) bool { return s.OutboxFull > 0 })
	// Drain the outbox as the sender would; every line gets in, none is lost.
	ctx := context.Background()
	seen := map[any]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < 5 && time.Now().Before(deadline) {
		first, last, evs, err := h.box.Peek(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			var m map[string]any
			json.Unmarshal(ev, &m)
			seen[m["resource_id"]] = true
		}
		if len(evs) > 0 {
			h.box.Delete(ctx, first, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen) != 5 {
		t.Fatalf("%d of 5 lines reached the outbox", len(seen))
	}
	if s := h.srv.Stats(0); s.FailedToSend != 0 {
		t.Fatalf("tcp dropped %d", s.FailedToSend)
	}
}

func TestRunDrainsOnStop(t *testing.T) {
	o := udpOnly()
	o.Listeners[0].Settings.BatchLinger = time.Hour // only the drain commits
	h := newHarness(t, 0, o)
	c := h.dial(0)
	for i := 0; i < 10; i++ {
		c.SendUnboxed(canonical(fmt.Sprintf("d-%d", i)))
	}
	h.waitStat(0, "mapped", func(s Snapshot) bool { return s.Mapped == 10 })
	if err := h.srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.box.Depth() != 10 {
		t.Fatalf("depth %d after drain", h.box.Depth())
	}
}

func TestMetricsExported(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	c := h.dial(0)
	c.SendUnboxed(canonical("m"))
	c.conn.Write([]byte{7, 7})
	h.events(1)
	h.waitStat(0, "invalid version", func(s Snapshot) bool { return s.UDPInvalidVersion == 1 })
	name := h.srv.Listeners()[0].Name
	want := fmt.Sprintf(`
# HELP tally_collector_plog_udp_invalid_version_total UDP datagrams with a version byte between 1 and 31 (STAT udp_invalid_version).
# TYPE tally_collector_plog_udp_invalid_version_total counter
tally_collector_plog_udp_invalid_version_total{listener=%q} 1
# HELP tally_collector_plog_udp_simple_messages_total Unboxed UDP messages received (STAT udp_simple_messages).
# TYPE tally_collector_plog_udp_simple_messages_total counter
tally_collector_plog_udp_simple_messages_total{listener=%q} 1
`, name, name)
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want),
		"tally_collector_plog_udp_simple_messages_total", "tally_collector_plog_udp_invalid_version_total"); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := New(Options{})
	if !errors.Is(err, ErrNoListeners) {
		t.Fatalf("no listeners: %v", err)
	}
	_, err = New(Options{Listeners: []Listener{{Network: "sctp", Address: "nope"}, {Network: UDP, Address: ":0", Settings: Settings{Workers: -1}},
		{Network: TCP, Address: ":0", Settings: Settings{MaxLineBytes: 1 << 20, LineBudgetBytes: 1 << 20}}}})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"processor is nil", "outbox is nil", `"sctp"`, `"nope"`, "workers < 1", "listener 2: line budget bytes below twice max line bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestMerge(t *testing.T) {
	defaults := Settings{DefragMaxAge: 3 * time.Second, AllowKILL: ptr(true), Workers: 4}
	got := Merge(Settings{DefragMaxAge: time.Second, AllowKILL: ptr(false), MaxLineBytes: 10}, defaults)
	if got.DefragMaxAge != time.Second || *got.AllowKILL || got.MaxLineBytes != 10 {
		t.Fatalf("overrides lost: %+v", got)
	}
	if got.Workers != 4 || *got.AllowENVI || !*got.HoleDetection {
		t.Fatalf("defaults lost: %+v", got)
	}
	if got.DefragMaxBytes != defaultDefragMaxBytes || got.MaxLineBytes != 10 || got.IdleTimeout != defaultIdleTimeout ||
		got.MaxConnections != defaultMaxConnections || got.BatchMax != defaultBatchMax || got.LineBudgetBytes != defaultLineBudgetBytes {
		t.Fatalf("package defaults lost: %+v", got)
	}
	inherit := Merge(Settings{}, defaults)
	if !*inherit.AllowKILL || inherit.DefragMaxAge != 3*time.Second {
		t.Fatalf("inheritance: %+v", inherit)
	}
	// The merge copies the switches: changing the result leaves the inputs alone.
	*inherit.AllowKILL = false
	if !*defaults.AllowKILL {
		t.Fatal("merge aliased a default switch")
	}
}

// trapMapper fails every call the way a trapping module does.
type trapMapper struct{ echoMapper }

func (m trapMapper) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	return runtime.Result{}, &runtime.MapError{Reason: runtime.Reason("trap"), Module: m.ID(), Err: io.ErrUnexpectedEOF}
}

func TestTCPFailedMappingDeadLettered(t *testing.T) {
	o := tcpOnly(Settings{})
	o.Listeners[0].Mappers = []pipeline.Mapper{trapMapper{echoMapper{"broken"}}}
	h := newHarness(t, 0, o)
	c := h.dial(0)
	if err := c.Send([]byte("not json at all")); err != nil {
		t.Fatal(err)
	}
	h.waitStat(0, "failed", func(s Snapshot) bool { return s.Failed == 1 })
	dl := h.deadLetter()
	if string(dl.Body) != "not json at all" || dl.Reason != "trap" || dl.Module != "broken@1.0.0" ||
		dl.Exchange != "plog" || dl.RoutingKey != "tcp://"+h.addr(0) {
		t.Fatalf("dead letter %+v", dl.DeadLetter)
	}
	if h.box.Depth() != 0 {
		t.Fatal("a failed message produced events")
	}
}

// sendNumbered sends messages numbered 1..n to listener 0, leaving out skip,
// each dropped on purpose (kt:null) so that only the counters see them.
func sendNumbered(h *harness, n uint32, skip uint32) int {
	h.t.Helper()
	conn := h.rawConn(0)
	sent := 0
	for id := uint32(1); id <= n; id++ {
		if id == skip {
			continue
		}
		frags, _ := Fragments(id, []byte("x"), []string{"kt:null"}, 100)
		conn.Write(frags[0])
		sent++
	}
	return sent
}

// A message number skipped on the way is counted as a hole when hole
// detection is on (the default), and not at all when it is switched off.
func TestUDPHoleDetection(t *testing.T) {
	for _, c := range []struct {
		name  string
		on    *bool  // Settings.HoleDetection
		holes uint64 // HolesFromNewMessage
	}{
		{"on by default", nil, 1},
		{"off", ptr(false), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := udpOnly()
			o.Listeners[0].Settings.HoleDetection = c.on
			h := newHarness(t, 0, o)
			sent := sendNumbered(h, 68, 4) // 4 is lost on the way
			s := h.waitStat(0, "all received", func(s Snapshot) bool { return s.NullRoute == uint64(sent) })
			if s.HolesFromNewMessage != c.holes || s.HolesFromDeadPort != 0 {
				t.Fatalf("holes %d from a new message and %d from a dead port, want %d and 0",
					s.HolesFromNewMessage, s.HolesFromDeadPort, c.holes)
			}
		})
	}
}

func TestTCPLineLimitBoundary(t *testing.T) {
	o := tcpOnly(Settings{MaxLineBytes: 10})
	o.Listeners[0].Mappers = []pipeline.Mapper{echoMapper{"echo"}}
	h := newHarness(t, 0, o)
	conn := h.rawConn(0)
	conn.Write([]byte("0123456789\n0123456789A\nok\n0123456789B"))
	conn.Close()
	evs := h.events(2)
	got := map[any]bool{evs[0]["resource_id"]: true, evs[1]["resource_id"]: true}
	if !got["0123456789"] || !got["ok"] {
		t.Fatalf("events %v", got)
	}
	s := h.waitStat(0, "closed", func(s Snapshot) bool { return s.TCPConnections == 0 })
	if s.TCPOverlongLines != 2 || s.TCPLines != 2 {
		t.Fatalf("overlong %d lines %d", s.TCPOverlongLines, s.TCPLines)
	}
}

// A canonical event without a timestamp is given the time the listener
// received it, as the channel gives the time of the publish call; one that
// lacks another required member is a local dead letter (invalid_event, the
// member named), never an event the Reporting API would refuse.
func TestCanonicalEventWithoutTimestampGetsReceipt(t *testing.T) {
	h := newHarness(t, 0, tcpOnly(Settings{}))
	c := h.dial(0)
	before := time.Now().UTC()
	noTime := `{"event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"r1","project_id":"p1","action":"exists"}`
	noProject := `{"event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"r2","action":"exists"}`
	for _, m := range []string{noTime, noProject} {
		if err := c.Send([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	evs := h.events(1)
	after := time.Now().UTC()
	ts, _ := evs[0]["timestamp"].(string)
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil || !strings.HasSuffix(ts, "Z") || at.Before(before.Truncate(time.Microsecond)) || at.After(after) {
		t.Fatalf("timestamp %q (%v), want the time of receipt in [%s, %s]", ts, err, before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
	}
	if evs[0]["resource_id"] != "r1" {
		t.Fatalf("event %v", evs[0])
	}
	dl := h.deadLetter()
	if string(dl.Body) != noProject || dl.Reason != string(runtime.ReasonInvalidEvent) || !strings.Contains(dl.Detail, "project_id") {
		t.Fatalf("dead letter %+v", dl.DeadLetter)
	}
	if h.box.Depth() != 1 {
		t.Fatalf("outbox depth %d, want the one valid event", h.box.Depth())
	}
}
