package pipeline_test

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// BenchmarkProcess measures the whole shared path for one AMQP body: envelope
// unwrap, index, route, nova mapping in wazero, output validation and copy.
func BenchmarkProcess(b *testing.B) {
	e := engine(b)
	nova := module(b, e, "mappers/dist/nova.wasm")
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{nova}, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	msg := pipeline.Message{Body: body(b, "v2_nova_exists.body"), Exchange: "nova", RoutingKey: "notifications.info"}
	ctx := context.Background()
	if r := p.Process(ctx, msg); r.Outcome != pipeline.Mapped {
		b.Fatalf("outcome %v %q", r.Outcome, r.Reason)
	}
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(int64(len(msg.Body)))
		b.ReportAllocs()
		for b.Loop() {
			p.Process(ctx, msg)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(len(msg.Body)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p.Process(ctx, msg)
			}
		})
	})
}
