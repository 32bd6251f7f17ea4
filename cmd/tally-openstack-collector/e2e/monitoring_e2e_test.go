package e2e

// The shipped alert rules and dashboard (examples/prometheus) against the
// metrics a running collector exports, with traffic; the same check on a
// fresh daemon's first scrape is in internal/daemon.

import (
	"bufio"
	"regexp"
	"strings"
	"testing"
	"time"

	monitoring "github.com/tally-billing/tally-openstack-collector/examples/prometheus"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// parseExposition reads a scrape of /metrics: for every metric name (a
// histogram's base name and its _bucket, _sum and _count), its label names
// and the values each label takes.
func parseExposition(body string) monitoring.Exported {
	out := monitoring.Exported{}
	add := func(name string) map[string]map[string]bool {
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		return out[name]
	}
	labelRe := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			add(f[2])
			continue
		}
		m := metricLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names := []string{m[1]}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m[1], suffix); ok && out[base] != nil {
				names = append(names, base)
			}
		}
		for _, n := range names {
			labels := add(n)
			for _, l := range labelRe.FindAllStringSubmatch(m[2], -1) {
				if labels[l[1]] == nil {
					labels[l[1]] = map[string]bool{}
				}
				labels[l[1]][l[2]] = true
			}
		}
	}
	return out
}

// TestMonitoringUsesExportedMetrics runs the collector with traffic that makes
// every metric of the alerts exist (notifications mapped and delivered, an
// event the Reporting API refuses on its own), scrapes its /metrics, and
// checks every expression of the alert rules and of the dashboard: each
// metric it selects is exported, with each label it matches on (a label
// matched with = has that value on some series), and each label of its by,
// on, without and group clauses is exported by a metric it selects. job and
// instance, the labels of the scrape, are allowed everywhere.
func TestMonitoringUsesExportedMetrics(t *testing.T) {
	queries, err := monitoring.Queries() // fails fast, before a daemon starts
	if err != nil {
		t.Fatal(err)
	}
	e := setupE2E(t)
	publishRaw(t, e.v, e.corpus, e.prefix, 0, 10)
	e.waitDelivered(t, 10, 2*time.Minute)
	// The API refuses notification 10's event alone: the sender sets it aside.
	e.api.do(t, "POST", "/admin/refuse", map[string]any{"event_ids": []string{messageID(e.prefix, 10)}, "status": 422}, nil)
	publishRaw(t, e.v, e.corpus, e.prefix, 10, 20)
	e.waitDelivered(t, 19, 2*time.Minute)
	testkit.WaitFor(t, 2*time.Minute, "the refused event set aside", func() bool {
		return sum(e.c.metrics(t), "tally_collector_sender_deadlettered_events_total", `status="422"`) >= 1
	})
	code, body, err := e.c.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("scrape: %d %v", code, err)
	}
	have := parseExposition(body)

	problems, checked := monitoring.Check(have, queries)
	for _, p := range problems {
		t.Error(p)
	}
	if checked == 0 {
		t.Fatal("no selector checked")
	}
	t.Logf("%d expressions, %d metric selectors checked against %d exported metrics", len(queries), checked, len(have))
	// The refused event is counted as refused, the rest as delivered.
	if tot, _ := e.c.checkLedger(t); tot.Consumed < 20 || tot.Delivered < 19 || tot.Refused < 1 {
		t.Errorf("ledger totals %+v, want at least 20 consumed, 19 delivered and 1 refused", tot)
	}
}
