package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// BenchmarkAppend measures synced appends per second at several batch
// sizes: 600-byte events padded with random characters (compress about
// 1.3:1), and canonical events in commits of 50 (the consumer's at
// PREFETCH=100). events/s is the figure to read. The pipelined cases keep
// two appends committing at once (BeginAppendCounted, then the wait for the
// append before), as the broker input does.
func BenchmarkAppend(b *testing.B) {
	cases := []struct {
		name      string
		evs       [][]byte
		pipelined bool
	}{
		{"batch=1", events(0, 1, 600), false},
		{"batch=100", events(0, 100, 600), false},
		{"batch=1000", events(0, 1000, 600), false},
		{"canonical/batch=50", canonicalEvents(0, 50), false},
		{"pipelined/canonical/batch=50", canonicalEvents(0, 50), true},
		{"pipelined/batch=1", events(0, 1, 600), true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			o := open(b, testkit.BenchDir(b), func(op *outbox.Options) { op.MaxEvents = 1 << 40 })
			defer o.Close()
			evs, batch := tc.evs, len(tc.evs)
			ctx := context.Background()
			var size int64
			for _, e := range evs {
				size += int64(len(e))
			}
			b.SetBytes(size)
			cpu0 := testkit.CPUTime()
			var prev *outbox.Pending
			for b.Loop() {
				if !tc.pipelined {
					if err := o.Append(ctx, evs); err != nil {
						b.Fatal(err)
					}
					continue
				}
				p := o.BeginAppendCounted(ctx, evs, time.Time{}, nil)
				if prev != nil {
					if err := prev.Err(); err != nil {
						b.Fatal(err)
					}
				}
				prev = p
			}
			if prev != nil {
				if err := prev.Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64((testkit.CPUTime()-cpu0).Microseconds())/float64(b.N*batch), "cpu-µs/event")
		})
	}
}

// BenchmarkDrain measures Peek+Delete with the cursor (batches of 500).
func BenchmarkDrain(b *testing.B) {
	o := open(b, testkit.BenchDir(b), func(op *outbox.Options) { op.MaxEvents = 1 << 40 })
	defer o.Close()
	ctx := context.Background()
	const n = 100_000
	for i := 0; i < n; i += 1000 {
		if err := o.Append(ctx, events(i, 1000, 600)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	drained := 0
	cpu0 := testkit.CPUTime()
	for b.Loop() {
		f, l, evs, err := o.Peek(ctx, 500)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) == 0 {
			b.StopTimer()
			for i := 0; i < n; i += 1000 {
				o.Append(ctx, events(i, 1000, 600))
			}
			b.StartTimer()
			continue
		}
		if err := o.Delete(ctx, f, l); err != nil {
			b.Fatal(err)
		}
		drained += len(evs)
	}
	b.ReportMetric(float64(drained)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64((testkit.CPUTime()-cpu0).Microseconds())/float64(drained), "cpu-µs/event")
}

// BenchmarkResidentMemory reports the resident memory of this process
// with 0 and 100k buffered 600-byte events (1M with
// TALLY_OSC_BENCH_1M=1): after filling, and after a reopen plus a drain
// read of the first batch, which is what a restarted daemon holds.
// rss-MiB includes the store's memory-mapped tables; anon-MiB is the
// process's own memory.
func BenchmarkResidentMemory(b *testing.B) {
	sizes := []int{0, 100_000}
	if os.Getenv("TALLY_OSC_BENCH_1M") == "1" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			for b.Loop() {
				dir := testkit.BenchDir(b)
				o := open(b, dir, func(op *outbox.Options) { op.MaxEvents = int64(n) + 1 })
				ctx := context.Background()
				for i := 0; i < n; i += 1000 {
					if err := o.Append(ctx, events(i, 1000, 600)); err != nil {
						b.Fatal(err)
					}
				}
				debug.FreeOSMemory()
				rss, anon := residentMiB()
				b.ReportMetric(rss, "fill-rss-MiB")
				b.ReportMetric(anon, "fill-anon-MiB")
				b.ReportMetric(float64(o.DiskBytes())/(1<<20), "disk-MiB")
				o.Close()
				runtime.GC()
				start := time.Now()
				o = open(b, dir)
				b.ReportMetric(time.Since(start).Seconds(), "open-s")
				o.Peek(ctx, 500)
				debug.FreeOSMemory()
				rss, anon = residentMiB()
				b.ReportMetric(rss, "reopen-rss-MiB")
				b.ReportMetric(anon, "reopen-anon-MiB")
				o.Close()
			}
		})
	}
}

func residentMiB() (rss, anon float64) {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return rss, anon
}

// canonicalEvents makes n canonical events shaped like the nova mapper's
// (random identifiers, a handful of projects, flavors and hosts), the same
// for the same from+i: what the outbox holds in production, and how well
// it compresses.
func canonicalEvents(from, n int) [][]byte {
	flavors := []string{"m1.small", "m1.medium", "m1.large", "c2.xlarge"}
	out := make([][]byte, n)
	for i := range out {
		r := rand.New(rand.NewPCG(uint64(from+i), 11))
		hex := func(k int) string {
			const digits = "0123456789abcdef"
			b := make([]byte, k)
			for j := range b {
				b[j] = digits[r.IntN(16)]
			}
			return string(b)
		}
		uuid := func() string { return hex(8) + "-" + hex(4) + "-" + hex(4) + "-" + hex(4) + "-" + hex(12) }
		f := r.IntN(len(flavors))
		out[i] = fmt.Appendf(nil, `{"event_id":"%s","timestamp":"2026-11-%02dT%02d:%02d:%02d.%06dZ","event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"%s","project_id":"%s","user_id":"%s","action":"exists","attributes":{"flavor_name":"%s","flavor_id":"%d","vcpus":%d,"memory_mb":%d,"root_gb":%d,"ephemeral_gb":0,"disk_gb":%d,"state":"active","image_ref":"%s","availability_zone":"nova","host":"compute-%02d","launched_at":"2026-10-01T08:00:00Z"},"source":{"exchange":"nova","routing_key":"notifications.info","publisher_id":"nova-compute:compute-%02d","mapper":"nova@1.0.0"}}`,
			uuid(), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000000), uuid(),
			hex(8)+strings.Repeat("0", 24)[:24-r.IntN(3)], hex(32), flavors[f], f+1, 1<<f, 2048<<f, 20<<f, 20<<f, uuid(), r.IntN(40), r.IntN(40))
	}
	return out
}

// BenchmarkFootprint appends 100,000 canonical events in commits of 50 (the
// consumer's at PREFETCH=100) and reports what they take on disk once the
// store has flushed, against their own size.
func BenchmarkFootprint(b *testing.B) {
	const n, batch = 100_000, 50
	for b.Loop() {
		dir := testkit.BenchDir(b)
		o := open(b, dir, func(op *outbox.Options) { op.MaxEvents = n })
		ctx := context.Background()
		var raw int64
		for i := 0; i < n; i += batch {
			evs := canonicalEvents(i, batch)
			for _, e := range evs {
				raw += int64(len(e))
			}
			if err := o.Append(ctx, evs); err != nil {
				b.Fatal(err)
			}
		}
		o.Close() // flushes the memory tables
		o = open(b, dir)
		if o.Depth() != n || o.Bytes() != raw {
			b.Fatalf("reopened with depth %d bytes %d, want %d and %d", o.Depth(), o.Bytes(), n, raw)
		}
		disk := o.DiskBytes()
		o.Close()
		b.ReportMetric(float64(raw)/n, "event-bytes")
		b.ReportMetric(float64(disk)/n, "disk-bytes/event")
		b.ReportMetric(float64(disk)/(1<<20), "disk-MiB")
	}
}
