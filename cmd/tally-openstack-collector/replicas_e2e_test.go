package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// status is GET /mappers of a running collector.
func (c *collector) status(t *testing.T) catalog.Status {
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
// file only afterwards, which parks it as it appears.
func TestEndToEndDecisionsReachEveryReplica(t *testing.T) {
	b, v, a := novaStack(t)
	var reps [3]*collector
	var dirs [3]string
	for i := range reps {
		dirs[i] = t.TempDir()
		dropIn(t, dirs[i], "echo_v1", "echo")
		dropIn(t, dirs[i], "flaky_v1", "flaky")
		reps[i] = newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=nova",
			"TALLY_OSC_MAPPERS_DIR="+dirs[i], fmt.Sprintf("TALLY_OSC_REPLICA_NAME=collector-%d", i))
		reps[i].start(t)
	}
	start := time.Now()
	for _, c := range reps {
		c.waitReady(t)
	}
	t.Logf("%s: three collectors ready", time.Since(start))

	// Promote, with collector-2 down.
	for i, c := range reps {
		dropIn(t, dirs[i], "echo_v2", "echo-2")
		c.waitModule(t, fmt.Sprintf("collector-%d", i), "echo", "migrating:echo@1.0.0->echo@2.0.0")
	}
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
}
