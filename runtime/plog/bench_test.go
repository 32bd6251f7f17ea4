package plog

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchEndToEnd sends b.N single-fragment datagrams (version 0, checksummed
// canonical events of about 300 bytes) to a UDP listener backed by the real
// pipeline and a real Badger outbox, at rate datagrams per second (0: as fast as
// the sender goes), and waits until each one is committed or counted as lost.
// It reports received, committed and lost datagrams and the rates.
func benchEndToEnd(b *testing.B, rate int, unboxed bool) {
	o := udpOnly()
	h := newHarness(b, 0, o)
	c, err := Dial(UDP, h.addr(0))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = canonical(fmt.Sprintf("bench-%04d-%s", i, "0123456789abcdef0123456789abcdef"))
	}
	const burst = 100
	var interval time.Duration
	if rate > 0 {
		interval = time.Second * burst / time.Duration(rate)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		body := bodies[i%len(bodies)]
		if unboxed {
			err = c.SendUnboxed(body)
		} else {
			err = c.Send(body)
		}
		if err != nil {
			b.Fatal(err)
		}
		if interval > 0 && (i+1)%burst == 0 {
			next := start.Add(time.Duration((i+1)/burst) * interval)
			time.Sleep(time.Until(next))
		}
	}
	sent := time.Since(start)
	// The drop count rides on the next datagram; a command is one.
	time.Sleep(50 * time.Millisecond)
	_, _ = c.Command(context.Background(), "PING", nil)
	var s Snapshot
	deadline := time.Now().Add(60 * time.Second)
	for {
		s = h.srv.Stats(0)
		if s.EventsCommitted+s.SocketDrops+s.FailedToSend >= uint64(b.N) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	total := time.Since(start)
	b.StopTimer()
	lost := uint64(b.N) - s.EventsCommitted
	b.ReportMetric(float64(b.N)/sent.Seconds(), "sent/s")
	b.ReportMetric(float64(s.EventsCommitted)/total.Seconds(), "committed/s")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(s.SocketDrops), "socket_drops")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkUDPPaced20k: the goal — no loss at 20 000 single-fragment datagrams/s.
// Run with -benchtime=100000x (5 s of traffic).
func BenchmarkUDPPaced20k(b *testing.B) { benchEndToEnd(b, 20000, false) }

// BenchmarkUDPPaced40k: headroom check at twice the goal.
func BenchmarkUDPPaced40k(b *testing.B) { benchEndToEnd(b, 40000, false) }

// BenchmarkUDPFlatOut: the sender as fast as it goes; loss shows the ceiling.
func BenchmarkUDPFlatOut(b *testing.B) { benchEndToEnd(b, 0, false) }

// BenchmarkUDPUnboxedPaced20k: unboxed datagrams at the goal rate.
func BenchmarkUDPUnboxedPaced20k(b *testing.B) { benchEndToEnd(b, 20000, true) }

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
