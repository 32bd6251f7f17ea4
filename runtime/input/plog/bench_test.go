package plog

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
)

// timedOutbox measures the real outbox's Append.
type timedOutbox struct {
	input.Outbox
	discard               bool // measure the listener alone: accept and forget
	n, events, total, max atomic.Int64
}

func (o *timedOutbox) AppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) error {
	start := time.Now()
	var err error
	if !o.discard {
		err = o.Outbox.AppendKeyed(ctx, events, taken, tally)
	}
	d := int64(time.Since(start))
	o.n.Add(1)
	o.events.Add(int64(len(events)))
	o.total.Add(d)
	for {
		m := o.max.Load()
		if d <= m || o.max.CompareAndSwap(m, d) {
			break
		}
	}
	return err
}

// benchEndToEnd sends b.N single-fragment datagrams (version 0, checksummed
// canonical events of about 300 bytes) to a UDP listener backed by the real
// pipeline and a real Badger outbox, at rate datagrams per second (0: as fast as
// the sender goes), and waits until each one is committed or counted as lost.
// It reports received, committed and lost datagrams and the rates.
func benchEndToEnd(b *testing.B, rate int, unboxed, discard bool) {
	o := udpOnly()
	if v := os.Getenv("PLOG_BENCH_BATCH"); v != "" {
		o.Listeners[0].Settings.BatchMax, _ = strconv.Atoi(v)
	}
	var timed *timedOutbox
	h := newHarness(b, 0, o, func(box input.Outbox) input.Outbox {
		timed = &timedOutbox{Outbox: box, discard: discard}
		return timed
	})
	conn := h.rawConn(0)
	c := &Client{conn: conn, udp: true}
	// Datagrams are built up front so the sender costs little CPU: the
	// benchmark measures the listener, not the client.
	dgrams := make([][]byte, 1024)
	for i := range dgrams {
		body := canonical(fmt.Sprintf("bench-%04d-%s", i, "0123456789abcdef0123456789abcdef"))
		if unboxed {
			dgrams[i] = body
			continue
		}
		frags, _ := Fragments(uint32(i), body, nil, 1400)
		dgrams[i] = frags[0]
	}
	const burst = 100
	var interval time.Duration
	if rate > 0 {
		interval = time.Second * burst / time.Duration(rate)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testkit.CPUTime()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		d := dgrams[i%len(dgrams)]
		if !unboxed {
			binary.BigEndian.PutUint32(d[8:12], uint32(i)) // one id per message
		}
		if _, err := conn.Write(d); err != nil {
			b.Fatal(err)
		}
		if interval > 0 && (i+1)%burst == 0 {
			next := start.Add(time.Duration((i+1)/burst) * interval)
			time.Sleep(time.Until(next))
		}
	}
	sent := time.Since(start)
	// The drop count rides on the first datagram received after the drops:
	// ping until answered (an unanswered ping was dropped too and is counted),
	// then wait for every received datagram to be committed.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Command(ctx, "PING", nil)
		cancel()
		if err == nil {
			break
		}
	}
	var s Snapshot
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s = h.srv.Stats(0)
		if s.EventsCommitted+s.FailedToSend+s.SocketDrops >= uint64(b.N) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	total := time.Since(start)
	cpu := testkit.CPUTime() - cpu0
	b.StopTimer()
	lost := uint64(b.N) - min(s.EventsCommitted, uint64(b.N))
	b.ReportMetric(float64(b.N)/sent.Seconds(), "sent/s")
	b.ReportMetric(float64(s.EventsCommitted)/total.Seconds(), "committed/s")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(s.SocketDrops), "socket_drops")
	b.ReportMetric(float64(timed.max.Load())/1e6, "max_append_ms")
	b.ReportMetric(float64(timed.total.Load())/1e6/float64(max(timed.n.Load(), 1)), "avg_append_ms")
	b.ReportMetric(float64(timed.events.Load())/float64(max(timed.n.Load(), 1)), "events/append")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu_µs/datagram")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkUDPPaced20k: the goal — no loss at 20 000 single-fragment datagrams/s.
// Run with -benchtime=100000x (5 s of traffic).
func BenchmarkUDPPaced20k(b *testing.B) { benchEndToEnd(b, 20000, false, false) }

// BenchmarkUDPPaced10k: half the goal, for a loaded machine.
func BenchmarkUDPPaced10k(b *testing.B) { benchEndToEnd(b, 10000, false, false) }

// BenchmarkUDPPaced40k: headroom check at twice the goal.
func BenchmarkUDPPaced40k(b *testing.B) { benchEndToEnd(b, 40000, false, false) }

// BenchmarkUDPFlatOut: the sender as fast as it goes; loss shows the ceiling.
func BenchmarkUDPFlatOut(b *testing.B) { benchEndToEnd(b, 0, false, false) }

// BenchmarkUDPListenerOnly: received, defragmented and mapped through the real
// pipeline, batched for commit, but the batches are discarded instead of
// written: the listener's own ceiling, without the outbox's disk.
func BenchmarkUDPListenerOnlyPaced20k(b *testing.B) { benchEndToEnd(b, 20000, false, true) }
func BenchmarkUDPListenerOnlyFlatOut(b *testing.B)  { benchEndToEnd(b, 0, false, true) }

// BenchmarkUDPUnboxedPaced20k: unboxed datagrams at the goal rate.
func BenchmarkUDPUnboxedPaced20k(b *testing.B) { benchEndToEnd(b, 20000, true, false) }

// BenchmarkDefragSingle is the receive-side protocol cost of one single-fragment
// datagram: header parse, checksum, copy.
func BenchmarkDefragSingle(b *testing.B) {
	d, _ := newTestDefrag(1 << 20)
	frags, _ := Fragments(1, canonical("x"), nil, 1400)
	dg := frags[0]
	now := time.Now()
	b.SetBytes(int64(len(dg)))
	b.ReportAllocs()
	for b.Loop() {
		h, tags, payload, err := parseHeader(dg)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := d.add(now, clientA, h, tags, payload); !ok {
			b.Fatal("not delivered")
		}
	}
}

// BenchmarkDefragMulti reassembles a 16 KiB message from 12 fragments.
func BenchmarkDefragMulti(b *testing.B) {
	d, _ := newTestDefrag(1 << 20)
	msg := make([]byte, 16<<10)
	now := time.Now()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	var id uint32
	for b.Loop() {
		id++
		frags, _ := Fragments(id, msg, nil, 1400)
		for _, f := range frags {
			h, tags, payload, _ := parseHeader(f)
			d.add(now, clientA, h, tags, payload)
		}
	}
}
