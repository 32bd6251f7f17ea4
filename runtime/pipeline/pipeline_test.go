package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// module loads a module built by make, relative to the repository root.
func module(t testing.TB, e *runtime.Engine, path string) *runtime.Module {
	t.Helper()
	m, err := e.Load(context.Background(), path, testkit.BuiltModule(t, path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func engine(t testing.TB) *runtime.Engine {
	t.Helper()
	e, err := runtime.NewEngine(context.Background(), runtime.Config{CacheDir: testkit.CacheDir(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// envelopeDir holds real AMQP bodies with the events the pipeline must make of
// them (mappers/testdata/envelope/README.md).
var envelopeDir = filepath.Join("..", "..", "mappers", "testdata", "envelope")

func body(t testing.TB, name string) []byte {
	t.Helper()
	dir := "testdata"
	if strings.HasSuffix(name, "_001.body") {
		dir = envelopeDir
	}
	return testkit.ReadFile(t, filepath.Join(dir, name))
}

type fixture struct {
	p    *pipeline.Pipeline
	reg  *prometheus.Registry
	nova *runtime.Module
	trap *runtime.Module
}

func newFixture(t *testing.T, opts pipeline.Options) *fixture {
	t.Helper()
	e := engine(t)
	f := &fixture{reg: prometheus.NewRegistry()}
	f.nova = module(t, e, "mappers/dist/nova.wasm")
	f.trap = module(t, e, "runtime/testdata/trap.wasm")
	opts.Router = pipeline.Chain{f.nova}
	opts.Registerer = f.reg
	opts.Logger = zerolog.Nop()
	p, err := pipeline.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

func decode(t *testing.T, ev []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev, &m); err != nil {
		t.Fatalf("event is not JSON: %v: %s", err, ev)
	}
	return m
}

func TestEnvelopeAndBareBodiesMapAlike(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	ctx := context.Background()
	for _, tc := range []struct{ file, id string }{
		{"v2_nova_001.body", "46988e95-ecb1-4845-a3bc-70fd35c80217"},
		{"v1_bare_001.body", ""},
		{"v2_unicode.body", ""},
	} {
		r := f.p.Process(ctx, pipeline.Message{Body: body(t, tc.file), Exchange: "nova", RoutingKey: "notifications.info"})
		if r.Outcome != pipeline.Mapped || len(r.Events) != 1 {
			t.Fatalf("%s: outcome %v reason %q events %d err %v", tc.file, r.Outcome, r.Reason, len(r.Events), r.Err)
		}
		ev := decode(t, r.Events[0])
		if ev["event_type"] != "compute.instance.create.end" || r.EventType != "compute.instance.create.end" {
			t.Errorf("%s: event_type %v / %q", tc.file, ev["event_type"], r.EventType)
		}
		if tc.id != "" && ev["event_id"] != tc.id {
			t.Errorf("%s: event_id %v, want %s", tc.file, ev["event_id"], tc.id)
		}
		src, _ := ev["source"].(map[string]any)
		if src["exchange"] != "nova" || src["routing_key"] != "notifications.info" || src["mapper"] != f.nova.ID() {
			t.Errorf("%s: source %v", tc.file, src)
		}
		if r.Module != f.nova.ID() {
			t.Errorf("%s: module %q", tc.file, r.Module)
		}
	}
	if got := testkit.Metric(t, f.reg, "tally_collector_mapped_total"); got != 3 {
		t.Errorf("mapped_total = %v, want 3", got)
	}
}

// TestEnvelopeCases maps each AMQP body of mappers/testdata/envelope with the
// exchange and routing key of its delivery and compares the events, source
// included, with the expected document.
func TestEnvelopeCases(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	bodies, _ := filepath.Glob(filepath.Join(envelopeDir, "*.body"))
	if len(bodies) < 2 {
		t.Fatalf("envelope cases missing in %s", envelopeDir)
	}
	for _, path := range bodies {
		stem := strings.TrimSuffix(path, ".body")
		var meta struct {
			Exchange   string `json:"exchange"`
			RoutingKey string `json:"routing_key"`
		}
		if err := json.Unmarshal(testkit.ReadFile(t, stem+".meta.json"), &meta); err != nil {
			t.Fatal(err)
		}
		r := f.p.Process(context.Background(), pipeline.Message{Body: testkit.ReadFile(t, path), Exchange: meta.Exchange, RoutingKey: meta.RoutingKey})
		if r.Outcome != pipeline.Mapped {
			t.Fatalf("%s: %v %q %v", path, r.Outcome, r.Reason, r.Err)
		}
		var want struct{ Events []any }
		if err := json.Unmarshal(testkit.ReadFile(t, stem+".events.json"), &want); err != nil {
			t.Fatal(err)
		}
		var got []any
		for _, ev := range r.Events {
			got = append(got, decode(t, ev))
		}
		// The expected source names the built-in nova module's version.
		for _, w := range want.Events {
			w.(map[string]any)["source"].(map[string]any)["mapper"] = f.nova.ID()
		}
		if !reflect.DeepEqual(got, want.Events) {
			gb, _ := json.MarshalIndent(got, "", "  ")
			t.Errorf("%s: events differ from %s.events.json; got\n%s", path, stem, gb)
		}
	}
}

func TestUnicodeSurvivesTheEnvelope(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	r := f.p.Process(context.Background(), pipeline.Message{Body: body(t, "v2_unicode.body")})
	if r.Outcome != pipeline.Mapped {
		t.Fatalf("outcome %v %q", r.Outcome, r.Reason)
	}
	inner := struct {
		Message string `json:"oslo.message"`
	}{}
	if err := json.Unmarshal(body(t, "v2_unicode.body"), &inner); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		MessageID string `json:"message_id"`
	}
	if err := json.Unmarshal([]byte(inner.Message), &msg); err != nil {
		t.Fatal(err)
	}
	if ev := decode(t, r.Events[0]); ev["event_id"] != msg.MessageID {
		t.Errorf("event_id %v, want %s", ev["event_id"], msg.MessageID)
	}
}

// TestVersionedMapped: a versioned nova notification of a type the nova
// module claims is routed to it like any other.
func TestVersionedMapped(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	r := f.p.Process(context.Background(), pipeline.Message{Body: body(t, "versioned.json"), Exchange: "nova", RoutingKey: "versioned_notifications.info"})
	if r.Outcome != pipeline.Mapped || len(r.Events) != 1 {
		t.Fatalf("got %v %q (%d events), want one event", r.Outcome, r.Reason, len(r.Events))
	}
	if ev := decode(t, r.Events[0]); ev["event_type"] != "instance.create.end" || ev["resource_id"] != "c03c0bf9-f46e-4e4f-93f1-817568567ee2" {
		t.Errorf("event %v", ev)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	ctx := context.Background()
	huge := append([]byte(`{"event_type":"compute.instance.exists","payload":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	huge = append(huge, `"}`...)
	for _, tc := range []struct {
		name    string
		body    []byte
		outcome pipeline.Outcome
		reason  string
	}{
		{"gzip", body(t, "v2_gzip.body"), pipeline.Unparseable, pipeline.ReasonNotJSON},
		{"msgpack-ish", []byte{0x85, 0xa7, 'p', 'a', 'y'}, pipeline.Unparseable, pipeline.ReasonNotJSON},
		{"envelope with garbage inside", []byte(`{"oslo.version":"2.0","oslo.message":"{not json"}`), pipeline.Unparseable, pipeline.ReasonNotJSON},
		{"envelope with a non-string message", []byte(`{"oslo.version":"2.0","oslo.message":{}}`), pipeline.Unparseable, pipeline.ReasonNotJSON},
		{"over 1 MiB", huge, pipeline.Unparseable, pipeline.ReasonBodyTooLarge},
		{"no event type", []byte(`{"message_id":"x","payload":{}}`), pipeline.Skipped, pipeline.ReasonNoEventType},
		{"unclaimed", []byte(`{"event_type":"compute.metrics.update","payload":{}}`), pipeline.Skipped, pipeline.ReasonUnclaimed},
		// A versioned payload under a type no module claims (nova's own
		// instance.* versioned types are mapped: TestVersionedMapped).
		{"versioned", bytes.Replace(body(t, "versioned.json"), []byte(`"instance.create.end"`), []byte(`"aggregate.create.end"`), 1),
			pipeline.Skipped, pipeline.ReasonVersioned},
	} {
		r := f.p.Process(ctx, pipeline.Message{Body: tc.body, Exchange: "nova", RoutingKey: "notifications.info"})
		if r.Outcome != tc.outcome || r.Reason != tc.reason || len(r.Events) != 0 {
			t.Errorf("%s: got %v %q (%d events), want %v %q", tc.name, r.Outcome, r.Reason, len(r.Events), tc.outcome, tc.reason)
		}
	}
	if got := testkit.Metric(t, f.reg, "tally_collector_unparseable_total", pipeline.ReasonNotJSON); got != 4 {
		t.Errorf(`unparseable_total{reason="not_json"} = %v, want 4`, got)
	}
	if got := testkit.Metric(t, f.reg, "tally_collector_unparseable_total", pipeline.ReasonBodyTooLarge); got != 1 {
		t.Errorf(`unparseable_total{reason="body_too_large"} = %v, want 1`, got)
	}
	for reason, want := range map[string]float64{
		pipeline.ReasonNoEventType: 1, pipeline.ReasonUnclaimed: 1, pipeline.ReasonVersioned: 1,
	} {
		if got := testkit.Metric(t, f.reg, "tally_collector_skipped_total", reason); got != want {
			t.Errorf("skipped_total{%s} = %v, want %v", reason, got, want)
		}
	}
}

func TestEventOverTheBoundIsSkipped(t *testing.T) {
	f := newFixture(t, pipeline.Options{MaxEventBytes: 200})
	r := f.p.Process(context.Background(), pipeline.Message{Body: body(t, "v2_nova_exists.body")})
	if r.Outcome != pipeline.Skipped || r.Reason != pipeline.ReasonEventTooLarge {
		t.Fatalf("got %v %q, want skipped event_too_large", r.Outcome, r.Reason)
	}
	if got := testkit.Metric(t, f.reg, "tally_collector_skipped_total", pipeline.ReasonEventTooLarge); got != 1 {
		t.Errorf("skipped_total{event_too_large} = %v, want 1", got)
	}
}

func TestMapperFailureIsReportedForDeadLettering(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	reg := prometheus.NewRegistry()
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{f.trap}, Logger: zerolog.Nop(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Process(context.Background(), pipeline.Message{Body: body(t, "v2_nova_001.body")})
	if r.Outcome != pipeline.Failed || r.Reason != string(runtime.ReasonTrap) || r.Module != f.trap.ID() {
		t.Fatalf("got %v %q module %q", r.Outcome, r.Reason, r.Module)
	}
	var me *runtime.MapError
	if !errors.As(r.Err, &me) || me.Reason != runtime.ReasonTrap {
		t.Fatalf("err %v is not a trap MapError", r.Err)
	}
	if got := testkit.Metric(t, reg, "tally_collector_mapper_failures_total", "trap"); got != 1 {
		t.Errorf("mapper_failures_total{trap} = %v, want 1", got)
	}
	// The pipeline carries on: the next message maps.
	r = f.p.Process(context.Background(), pipeline.Message{Body: body(t, "v2_nova_001.body")})
	if r.Outcome != pipeline.Mapped {
		t.Fatalf("after a failure: %v %q", r.Outcome, r.Reason)
	}
}

func TestChainCanonicalAndDerivedIDs(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	ctx := context.Background()
	canonical := []byte(`{"timestamp":"2024-05-01T12:00:00Z","event_type":"backup.done","service":"backup","resource_type":"backup","resource_id":"b1","project_id":"p1","action":"done","attributes":{},"source":{"mapper":"forged"}}`)
	msg := pipeline.Message{Body: canonical, Exchange: "plog", RoutingKey: "udp://127.0.0.1:23456", Modules: []pipeline.Mapper{f.nova}, Canonical: true, DeriveID: true}
	r1 := f.p.Process(ctx, msg)
	r2 := f.p.Process(ctx, msg)
	if r1.Outcome != pipeline.Mapped || len(r1.Events) != 1 {
		t.Fatalf("canonical: %v %q", r1.Outcome, r1.Reason)
	}
	ev := decode(t, r1.Events[0])
	id, _ := ev["event_id"].(string)
	if len(id) != 32 || id != decode(t, r2.Events[0])["event_id"] {
		t.Errorf("derived ids %q / %v: want 32 hex digits, the same for the same body", id, decode(t, r2.Events[0])["event_id"])
	}
	if src, _ := ev["source"].(map[string]any); src["mapper"] != "canonical" || src["exchange"] != "plog" {
		t.Errorf("source %v: the collector must set it", ev["source"])
	}
	other := f.p.Process(ctx, pipeline.Message{Body: bytes.Replace(canonical, []byte("b1"), []byte("b2"), 1), Canonical: true, DeriveID: true})
	if decode(t, other.Events[0])["event_id"] == id {
		t.Errorf("different bodies got the same derived id")
	}
	// Without Canonical the same document is not a notification a module claims.
	if r := f.p.Process(ctx, pipeline.Message{Body: canonical}); r.Outcome != pipeline.Skipped {
		t.Errorf("canonical without the switch: %v", r.Outcome)
	}
	// A chain restricts routing: a nova notification on a chain without nova is unclaimed.
	r := f.p.Process(ctx, pipeline.Message{Body: body(t, "v2_nova_001.body"), Modules: []pipeline.Mapper{f.trap}})
	if r.Outcome != pipeline.Failed {
		t.Errorf("chain [trap]: %v, want the trap module to be used", r.Outcome)
	}
	// Bytes that are not JSON go to the chain's first module exactly as they came.
	r = f.p.Process(ctx, pipeline.Message{Body: []byte("cpu=3 host=a\n"), Modules: []pipeline.Mapper{f.trap}})
	if r.Outcome != pipeline.Failed || r.Reason != "trap" {
		t.Errorf("raw bytes on a chain: %v %q", r.Outcome, r.Reason)
	}
	if r := f.p.Process(ctx, pipeline.Message{Body: []byte("cpu=3")}); r.Outcome != pipeline.Unparseable {
		t.Errorf("raw bytes without a chain: %v", r.Outcome)
	}
}

// TestMetricsRegisteredOnce: a second pipeline on the same registry is an
// error naming the metric; its counters are not shared.
func TestMetricsRegisteredOnce(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	_, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{f.nova}, Logger: zerolog.Nop(), Registerer: f.reg})
	if err == nil || !strings.Contains(err.Error(), "tally_collector_mapped_total") {
		t.Fatalf("second pipeline: %v", err)
	}
}

// The event type is routed, excluded and reported as a JSON reader decodes
// it, and the event carries the decoded form.
func TestEscapedEventTypeRoutedDecoded(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	ctx := context.Background()
	const tmpl = `{"message_id":"esc-1","event_type":%q,"timestamp":"2024-05-01 12:00:00","_context_project_id":"p1","payload":{"instance_id":"i-1","tenant_id":"p1","vcpus":-1,"memory_mb":2048}}`
	raw := func(et string) []byte { return []byte(strings.Replace(fmt.Sprintf(tmpl, "ET"), `"ET"`, `"`+et+`"`, 1)) }
	r := f.p.Process(ctx, pipeline.Message{Body: raw(`compute\u002einstance.exists`)})
	if r.Outcome != pipeline.Mapped || r.EventType != "compute.instance.exists" || len(r.Events) != 1 {
		t.Fatalf("escaped type: %v %q %q (%v)", r.Outcome, r.Reason, r.EventType, r.Err)
	}
	ev := decode(t, r.Events[0])
	if ev["event_type"] != "compute.instance.exists" || ev["action"] != "exists" {
		t.Errorf("event %v", ev)
	}
	if a := ev["attributes"].(map[string]any); a["vcpus"] != nil || a["memory_mb"] != 2048.0 {
		t.Errorf("attributes %v: a negative vcpus must be left out", a)
	}
	// nova's manifest excludes compute.instance.*.samples: escaped or not.
	r = f.p.Process(ctx, pipeline.Message{Body: raw(`compute.instance.delete.sample\u0073`)})
	if r.Outcome != pipeline.Skipped || r.Reason != pipeline.ReasonUnclaimed || r.EventType != "compute.instance.delete.samples" {
		t.Errorf("escaped excluded type: %v %q %q", r.Outcome, r.Reason, r.EventType)
	}
}

// A canonical event a plog client sends is held to the event contract: what
// breaks it in an attribute is left out and counted, a missing required
// member makes a dead letter.
func TestCanonicalEventContract(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	ctx := context.Background()
	const good = `{"timestamp":"2024-05-01T12:00:00Z","event_type":"backup.done","service":"backup","resource_type":"backup","resource_id":"b1","project_id":"p1","action":"done","attributes":{"size_gb":-5,"kwh":1e999,"note":"ok"}}`
	r := f.p.Process(ctx, pipeline.Message{Body: []byte(good), Exchange: "plog", Canonical: true, DeriveID: true})
	if r.Outcome != pipeline.Mapped || len(r.Events) != 1 {
		t.Fatalf("%v %q %v", r.Outcome, r.Reason, r.Err)
	}
	if a := decode(t, r.Events[0])["attributes"].(map[string]any); len(a) != 1 || a["note"] != "ok" {
		t.Errorf("attributes %v, want only note", a)
	}
	for reason, want := range map[string]float64{"negative": 1, "not_finite": 1, "null": 0} {
		if got := testkit.Metric(t, f.reg, "tally_collector_event_members_dropped_total", reason); got != want {
			t.Errorf("dropped{%s} = %v, want %v", reason, got, want)
		}
	}
	for _, bad := range []string{
		strings.Replace(good, `"timestamp":"2024-05-01T12:00:00Z",`, "", 1),
		strings.Replace(good, `"project_id":"p1"`, `"project_id":" "`, 1),
		strings.Replace(good, `"project_id":"p1"`, `"project_id":"p\u0000"`, 1),
	} {
		r := f.p.Process(ctx, pipeline.Message{Body: []byte(bad), Exchange: "plog", Canonical: true, DeriveID: true})
		if r.Outcome != pipeline.Failed || r.Reason != "invalid_event" || !errors.Is(r.Err, runtime.ErrInvalidEvent) {
			t.Errorf("%s: %v %q %v, want a dead letter (invalid_event)", bad, r.Outcome, r.Reason, r.Err)
		}
	}
}
