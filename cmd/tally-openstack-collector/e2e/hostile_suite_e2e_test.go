package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// hostileEnvInt is the integer in the environment variable name, or def.
func hostileEnvInt(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

// logFirstErrors logs the first max distinct errors of a daemon's JSON log
// (the last few KiB a failed test prints may hold only a notification's
// padding), each cut to 600 bytes.
func logFirstErrors(t *testing.T, out string, max int) {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if len(seen) == max {
			return
		}
		if !strings.Contains(line, `"level":"error"`) && !strings.Contains(line, `"level":"fatal"`) {
			continue
		}
		var rec struct{ Component, Message, Error string }
		if json.Unmarshal([]byte(line), &rec) != nil || seen[rec.Component+rec.Message+rec.Error] {
			continue
		}
		seen[rec.Component+rec.Message+rec.Error] = true
		t.Logf("collector logged: %.600s", line)
	}
}

// A hostile publisher, along every dimension it controls (hostilegen_test.go:
// the length of each string, the number of distinct event types and
// projects, nesting depth, arrays of many members, numbers out of every
// range, bodies and events just under and over their limits), among
// ordinary notifications: the daemon never exits, every hostile
// notification is settled (acknowledged, and counted in a ledger that
// balances), every ordinary one reaches the Reporting API exactly once, and
// the peak resident set stays within the documented budget.
//
// TALLY_HOSTILE_N notes along the dimensions (300) and TALLY_HOSTILE_DISTINCT
// distinct event types and projects (500 each) make the short run of make
// test; make fuzz runs it long. TALLY_HOSTILE_SEED replays a run: a
// failure names its seed.
func TestEndToEndHostilePublisherSuite(t *testing.T) {
	seed := hostileEnvInt(t, "TALLY_HOSTILE_SEED", uint64(time.Now().UnixNano()))
	n := int(hostileEnvInt(t, "TALLY_HOSTILE_N", 300))
	distinct := int(hostileEnvInt(t, "TALLY_HOSTILE_DISTINCT", 500))
	replay := fmt.Sprintf("TALLY_HOSTILE_SEED=%d TALLY_HOSTILE_N=%d TALLY_HOSTILE_DISTINCT=%d", seed, n, distinct)
	t.Logf("hostile publisher: %s", replay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay this run with %s go test -count=1 -run '^TestEndToEndHostilePublisherSuite$' ./cmd/tally-openstack-collector/e2e", replay)
		}
	})

	e := setupE2E(t)
	t.Cleanup(func() {
		if t.Failed() {
			logFirstErrors(t, e.c.p.out.String(), 8)
		}
	})
	gen := newHostileGen(seed, e.corpus)
	const rounds, perRound = 10, 20
	const ordinary = rounds * perRound
	total := ordinary + n + 2*distinct
	perDim := map[string]int{}
	var hostileBytes, largest int64
	start := time.Now()
	// Ordinary notifications round by round, a round's share of the hostile
	// ones among them, made as the round comes.
	for r := range rounds {
		publishRaw(t, e.v, e.corpus, e.prefix, r*perRound, (r+1)*perRound)
		notes := gen.notes(n*(r+1)/rounds-n*r/rounds, distinct*(r+1)/rounds-distinct*r/rounds)
		bodies := make([]hostileBody, len(notes))
		for i, h := range notes {
			bodies[i] = hostileBody{body: h.body(), exchange: h.exchange}
			perDim[h.dim]++
			hostileBytes += int64(len(bodies[i].body))
			largest = max(largest, int64(len(bodies[i].body)))
		}
		publishBodies(t, e.v, "", bodies)
		if !e.c.p.running() {
			t.Fatalf("the collector exited after round %d of %d: %v", r+1, rounds, e.c.p.err)
		}
	}
	dims := make([]string, 0, len(perDim))
	for d, k := range perDim {
		dims = append(dims, fmt.Sprintf("%s: %d", d, k))
	}
	sort.Strings(dims)
	t.Logf("published %d notifications in %s, %d hostile (%d MiB, the largest %d bytes): %s",
		total, time.Since(start).Round(time.Millisecond), total-ordinary, hostileBytes>>20, largest, strings.Join(dims, ", "))

	limit := 3*time.Minute + time.Duration(total)*20*time.Millisecond
	want := make(map[string]bool, ordinary)
	for i := range ordinary {
		want[messageID(e.prefix, i)] = true
	}
	testkit.WaitUntil(t, limit, "every ordinary notification at the Reporting API", func() (bool, string) {
		if !e.c.p.running() {
			t.Fatalf("the collector exited: %v", e.c.p.err)
		}
		events, _ := e.api.events(t)
		got := 0
		for _, ev := range events {
			if want[ev.EventID] {
				got++
			}
		}
		return got >= ordinary, fmt.Sprintf("%d of %d ordinary notifications delivered", got, ordinary)
	})
	// At least: a delivery the broker gives again (after a lost connection)
	// is counted again.
	testkit.WaitUntil(t, limit, "every notification acknowledged", func() (bool, string) {
		acked := sum(e.c.metrics(t), "tally_collector_acked_total")
		return acked >= float64(total), fmt.Sprintf("%v of %d acknowledged", acked, total)
	})
	t.Logf("all settled %s after the first publish", time.Since(start).Round(time.Millisecond))

	m := e.c.metrics(t)
	compiled := int(sum(m, "tally_collector_mapper_builtins_compiled"))
	// Large and deep notifications grow the instances; the budget counts
	// them at their limit, and the deliveries held at the largest body.
	budget := residentBudget(compiled, budgetInputs{largestBody: largest, instancesAtLimit: true})
	hwm := int64(procStatus(t, e.c.p.cmd.Process.Pid, "VmHWM")) << 10
	t.Logf("collector peak resident set (VmHWM): %d MiB (budget %d MiB, %d modules compiled); "+
		"unparseable %v, skipped %v, mapper failures %v, dead letters %v",
		hwm>>20, budget>>20, compiled, sum(m, "tally_collector_unparseable_total"),
		sum(m, "tally_collector_skipped_total"), sum(m, "tally_collector_mapper_failures_total"), sum(m, "tally_collector_deadletters"))
	if hwm > budget {
		t.Errorf("peak resident set %d MiB, over the documented budget of %d MiB", hwm>>20, budget>>20)
	}

	// Every notification is settled in a ledger that balances: mapped,
	// skipped or dead-lettered, none left in between.
	tot := e.c.checkLedgerBalanced(t)
	t.Logf("ledger balanced %s after the first publish: %d consumed, %d committed, %d dead-lettered, %d skipped, %d delivered",
		time.Since(start).Round(time.Millisecond), tot.Consumed, tot.Committed, tot.DeadTotal(), tot.SkippedTotal(), tot.Delivered)
	if tot.Consumed < int64(total) || tot.Delivered < ordinary {
		t.Errorf("ledger totals %+v, want at least %d consumed and %d delivered", tot, total, ordinary)
	}
	// Exactly once, with the outbox empty: each ordinary notification's
	// event, and no event twice.
	seen, raw := checkStoredOnce(t, e.api, want)
	for id, k := range seen {
		if k > 1 {
			t.Errorf("event %.80s stored %d times", id, k)
		}
	}
	if strings.Contains(string(raw), secretFor(e.prefix)) {
		t.Error("a context token reached the Reporting API")
	}

	if code, _, err := e.c.get("/readyz"); err != nil || code != 200 {
		t.Errorf("readyz after the run: %d %v", code, err)
	}
	if !e.c.p.running() {
		t.Fatalf("the collector exited: %v", e.c.p.err)
	}
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}
