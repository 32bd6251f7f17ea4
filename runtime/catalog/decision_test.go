package catalog_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// replica is one collector of a deployment: a drop-in directory and an
// outbox of its own, a name, and the decisions its operator took (handed).
func replica(t *testing.T, name string) *collector {
	k := newCollector(t, nil)
	k.replica = name
	k.reg = prometheus.NewRegistry()
	k.onDecision = func(_ context.Context, d catalog.Decision) error {
		k.handed = append(k.handed, d)
		return nil
	}
	return k
}

// serving starts k with echo 1.0.0 alone in its directory.
func serving(t *testing.T, k *collector) *catalog.Catalog {
	t.Helper()
	drop(t, k.dir, "echo.wasm", "echo_v1")
	return k.start()
}

// shadowing starts k with echo 1.0.0 in service and echo 2.0.0 in shadow.
func shadowing(t *testing.T, k *collector) *catalog.Catalog {
	t.Helper()
	c := serving(t, k)
	drop(t, k.dir, "echo-2.wasm", "echo_v2")
	reload(t, c)
	if m := mustModule(t, c, "echo"); m.State != catalog.StateMigrating {
		t.Fatalf("echo@2.0.0 should shadow echo@1.0.0: %+v", m)
	}
	return c
}

// decided has k's operator promote or abort echo and returns the outcome and
// the decision handed over for the other replicas.
func decided(t *testing.T, k *collector, c *catalog.Catalog, action string) (catalog.MigrationOutcome, catalog.Decision) {
	t.Helper()
	var out catalog.MigrationOutcome
	var err error
	if action == catalog.DecisionPromote {
		out, err = c.Promote(context.Background(), "echo")
	} else {
		out, err = c.Abort(context.Background(), "echo")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(k.handed) != 1 {
		t.Fatalf("OnDecision called %d times", len(k.handed))
	}
	return out, k.handed[0]
}

// decidedBetween starts replicas named nameA and nameB, each with echo 2.0.0
// in shadow of echo 1.0.0, and has the operator of the first promote or
// abort echo; it returns both and the decision handed over for the second.
func decidedBetween(t *testing.T, nameA, nameB, action string) (a, b *collector, d catalog.Decision) {
	t.Helper()
	a, b = replica(t, nameA), replica(t, nameB)
	ca := shadowing(t, a)
	shadowing(t, b)
	_, d = decided(t, a, ca, action)
	return a, b, d
}

func shaOf(t *testing.T, module string) string {
	sum := sha256.Sum256(wasm(t, module))
	return hex.EncodeToString(sum[:])
}

func apply(t *testing.T, c *catalog.Catalog, d catalog.Decision) catalog.DecisionResult {
	t.Helper()
	r, err := c.ApplyDecision(context.Background(), d)
	if err != nil {
		t.Fatalf("apply %+v: %v", d, err)
	}
	return r
}

// deferring starts k with echo 1.0.0 alone and hands it d, which it must
// defer: the candidate's file has not reached k's directory.
func deferring(t *testing.T, k *collector, d catalog.Decision) *catalog.Catalog {
	t.Helper()
	c := serving(t, k)
	if r := apply(t, c, d); r.Result != catalog.DecisionDeferred {
		t.Fatalf("result %+v", r)
	}
	return c
}

func TestDecisionHandedOverAfterAPromote(t *testing.T) {
	a := replica(t, "collector-0")
	ca := shadowing(t, a)
	out, d := decided(t, a, ca, catalog.DecisionPromote)
	if out.Result != "promoted" || out.Replicas != catalog.ReplicasShared || out.ReplicasError != "" {
		t.Errorf("outcome %+v", out)
	}
	if d.Action != catalog.DecisionPromote || d.Module != "echo" || d.Candidate != "echo@2.0.0" ||
		d.SHA256 != shaOf(t, "echo_v2") || d.By != "collector-0" || time.Since(d.At) > time.Minute {
		t.Errorf("decision %+v", d)
	}
}

func TestDecisionNotHandedOverIsReportedPending(t *testing.T) {
	a := replica(t, "collector-0")
	a.onDecision = func(context.Context, catalog.Decision) error { return errors.New("broker unreachable") }
	c := shadowing(t, a)
	out, err := c.Abort(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	// The decision holds here all the same.
	if out.Result != "aborted" || out.Replicas != catalog.ReplicasPending || !strings.Contains(out.ReplicasError, "broker unreachable") {
		t.Errorf("outcome %+v", out)
	}
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@1.0.0" {
		t.Errorf("%+v", m)
	}
}

func TestApplyDecisionMatchingCandidate(t *testing.T) {
	_, b, d := decidedBetween(t, "collector-0", "collector-1", catalog.DecisionPromote)
	cb := b.c

	r := apply(t, cb, d)
	if r.Result != catalog.DecisionApplied {
		t.Fatalf("result %+v", r)
	}
	m := mustModule(t, cb, "echo")
	if m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" || m.Last == nil ||
		m.Last.Result != "promoted" || !strings.Contains(m.Last.Reason, "collector-0") {
		t.Fatalf("after the decision of collector-0: %+v %+v", m, m.Last)
	}
	if ev := mapOne(t, newPipeline(cb), "test.a", "m1"); ev.Source.Mapper != "echo@2.0.0" {
		t.Errorf("mapped by %s", ev.Source.Mapper)
	}
	if v := testkit.Metric(t, b.reg, "tally_collector_mapper_decisions_received_total", "promote", "applied"); v != 1 {
		t.Errorf("applied counted %v times", v)
	}

	// Recorded: collector-1 keeps the promoted version across a restart.
	b.stop()
	cb = b.start()
	if m := mustModule(t, cb, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" {
		t.Fatalf("after a restart: %+v", m)
	}
}

func TestApplyDecisionAlreadyInEffectOrOwn(t *testing.T) {
	a, b, d := decidedBetween(t, "collector-0", "collector-1", catalog.DecisionPromote)
	ca, cb := a.c, b.c
	gen := ca.Generation()

	// Its own decision, come back through the broker.
	if r := apply(t, ca, d); r.Result != catalog.DecisionIgnored || !strings.Contains(r.Reason, "own") {
		t.Errorf("own decision: %+v", r)
	}
	apply(t, cb, d)
	// The same decision delivered twice.
	if r := apply(t, cb, d); r.Result != catalog.DecisionIgnored || r.Reason != "already in effect" {
		t.Errorf("second delivery: %+v", r)
	}
	if ca.Generation() != gen {
		t.Error("an ignored decision published a new snapshot")
	}
	if v := testkit.Metric(t, b.reg, "tally_collector_mapper_decisions_received_total", "promote", "ignored"); v != 1 {
		t.Errorf("ignored counted %v times", v)
	}

	// An abort of a candidate already parked here is in effect too.
	_, b2, ab := decidedBetween(t, "collector-2", "collector-3", catalog.DecisionAbort)
	c3 := b2.c
	if r := apply(t, c3, ab); r.Result != catalog.DecisionApplied {
		t.Fatalf("abort: %+v", r)
	}
	f, ok := fileState(c3.Status(), b2.dir, "echo-2.wasm")
	if !ok || f.State != "parked" || !strings.Contains(f.Reason, "collector-2") {
		t.Errorf("the aborted candidate should be parked with the replica named: %+v", c3.Status().Files)
	}
	if r := apply(t, c3, ab); r.Result != catalog.DecisionIgnored || r.Reason != "already in effect" {
		t.Errorf("second abort: %+v", r)
	}
}

func TestApplyDecisionContradictingThisReplicaIsIgnored(t *testing.T) {
	a, b, promote := decidedBetween(t, "collector-0", "collector-1", catalog.DecisionPromote)
	ca, cb := a.c, b.c
	abort := promote
	abort.Action, abort.At = catalog.DecisionAbort, promote.At.Add(time.Second)

	// collector-1's operator aborted echo@2.0.0 meanwhile: a promote does
	// not revive the parked file.
	if _, err := cb.Abort(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	if r := apply(t, cb, promote); r.Result != catalog.DecisionIgnored || !strings.Contains(r.Reason, "parked") {
		t.Errorf("promote of a parked candidate: %+v", r)
	}
	// And on collector-0, where it is in service, an abort does not take
	// the promotion back.
	abort.By = "collector-1"
	if r := apply(t, ca, abort); r.Result != catalog.DecisionIgnored || !strings.Contains(r.Reason, "in service") {
		t.Errorf("abort of the version in service: %+v", r)
	}
	if m := mustModule(t, ca, "echo"); m.Active.ID != "echo@2.0.0" {
		t.Errorf("%+v", m)
	}
	if len(cb.Status().Deferred)+len(ca.Status().Deferred) != 0 {
		t.Error("an ignored decision was kept")
	}
}

func TestApplyDecisionUnknownCandidateDeferred(t *testing.T) {
	a, b := replica(t, "collector-0"), replica(t, "collector-1")
	ca := shadowing(t, a)
	_, d := decided(t, a, ca, catalog.DecisionPromote)

	// collector-1 has only echo@1.0.0: the file of 2.0.0 has not reached
	// its volume yet.
	cb := deferring(t, b, d)
	st := cb.Status()
	if len(st.Deferred) != 1 || st.Deferred[0].SHA256 != d.SHA256 {
		t.Fatalf("deferred %+v", st.Deferred)
	}
	var text strings.Builder
	_ = st.WriteText(&text)
	if !strings.Contains(text.String(), "deferred: promote echo@2.0.0") {
		t.Errorf("the mappers view does not show the deferred decision:\n%s", text.String())
	}
	if v := testkit.Metric(t, b.reg, "tally_collector_mapper_decisions_deferred"); v != 1 {
		t.Errorf("deferred gauge %v", v)
	}

	// Kept across a restart.
	b.stop()
	cb = b.start()
	if len(cb.Status().Deferred) != 1 {
		t.Fatalf("the deferred decision was lost in the restart")
	}
	// The file arrives: the candidate is promoted as it appears, without
	// a migration in between.
	drop(t, b.dir, "echo-2.wasm", "echo_v2")
	r := reload(t, cb)
	m := mustModule(t, cb, "echo")
	if m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" || m.Last == nil || !strings.Contains(m.Last.Reason, "collector-0") {
		t.Fatalf("after the file arrived: %+v (reload %+v)", m, r)
	}
	if !strings.Contains(strings.Join(r.Loaded, "; "), "deferred decision applied") {
		t.Errorf("the reload does not report the decision: %v", r.Loaded)
	}
	if len(cb.Status().Deferred) != 0 {
		t.Error("the applied decision is still deferred")
	}
	if v := testkit.Metric(t, b.reg, "tally_collector_mapper_decisions_received_total", "promote", "applied"); v != 1 {
		t.Errorf("applied counted %v times", v)
	}
	b.stop()
	cb = b.start()
	if m := mustModule(t, cb, "echo"); m.Active.ID != "echo@2.0.0" || len(cb.Status().Deferred) != 0 {
		t.Fatalf("after a restart: %+v %+v", m, cb.Status().Deferred)
	}
}

func TestDeferredAbortParksTheCandidateWhenItAppears(t *testing.T) {
	a, b := replica(t, "collector-0"), replica(t, "collector-1")
	ca := shadowing(t, a)
	_, d := decided(t, a, ca, catalog.DecisionAbort)

	cb := deferring(t, b, d)
	drop(t, b.dir, "echo-2.wasm", "echo_v2")
	reload(t, cb)
	if m := mustModule(t, cb, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@1.0.0" {
		t.Fatalf("an aborted candidate took traffic: %+v", m)
	}
	if f, ok := fileState(cb.Status(), b.dir, "echo-2.wasm"); !ok || f.State != "parked" {
		t.Errorf("the aborted candidate should be parked: %+v", cb.Status().Files)
	}
}

func TestNewerPromoteReplacesADeferredOne(t *testing.T) {
	b := replica(t, "collector-1")
	cb := serving(t, b)
	at := time.Now().UTC()
	first := catalog.Decision{Action: catalog.DecisionPromote, Module: "echo", Candidate: "echo@1.0.1",
		SHA256: shaOf(t, "echo_v1b"), By: "collector-0", At: at}
	second := catalog.Decision{Action: catalog.DecisionPromote, Module: "echo", Candidate: "echo@2.0.0",
		SHA256: shaOf(t, "echo_v2"), By: "collector-0", At: at.Add(time.Minute)}
	apply(t, cb, first)
	apply(t, cb, second)
	if st := cb.Status(); len(st.Deferred) != 1 || st.Deferred[0].Candidate != "echo@2.0.0" {
		t.Fatalf("deferred %+v", st.Deferred)
	}
	// The older version arrives: it shadows, it is not promoted.
	drop(t, b.dir, "echo-1b.wasm", "echo_v1b")
	reload(t, cb)
	if m := mustModule(t, cb, "echo"); m.State != catalog.StateMigrating || m.Active.ID != "echo@1.0.0" {
		t.Fatalf("%+v", m)
	}
}

func TestDeferredDecisionsAreBounded(t *testing.T) {
	b := replica(t, "collector-1")
	cb := serving(t, b)
	for i := range catalog.MaxDeferred + 1 {
		sum := sha256.Sum256([]byte(fmt.Sprint(i)))
		apply(t, cb, catalog.Decision{Action: catalog.DecisionAbort, Module: "echo", Candidate: fmt.Sprintf("echo@9.0.%d", i),
			SHA256: hex.EncodeToString(sum[:]), By: "collector-0", At: time.Now().UTC()})
	}
	st := cb.Status()
	if len(st.Deferred) != catalog.MaxDeferred || st.Deferred[0].Candidate != "echo@9.0.1" {
		t.Fatalf("%d deferred, the oldest %s; want %d, the first one dropped", len(st.Deferred), st.Deferred[0].Candidate, catalog.MaxDeferred)
	}
}

func TestInvalidDecisionIgnored(t *testing.T) {
	b := replica(t, "collector-1")
	cb := serving(t, b)
	for _, d := range []catalog.Decision{
		{Action: "rollback", Module: "echo", SHA256: shaOf(t, "echo_v2"), By: "x"},
		{Action: catalog.DecisionPromote, SHA256: shaOf(t, "echo_v2"), By: "x"},
		{Action: catalog.DecisionPromote, Module: "echo", SHA256: "not-a-sum", By: "x"},
	} {
		if r := apply(t, cb, d); r.Result != catalog.DecisionIgnored || !strings.Contains(r.Reason, "not a valid decision") {
			t.Errorf("%+v: %+v", d, r)
		}
	}
	if len(cb.Status().Deferred) != 0 {
		t.Error("an invalid decision was kept")
	}
}

// TestDeferredDecisionWaitsForTheDirectory: while the drop-in directory has
// not been read (a volume not mounted yet) nothing may be saved, so a
// decision that would be deferred is refused for now and offered again.
func TestDeferredDecisionWaitsForTheDirectory(t *testing.T) {
	b := replica(t, "collector-1")
	serving(t, b)
	b.stop()
	b.fileForDir()
	cb := b.start()
	d := catalog.Decision{Action: catalog.DecisionPromote, Module: "echo", Candidate: "echo@2.0.0",
		SHA256: shaOf(t, "echo_v2"), By: "collector-0", At: time.Now().UTC()}
	if _, err := cb.ApplyDecision(context.Background(), d); !errors.Is(err, catalog.ErrNotSaved) {
		t.Fatalf("err %v, want ErrNotSaved", err)
	}
}

// TestDeferredDecisionAppliedAtStartUp: the file of a deferred promote
// arrives while the collector is stopped; the start places it as a
// candidate and promotes it at once.
func TestDeferredDecisionAppliedAtStartUp(t *testing.T) {
	b := replica(t, "collector-1")
	cb := serving(t, b)
	apply(t, cb, catalog.Decision{Action: catalog.DecisionPromote, Module: "echo", Candidate: "echo@2.0.0",
		SHA256: shaOf(t, "echo_v2"), By: "collector-0", At: time.Now().UTC()})
	b.stop()
	drop(t, b.dir, "echo-2.wasm", "echo_v2")
	cb = b.start()
	if m := mustModule(t, cb, "echo"); m.State != catalog.StateActive || m.Active.ID != "echo@2.0.0" || len(cb.Status().Deferred) != 0 {
		t.Fatalf("at start-up: %+v, deferred %+v", m, cb.Status().Deferred)
	}
}
