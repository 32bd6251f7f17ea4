package sender_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/sender"
)

// BenchmarkSenderToLoopbackAPI measures how fast the sender drains the
// outbox into the reference Reporting API over loopback (600-byte events,
// BATCH_MAX 500, both stores synced on disk). events/s is the figure.
func BenchmarkSenderToLoopbackAPI(b *testing.B) {
	e := newEnv(b)
	s := e.sender(b, func(o *sender.Options) { o.BatchMax = 500 })
	const chunk = 20_000
	next, sent := 0, 0
	var busy, cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		for i := 0; i < chunk; i += 1000 {
			e.append(b, next, 1000, 330) // ~600 bytes each
			next += 1000
		}
		b.StartTimer()
		start, cpu0 := time.Now(), cpuTime()
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		busy += time.Since(start)
		cpu += cpuTime() - cpu0
		sent += chunk
	}
	if st := e.stats(b); st.Accepted != int64(sent) {
		b.Fatalf("server accepted %d of %d", st.Accepted, sent)
	}
	b.ReportMetric(float64(sent)/busy.Seconds(), "events/s")
	// CPU (user+system) of the whole process, sender and API together: the
	// figure that holds on a loaded machine, where wall time does not.
	b.ReportMetric(float64(cpu.Microseconds())/float64(sent), "cpu-µs/event")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
