package broker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// goMapper is a small mapper written in Go for the consumer's tests: it turns
// a notification into an event whose event_id is the oslo message_id, so the
// tests can follow every notification into the outbox. The real pipeline
// (envelope, size bounds, versioned and unclaimed types, counters) runs
// around it. fail makes it fail like a trapping module.
type goMapper struct {
	name  string
	types []string
	fail  bool
}

var _ pipeline.Mapper = (*goMapper)(nil)

func (m *goMapper) ID() string { return m.name + "@1.0.0" }

func (m *goMapper) Manifest() runtime.Manifest {
	return runtime.Manifest{Name: m.name, Version: "1.0.0", EventTypes: m.types}
}

func (m *goMapper) Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error) {
	if m.fail {
		return runtime.Result{}, &runtime.MapError{Reason: "trap", Module: m.ID(), Err: errors.New("wasm trap: unreachable")}
	}
	str := func(path string) string {
		k, s, e := in.Lookup(path)
		if k != jsonindex.String {
			return ""
		}
		out, err := jsonindex.AppendUnquote(nil, in.Bytes()[s:e])
		if err != nil {
			return ""
		}
		return string(out)
	}
	ev, err := json.Marshal(map[string]any{
		"event_id":   str("message_id"),
		"event_type": str("event_type"),
		"timestamp":  str("timestamp"),
		"source": map[string]string{
			"exchange": src.Exchange, "routing_key": src.RoutingKey,
			"publisher_id": str("publisher_id"), "mapper": m.ID(),
		},
	})
	if err != nil {
		return runtime.Result{}, err
	}
	return runtime.Result{Events: [][]byte{ev}}, nil
}

// newTestProcessor is the real pipeline with the Go mappers: compute.*,
// volume.*, image.* and test.* are mapped, test.fail fails, the rest is
// unclaimed.
func newTestProcessor(t testing.TB) input.Processor {
	r := pipeline.Chain{
		&goMapper{name: "testmap", types: []string{"compute.*", "volume.*", "image.*", "test.*"}},
		&goMapper{name: "failmap", types: []string{"test.fail"}, fail: true},
	}
	p, err := pipeline.New(pipeline.Options{Router: r, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
