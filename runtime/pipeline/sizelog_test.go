package pipeline_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// sampledBound is how many lines a burst sampler of 20 a second may let
// through in elapsed: 20 for each second begun, plus the one the calls started
// in.
func sampledBound(elapsed time.Duration) int {
	return 20 * (int(math.Ceil(elapsed.Seconds())) + 1)
}

// TestOversizedBodiesAndEventsAreLoggedSampled holds seed 000's size case:
// a body over 1 MiB and an event over the event bound are each logged with
// the exchange, the routing key and the size, sampled, while the counters
// count every one.
func TestOversizedBodiesAndEventsAreLoggedSampled(t *testing.T) {
	e := engine(t)
	nova := module(t, e, "mappers/dist/nova.wasm")
	var logs testkit.SyncBuffer
	reg := prometheus.NewRegistry()
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{nova}, Registerer: reg,
		Logger: zerolog.New(&logs), MaxEventBytes: 200})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Bodies over 1 MiB, a thousand of them.
	huge := append([]byte(`{"event_type":"compute.instance.exists","payload":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	huge = append(huge, `"}`...)
	const n = 1000
	start := time.Now()
	for i := 0; i < n; i++ {
		r := p.Process(ctx, pipeline.Message{Body: huge, Exchange: "nova", RoutingKey: "notifications.info"})
		if r.Outcome != pipeline.Unparseable || r.Reason != pipeline.ReasonBodyTooLarge {
			t.Fatalf("got %v %q", r.Outcome, r.Reason)
		}
	}
	elapsed := time.Since(start)
	if got := testkit.Metric(t, reg, "tally_collector_unparseable_total", pipeline.ReasonBodyTooLarge); got != n {
		t.Fatalf("unparseable_total{body_too_large} = %v, want %d", got, n)
	}
	lines := logs.JSONLines(t, "unparseable message, skipped")
	if len(lines) == 0 || len(lines) > sampledBound(elapsed) {
		t.Fatalf("%d lines for %d bodies in %v, want 1 to %d", len(lines), n, elapsed, sampledBound(elapsed))
	}
	l := lines[0]
	if l["exchange"] != "nova" || l["routing_key"] != "notifications.info" || l["size"] != float64(len(huge)) ||
		l["reason"] != pipeline.ReasonBodyTooLarge || l["level"] != "warn" {
		t.Fatalf("log line %v", l)
	}
	if strings.Contains(logs.String(), "xxxxxxxx") {
		t.Fatal("the body's content was logged")
	}

	// Events over the bound: a module's and a canonical event passed through.
	// The sampler is the pipeline's one warning sampler: the bodies may have
	// spent this second's burst, so events go on until one line is let through.
	exists := body(t, "v2_nova_exists.body")
	sent := 0
	mapOne := func() {
		r := p.Process(ctx, pipeline.Message{Body: exists, Exchange: "nova", RoutingKey: "notifications.info"})
		if r.Outcome != pipeline.Skipped || r.Reason != pipeline.ReasonEventTooLarge {
			t.Fatalf("got %v %q", r.Outcome, r.Reason)
		}
		sent++
	}
	for i := 0; i < n; i++ {
		mapOne()
	}
	testkit.WaitUntil(t, 5*time.Second, "the sampler to let an event's line through", func() (bool, string) {
		if len(logs.JSONLines(t, "mapped event over the size bound, skipped")) > 0 {
			return true, ""
		}
		mapOne()
		return false, ""
	})
	elapsed = time.Since(start)
	if got := testkit.Metric(t, reg, "tally_collector_skipped_total", pipeline.ReasonEventTooLarge); got != float64(sent) {
		t.Fatalf("skipped_total{event_too_large} = %v, want %d", got, sent)
	}
	lines = logs.JSONLines(t, "mapped event over the size bound, skipped")
	all := len(lines) + len(logs.JSONLines(t, "unparseable message, skipped"))
	if all > sampledBound(elapsed) {
		t.Fatalf("%d lines for %d bodies and %d events in %v, want at most %d", all, n, sent, elapsed, sampledBound(elapsed))
	}
	l = lines[0]
	if l["exchange"] != "nova" || l["routing_key"] != "notifications.info" || l["size"] != float64(len(exists)) ||
		l["event_bytes"] == nil || l["event_bytes"].(float64) <= 200 || l["max_event_bytes"] != 200.0 ||
		l["event_type"] != "compute.instance.exists" || l["level"] != "warn" {
		t.Fatalf("log line %v", l)
	}

	before := len(lines)
	canon := []byte(`{"event_type":"compute.instance.exists","timestamp":"2024-05-01T12:00:00Z","service":"nova",` +
		`"resource_type":"instance","resource_id":"vm-big","project_id":"p1","action":"exists",` +
		`"attributes":{"flavor_name":"a-flavor-name-long-enough-to-pass-two-hundred-bytes"}}`)
	testkit.WaitUntil(t, 5*time.Second, "the sampler to let a line through", func() (bool, string) {
		r := p.Process(ctx, pipeline.Message{Body: canon, Exchange: "plog", RoutingKey: "udp://x", Canonical: true, DeriveID: true})
		if r.Outcome != pipeline.Skipped || r.Reason != pipeline.ReasonEventTooLarge {
			t.Fatalf("canonical: got %v %q: %v", r.Outcome, r.Reason, r.Err)
		}
		return len(logs.JSONLines(t, "mapped event over the size bound, skipped")) > before, ""
	})
	lines = logs.JSONLines(t, "mapped event over the size bound, skipped")
	if l := lines[len(lines)-1]; l["exchange"] != "plog" || l["routing_key"] != "udp://x" || l["size"] != float64(len(canon)) ||
		l["module"] != "canonical" || l["event_bytes"].(float64) <= 200 {
		t.Fatalf("canonical log line %v", l)
	}
}
