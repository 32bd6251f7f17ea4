package sender_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// BenchmarkSenderToLoopbackAPI measures how fast the sender drains the
// outbox into the reference Reporting API over loopback (600-byte events,
// BATCH_MAX 500, both stores synced). events/s is the figure.
//
// in-process: the API runs in this process, cpu-µs/event counts both
// sides. separate-process: the API runs in a child process (this test
// binary re-executed), so cpu-µs/event is the sender's side alone (outbox
// read and delete, body, HTTP client).
func BenchmarkSenderToLoopbackAPI(b *testing.B) {
	b.Run("in-process", func(b *testing.B) {
		e := newEnv(b)
		benchDrain(b, e, e.ts.URL)
	})
	b.Run("separate-process", func(b *testing.B) {
		e := newEnv(b)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envAPIChild+"="+testkit.BenchDir(b))
		stdin, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { stdin.Close(); cmd.Wait() }()
		sc := bufio.NewScanner(out)
		url := ""
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "API "); ok {
				url = u
				break
			}
		}
		if url == "" {
			b.Fatal("the API child did not start")
		}
		go io.Copy(io.Discard, out)
		benchDrain(b, e, url)
	})
}

const envAPIChild = "TALLY_OSC_SENDER_BENCH_API_DIR"

// reportingAPIChild serves the reference API for the separate-process
// benchmark until its stdin closes (TestMain runs it).
func reportingAPIChild(dir string) int {
	srv, err := server.New(server.Options{Token: token, DataDir: dir, Logger: zerolog.Nop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Stdout.WriteString("API http://" + ln.Addr().String() + "\n")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	srv.Serve(ctx, ln, server.TLS{})
	return 0
}

func benchDrain(b *testing.B, e *env, url string) {
	s := e.sender(b, func(o *sender.Options) { o.BatchMax = 500; o.URL = url })
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
		start, cpu0 := time.Now(), testkit.CPUTime()
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		busy += time.Since(start)
		cpu += testkit.CPUTime() - cpu0
		sent += chunk
	}
	if e.ob.Depth() != 0 {
		b.Fatalf("depth %d after flush", e.ob.Depth())
	}
	b.ReportMetric(float64(sent)/busy.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(sent), "cpu-µs/event")
}
