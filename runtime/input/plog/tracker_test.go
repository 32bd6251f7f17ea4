package plog

// What plog's issue tracker proposed and the listener does: exceptions
// counted, a start line per listener, isolated listeners, the \0 protocol over
// TCP and a failures object in STAT.

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// exceptions counts an unexpected error while a message is handled (here a
// panic in the pipeline); the listener goes on with the next message.
func TestExceptionsCounted(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	bad := string(canonical("breaks-the-handler"))
	h.proc.panicOn.Store(&bad)
	c := h.dial(0)
	if err := c.SendUnboxed([]byte(bad)); err != nil {
		t.Fatal(err)
	}
	h.waitStat(0, "the exception", func(s Snapshot) bool { return s.Exceptions == 1 })
	if err := c.SendUnboxed(canonical("after")); err != nil {
		t.Fatal(err)
	}
	evs := h.events(1)
	if evs[0]["resource_id"] != "after" {
		t.Fatalf("event %v", evs[0])
	}
	if s := h.srv.Stats(0); s.Failures["exceptions"] != 1 {
		t.Fatalf("failures %v", s.Failures)
	}
}

// Each listener logs, as it starts, the address and port it listens on
// (plog's tracker: "Listeners: log which port is listened on").
func TestEachListenerLogsItsPort(t *testing.T) {
	var logs testkit.SyncBuffer
	o := Options{Listeners: []Listener{{Network: UDP}, {Network: TCP}, {Network: UDP}}}
	h := newLoggedHarness(t, 0, o, zerolog.New(&logs))
	want := map[string]bool{}
	for i, l := range h.srv.Listeners() {
		want[l.Network+"://"+h.addr(i)] = true
	}
	testkit.WaitUntil(t, 10*time.Second, "a start line per listener", func() (bool, string) {
		got := map[string]bool{}
		for _, m := range logs.JSONLines(t) {
			if m["message"] == "plog listener started" {
				got[m["listener"].(string)] = true
			}
		}
		for k := range want {
			if !got[k] {
				return false, logs.String()
			}
		}
		return len(got) == len(want), logs.String()
	})
}

// blockingMapper holds every call until released: a listener's module that
// hangs.
type blockingMapper struct {
	echoMapper
	entered atomic.Int32
	release chan struct{}
}

func (m *blockingMapper) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	m.entered.Add(1)
	<-m.release
	return m.echoMapper.Map(ctx, in, src)
}

// Each listener has its own reader, queue, workers, defragmenter and
// counters (plog's tracker: "Provide full isolation for UDP"): a listener
// whose every worker hangs in its module holds up no other listener.
func TestListenersAreIsolated(t *testing.T) {
	stuck := &blockingMapper{echoMapper: echoMapper{"stuck"}, release: make(chan struct{})}
	o := Options{Listeners: []Listener{
		{Network: UDP, Mappers: []pipeline.Mapper{stuck}},
		{Network: UDP},
	}}
	h := newHarness(t, 0, o)
	a, b := h.dial(0), h.dial(1)
	for range 5 { // more than A's two workers can hold
		if err := a.SendUnboxed([]byte("not json: for the stuck module")); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "both of A's workers in its module", func() bool { return stuck.entered.Load() == 2 })
	for i := range 20 {
		if err := b.SendUnboxed(canonical("b-" + string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	evs := h.events(20)
	for _, ev := range evs {
		if !strings.HasPrefix(ev["resource_id"].(string), "b-") {
			t.Fatalf("event %v", ev)
		}
	}
	sa, sb := h.srv.Stats(0), h.srv.Stats(1)
	if sa.UDPSimpleMessages != 5 || sa.Mapped != 0 || sb.UDPSimpleMessages != 20 || sb.EventsCommitted != 20 {
		t.Fatalf("A: received %d mapped %d; B: received %d committed %d",
			sa.UDPSimpleMessages, sa.Mapped, sb.UDPSimpleMessages, sb.EventsCommitted)
	}
	close(stuck.release)
	h.waitStat(0, "A's messages once released", func(s Snapshot) bool { return s.EventsCommitted == 5 })
}

// The \0 protocol over TCP (plog's tracker: "Revamp TCP protocol"): a line
// \0\0 and a command runs it as over UDP and answers on the connection,
// followed by a newline; a line \0 tags \0\0 message carries tags; any other
// line starting with \0 is counted and ignored.
func TestTCPZeroProtocol(t *testing.T) {
	o := tcpOnly(Settings{})
	o.Listeners[0].Mappers = []pipeline.Mapper{echoMapper{"first"}, echoMapper{"second"}}
	h := newHarness(t, 0, o)
	conn := h.rawConn(0)
	r := bufio.NewReader(conn)
	answer := func(line string) string {
		t.Helper()
		if _, err := conn.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("answer to %q: %v", line, err)
		}
		return strings.TrimSuffix(got, "\n")
	}
	if got := answer("\x00\x00ping tcp"); got != "PONG tcp" {
		t.Fatalf("PING: %q", got)
	}
	var stat map[string]any
	if err := json.Unmarshal([]byte(answer("\x00\x00STAT")), &stat); err != nil || stat["version"] != "test" {
		t.Fatalf("STAT: %v %v", stat, err)
	}
	// ENVI is off by default: no answer; the PONG that follows is the next line.
	conn.Write([]byte("\x00\x00ENVI\n"))
	if got := answer("\x00\x00PING after"); got != "PONG after" {
		t.Fatalf("after ENVI: %q", got)
	}
	conn.Write([]byte("plain\n"))
	conn.Write([]byte("\x00kt:second\x00rk:tagged.key\x00\x00tagged\n"))
	conn.Write([]byte("\x00no end of tags\n"))
	conn.Write([]byte("\x00rk:x\x00\x00\n")) // tags and no message
	// The package's client writes the same line for a tagged message.
	c := h.dial(0)
	if err := c.Send([]byte("from-client"), "kt:second", "rk:client.key"); err != nil {
		t.Fatal(err)
	}
	if err := c.Send([]byte("x"), "bad\x00tag"); err == nil {
		t.Fatal("a tag holding \\0 was sent")
	}
	s := h.waitStat(0, "lines", func(s Snapshot) bool { return s.Mapped == 3 && s.TCPReservedLines == 2 })
	if s.V0Commands != 4 || s.V0RefusedCommands != 1 || s.TCPLines != 3 {
		t.Fatalf("commands %d refused %d lines %d", s.V0Commands, s.V0RefusedCommands, s.TCPLines)
	}
	byBody := map[string]map[string]any{}
	for _, ev := range h.events(3) {
		byBody[ev["resource_id"].(string)] = ev
	}
	if m := byBody["tagged"]["attributes"].(map[string]any)["module"]; m != "second" {
		t.Fatalf("tagged line mapped by %v", m)
	}
	if rk := byBody["tagged"]["source"].(map[string]any)["routing_key"]; rk != "tagged.key" {
		t.Fatalf("tagged line's routing key %v", rk)
	}
	if m := byBody["plain"]["attributes"].(map[string]any)["module"]; m != "first" {
		t.Fatalf("plain line mapped by %v", m)
	}
	if rk := byBody["from-client"]["source"].(map[string]any)["routing_key"]; rk != "client.key" {
		t.Fatalf("client's tagged line: routing key %v", rk)
	}
}

// STAT's failures gathers every loss counter under its own name.
func TestFailuresGatherEveryLossCounter(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	conn := h.rawConn(0)
	conn.Write([]byte{5, 'x'})                                        // a version 1-31
	conn.Write([]byte{0, 7})                                          // an unknown packet type
	conn.Write(raw{typ: 1, count: 0, fragSize: 4, length: 6}.bytes()) // a refused header
	conn.Write([]byte("not json"))                                    // unparseable
	s := h.waitStat(0, "the losses", func(s Snapshot) bool { return s.Unparseable == 1 })
	want := map[string]uint64{"udp_invalid_version": 1, "v0_invalid_type": 1, "v0_invalid_multipart_header": 1, "unparseable": 1}
	total := uint64(0)
	for k, v := range s.Failures {
		total += v
		if v != want[k] {
			t.Errorf("failures[%s] = %d, want %d", k, v, want[k])
		}
	}
	if total != 4 || len(s.Failures) != 20 {
		t.Fatalf("failures %v", s.Failures)
	}
}
