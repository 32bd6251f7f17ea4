package channel

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// BenchmarkPublish is one publisher handing small usage messages to the
// daemon's endpoint as fast as the queue bound lets it: through the socket,
// the pipeline with the built-in channel module in wazero, and the Badger
// outbox (TALLY_OSC_BENCH_DIR puts it on tmpfs), until every message is
// acknowledged. It reports messages per second and checks that nothing was
// lost: every message settled Committed with its event in the outbox, or
// DeadLettered (a mapper call past its deadline on a loaded machine) with
// its dead letter there.
//
//	go test -run '^$' -bench BenchmarkPublish -benchtime 100000x ./runtime/input/channel/
func BenchmarkPublish(b *testing.B) {
	b.Run("mode=watched", func(b *testing.B) { benchPublish(b, channelModule) })
	b.Run("mode=unguarded", func(b *testing.B) { benchPublish(b, unguardedModule) })
	b.Run("mode=metered", func(b *testing.B) { benchPublish(b, nil) })
}

// benchPublish is BenchmarkPublish with the channel module as the daemon
// loads it by default (mapper nil: metered, unguarded), or as mapper loads
// it: watched, as with MAPPER_METERED=false (a channel message then runs
// guarded), or unguarded and unmetered, with nothing to stop a runaway (the
// figure metering is held to).
func benchPublish(b *testing.B, mapper func(testing.TB) pipeline.Mapper) {
	for _, typ := range []struct {
		name string
		t    client.Message
	}{
		{"json", client.Message{Tag: "usage.license", Type: client.JSON}},
		{"string", client.Message{Tag: "usage.license", Type: client.String}},
	} {
		b.Run(typ.name, func(b *testing.B) {
			h := newHarness(b, Options{})
			if mapper != nil {
				h.useMapper(mapper(b))
			}
			h.start()
			var committed, deadLettered, other atomic.Int64
			c := h.client(client.Options{OnSettled: func(s client.Settlement) {
				switch s.Status {
				case wire.Committed:
					committed.Add(1)
				case wire.DeadLettered:
					deadLettered.Add(1) // kept (a mapper call over its deadline on a loaded machine)
				default:
					other.Add(1)
				}
			}})
			msgs := make([][]byte, b.N)
			for i := range msgs {
				if typ.t.Type == client.JSON {
					msgs[i] = []byte(`{"id":"b-` + strconv.Itoa(i) + `","type":"license.checkout","resource_type":"license","resource_id":"matlab","project_id":"p1","attributes":{"seats":1}}`)
				} else {
					msgs[i] = []byte("id=b-" + strconv.Itoa(i) + " type=license.checkout resource_type=license resource_id=matlab project_id=p1 seats=1")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.ResetTimer()
			c0 := testkit.CPUTime()
			start := time.Now()
			for i := range b.N {
				m := typ.t
				m.Data = msgs[i]
				if _, err := c.PublishWait(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			b.StopTimer()
			cpu := testkit.CPUTime() - c0
			b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			// Nothing lost: every message is an event in the outbox, or a dead
			// letter in it.
			st := c.Stats()
			if committed.Load()+deadLettered.Load() != int64(b.N) || other.Load() != 0 {
				b.Fatalf("%d committed, %d dead-lettered, %d otherwise settled; stats %+v",
					committed.Load(), deadLettered.Load(), other.Load(), st)
			}
			if d, l := h.box.Depth(), h.box.DeadLetterCount(); d != committed.Load() || l != deadLettered.Load() {
				b.Fatalf("outbox depth %d and %d dead letters, want %d and %d", d, l, committed.Load(), deadLettered.Load())
			}
			b.ReportMetric(float64(deadLettered.Load()), "dead-letters")
			if b.N >= 10000 {
				fmt.Fprintf(os.Stderr, "%s: %d messages in %v: %.0f msgs/s, %.1f CPU-µs each (client and daemon), %d dead-lettered, %d resent, %d times the queue was full\n",
					typ.name, b.N, took.Round(time.Millisecond), float64(b.N)/took.Seconds(), float64(cpu)/float64(b.N)/1e3,
					deadLettered.Load(), st.Resent, st.NoBufs)
			}
		})
	}
}

// BenchmarkChannelModule is the pipeline's part of the cost of one message:
// a small usage message's envelope indexed and mapped by the built-in
// channel module in wazero, CPU per call: loaded watched, as the daemon does
// with MAPPER_METERED=false (a channel message then runs guarded),
// unguarded and unmetered (nothing stops a runaway), and metered, as it does
// by default (unguarded, its runaways stopped by their budget).
func BenchmarkChannelModule(b *testing.B) {
	b.Run("mode=watched", func(b *testing.B) { benchChannelModule(b, channelModule(b)) })
	b.Run("mode=unguarded", func(b *testing.B) { benchChannelModule(b, unguardedModule(b)) })
	b.Run("mode=metered", func(b *testing.B) {
		ctx := context.Background()
		eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(b), Metered: true, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		defer eng.Close(ctx)
		m, err := eng.Load(ctx, "builtin:channel.wasm", testkit.BuiltModule(b, "mappers/dist/channel.wasm"), runtime.WithGuard(runtime.GuardNever))
		if err != nil {
			b.Fatal(err)
		}
		benchChannelModule(b, m)
	})
}

// unguardedModule is the channel module unmetered and without termination
// checks: nothing stops a runaway, and nothing costs anything.
func unguardedModule(tb testing.TB) pipeline.Mapper {
	tb.Helper()
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(tb), Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = eng.Close(ctx) })
	m, err := eng.Load(ctx, "builtin:channel.wasm", testkit.BuiltModule(tb, "mappers/dist/channel.wasm"), runtime.WithGuard(runtime.GuardNever))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func benchChannelModule(b *testing.B, mod pipeline.Mapper) {
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{mod}, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		typ  wire.Type
		data func(i int) string
	}{
		{"json", wire.JSON, func(i int) string {
			return `{"id":"b-` + strconv.Itoa(i) + `","type":"license.checkout","resource_type":"license","resource_id":"matlab","project_id":"p1","attributes":{"seats":1}}`
		}},
		{"string", wire.String, func(i int) string {
			return "id=b-" + strconv.Itoa(i) + " type=license.checkout resource_type=license resource_id=matlab project_id=p1 seats=1"
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bodies := make([][]byte, 1024)
			for i := range bodies {
				pub := wire.Publish{Type: tc.typ, Tag: []byte("usage.license"), Data: []byte(tc.data(i))}
				bodies[i], _, _ = appendEnvelope(nil, &pub, time.Now().UnixNano())
			}
			msg := func(i int) pipeline.Message {
				return pipeline.Message{Body: bodies[i%len(bodies)], Exchange: Exchange, RoutingKey: "usage.license", DeriveID: true}
			}
			for i := range 200 { // instances warm
				p.Process(context.Background(), msg(i))
			}
			b.ResetTimer()
			c0 := testkit.CPUTime()
			for i := range b.N {
				if r := p.Process(context.Background(), msg(i)); r.Outcome != pipeline.Mapped {
					b.Fatal(r)
				}
			}
			testkit.ReportCPU(b, c0)
		})
	}
}
