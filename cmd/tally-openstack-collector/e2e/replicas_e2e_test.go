package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// status is GET /mappers of a running collector.
func (c *collector) status(t testing.TB) catalog.Status {
	t.Helper()
	code, body, err := c.get("/mappers")
	if err != nil || code != 200 {
		t.Fatalf("GET /mappers: %d %v %s", code, err, body)
	}
	var st catalog.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("GET /mappers: %v", err)
	}
	return st
}

// module is the state of one module name: "active@id" or
// "migrating:active->candidate".
func (c *collector) module(t *testing.T, name string) string {
	t.Helper()
	for _, m := range c.status(t).Modules {
		if m.Name != name {
			continue
		}
		if m.Migration != nil {
			return fmt.Sprintf("migrating:%s->%s", m.Active.ID, m.Migration.Candidate.ID)
		}
		return "active:" + m.Active.ID
	}
	return "absent"
}

func (c *collector) waitModule(t *testing.T, who, name, want string) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, who+" "+name+" "+want, func() bool {
		if !c.p.running() {
			t.Fatalf("%s exited: %v\n%s", who, c.p.err, tail(c.p.out.String(), 4000))
		}
		return c.module(t, name) == want
	})
}

// TestEndToEndDecisionsReachEveryReplica runs three collectors on one queue,
// each with its own outbox, drop-in directory and REPLICA_NAME. A promote
// given to one reaches the others through the broker, one that was stopped
// at the time included; an abort reaches a replica that gets the candidate's
// file only afterwards, which parks it as it appears. Traffic afterwards
// balances each replica's ledger, and the merged ledger adds up to it.
func TestEndToEndDecisionsReachEveryReplica(t *testing.T) {
	const n = 300
	b, v, a := stack(t, "nova")
	reps, dirs := newReplicas(t, b, v, a, 3, "echo", "flaky")
	for _, c := range reps {
		c.start(t)
	}
	start := time.Now()
	for _, c := range reps {
		c.waitReady(t)
	}
	t.Logf("%s: three collectors ready", time.Since(start))

	// Promote, with collector-2 down.
	shadowEcho2(t, reps, dirs)
	t.Logf("%s: echo@2.0.0 in shadow on all three", time.Since(start))
	if code, _ := reps[2].p.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("collector-2 stopped with %d", code)
	}
	out := reps[0].cli(t, "mappers", "promote", "echo")
	var oc catalog.MigrationOutcome
	if err := json.Unmarshal([]byte(out), &oc); err != nil || oc.Result != "promoted" || oc.Replicas != catalog.ReplicasShared {
		t.Fatalf("promote on collector-0: %v\n%s", err, out)
	}
	reps[0].waitModule(t, "collector-0", "echo", "active:echo@2.0.0")
	reps[1].waitModule(t, "collector-1", "echo", "active:echo@2.0.0")
	t.Logf("%s: promoted on collector-0 and collector-1", time.Since(start))
	for _, m := range reps[1].status(t).Modules {
		if m.Name == "echo" && (m.Last == nil || !strings.Contains(m.Last.Reason, "collector-0")) {
			t.Errorf("collector-1 does not say who decided: %+v", m.Last)
		}
	}
	// collector-2 comes back: its queue kept the decision, which it applies
	// as it starts.
	reps[2].start(t)
	reps[2].waitReady(t)
	reps[2].waitModule(t, "collector-2", "echo", "active:echo@2.0.0")
	t.Logf("%s: collector-2 back, promoted", time.Since(start))

	// Abort, with the candidate's file not yet on collector-2.
	for i := range 2 {
		dropIn(t, dirs[i], "flaky_v2", "flaky-2")
		reps[i].waitModule(t, fmt.Sprintf("collector-%d", i), "flaky", "migrating:flaky@1.0.0->flaky@1.0.1")
	}
	out = reps[1].cli(t, "mappers", "abort", "flaky")
	if err := json.Unmarshal([]byte(out), &oc); err != nil || oc.Result != "aborted" || oc.Replicas != catalog.ReplicasShared {
		t.Fatalf("abort on collector-1: %v\n%s", err, out)
	}
	reps[0].waitModule(t, "collector-0", "flaky", "active:flaky@1.0.0")
	testkit.WaitFor(t, 60*time.Second, "the abort deferred on collector-2", func() bool {
		st := reps[2].status(t)
		return len(st.Deferred) == 1 && st.Deferred[0].Action == "abort" && st.Deferred[0].Candidate == "flaky@1.0.1"
	})
	if got := sum(reps[2].metrics(t), "tally_collector_mapper_decisions_deferred"); got != 1 {
		t.Errorf("collector-2 deferred gauge %v", got)
	}
	t.Logf("%s: abort deferred on collector-2", time.Since(start))
	dropIn(t, dirs[2], "flaky_v2", "flaky-2")
	testkit.WaitFor(t, 60*time.Second, "collector-2 parks the aborted candidate as it appears", func() bool {
		for _, f := range reps[2].status(t).Files {
			if strings.HasSuffix(f.File, "flaky-2.wasm") && f.State == "parked" && strings.Contains(f.Reason, "collector-1") {
				return true
			}
		}
		return false
	})
	if got := reps[2].module(t, "flaky"); got != "active:flaky@1.0.0" {
		t.Errorf("collector-2 flaky %s", got)
	}
	m := reps[2].metrics(t)
	if got := sum(m, "tally_collector_mapper_decisions_received_total", `action="abort"`, `result="applied"`); got != 1 {
		t.Errorf("collector-2 applied aborts %v", got)
	}
	if got := sum(m, "tally_collector_mapper_decisions_received_total", `action="promote"`, `result="applied"`); got != 1 {
		t.Errorf("collector-2 applied promotes %v", got)
	}
	// Each replica got its own decision back and ignored it.
	if got := sum(reps[0].metrics(t), "tally_collector_mapper_decisions_received_total", `action="promote"`, `result="ignored"`); got != 1 {
		t.Errorf("collector-0 ignored promotes %v (its own decision)", got)
	}

	// Traffic on the shared queue after the decisions: the three ledgers
	// balance and add up to what was published.
	publishToReplicas(t, v, a, "replicas", n)
	checkReplicaLedgers(t, reps, n)
}

// newReplicas makes n collectors on the nova exchange's queue, not yet
// started, each with its own outbox, REPLICA_NAME collector-<i> and
// drop-in directory (dirs[i]) holding version 1 of each of modules, a test
// module runtime/catalog/testdata/<module>_v1.wasm dropped in as <module>.
func newReplicas(t *testing.T, b bins, v *vhost, a *api, n int, modules ...string) (reps []*collector, dirs []string) {
	t.Helper()
	for i := range n {
		dir := t.TempDir()
		for _, m := range modules {
			dropIn(t, dir, m+"_v1", m)
		}
		dirs = append(dirs, dir)
		reps = append(reps, newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=nova",
			"TALLY_OSC_MAPPERS_DIR="+dir, fmt.Sprintf("TALLY_OSC_REPLICA_NAME=collector-%d", i)))
	}
	return reps, dirs
}

// shadowEcho2 drops echo@2.0.0 into each replica's directory and waits
// until each runs it in shadow of echo@1.0.0.
func shadowEcho2(t *testing.T, reps []*collector, dirs []string) {
	t.Helper()
	for i, c := range reps {
		dropIn(t, dirs[i], "echo_v2", "echo-2")
		c.waitModule(t, fmt.Sprintf("collector-%d", i), "echo", "migrating:echo@1.0.0->echo@2.0.0")
	}
}

// publishToReplicas publishes n test.usage notifications on nova and waits
// for the API to have accepted their events.
func publishToReplicas(t *testing.T, v *vhost, a *api, prefix string, n int) {
	t.Helper()
	publishTypes(t, v.Conn(t), "test.usage", prefix, 0, n, 0)
	if t.Failed() {
		t.FailNow()
	}
	testkit.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d events at the API", n), func() bool {
		return a.stats(t).Accepted >= int64(n)
	})
}

// TestEndToEndDecisionKeptWhileTheBrokerIsOutOfReach: a promote given to a
// replica that cannot reach the broker takes effect there, the answer and
// the command say it is local only for now, and the decision, kept in the
// outbox, reaches the other replica once the first is back on the broker
// (here after a restart). The two ledgers balance afterwards.
func TestEndToEndDecisionKeptWhileTheBrokerIsOutOfReach(t *testing.T) {
	const n = 200
	b, v, a := stack(t, "nova")
	reps, dirs := newReplicas(t, b, v, a, 2, "echo")
	reps[1].start(t)
	reps[1].waitReady(t)
	good := reps[0].env
	reps[0].env = append(append([]string(nil), good...), "TALLY_OSC_TRANSPORT_URL=amqp://guest:guest@127.0.0.1:1/")
	reps[0].start(t)
	testkit.WaitFor(t, 60*time.Second, "collector-0 serving its HTTP routes", func() bool {
		code, _, err := reps[0].get("/mappers")
		return err == nil && code == 200
	})
	shadowEcho2(t, reps, dirs)

	cmd := exec.Command(reps[0].bin, "mappers", "promote", "echo")
	cmd.Env = reps[0].env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("promote: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var oc catalog.MigrationOutcome
	if err := json.Unmarshal([]byte(stdout.String()), &oc); err != nil || oc.Result != "promoted" ||
		oc.Replicas != catalog.ReplicasPending || !strings.Contains(oc.ReplicasError, "broker link is down") {
		t.Fatalf("promote with the broker out of reach: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "in effect on this replica only") {
		t.Errorf("the command does not warn:\n%s", stderr.String())
	}
	reps[0].waitModule(t, "collector-0", "echo", "active:echo@2.0.0")
	if got := sum(reps[0].metrics(t), "tally_collector_control_unsent_decisions"); got != 1 {
		t.Errorf("unsent decisions %v", got)
	}
	if got := reps[1].module(t, "echo"); got != "migrating:echo@1.0.0->echo@2.0.0" {
		t.Fatalf("collector-1 changed without the decision: %s", got)
	}

	// collector-0 is restarted on the broker: the kept decision leaves.
	code, took := reps[0].p.stop(t, 30*time.Second)
	if code != 0 {
		t.Fatalf("collector-0 stopped with %d", code)
	}
	t.Logf("collector-0 stopped in %s", took)
	reps[0].env = good
	reps[0].start(t)
	reps[0].waitReady(t)
	reps[1].waitModule(t, "collector-1", "echo", "active:echo@2.0.0")
	testkit.WaitFor(t, 60*time.Second, "nothing unsent on collector-0", func() bool {
		return sum(reps[0].metrics(t), "tally_collector_control_unsent_decisions") == 0
	})
	publishToReplicas(t, v, a, "reach", n)
	checkReplicaLedgers(t, reps, n)
}
