package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// oddNova is an oslo envelope around a nova compute.instance.exists whose
// event type, timestamp and payload members are given as raw JSON text, so
// that values no encoder writes (1e999, escapes) reach the collector as a
// hostile publisher would send them.
func oddNova(id, eventType, timestamp, payload string) hostileBody {
	inner := fmt.Sprintf(`{"message_id":%q,"event_type":"%s","timestamp":"%s","priority":"INFO",`+
		`"publisher_id":"compute.odd","payload":{"instance_id":"i-%s","user_id":"u1",%s}}`, id, eventType, timestamp, id, payload)
	env, _ := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": inner})
	return hostileBody{body: env}
}

// Odd but valid notifications through a real broker: quantities that are
// negative, non-finite or out of range reach the Reporting API without
// those attributes; an escaped event type is billed as its decoded form
// and an escaped excluded type stays excluded; timestamps outside the
// contract and blank or unprintable projects never reach the API, each kept
// as a local dead letter with the reason invalid_event. Nothing the API
// refuses is ever sent.
func TestEndToEndOddValuesReachNoInvoice(t *testing.T) {
	e := setupE2E(t)
	if !slices.Contains(e.corpus.exchanges(), "nova") {
		t.Fatalf("the corpus's exchanges %v lack nova", e.corpus.exchanges())
	}
	const ts = "2024-05-01 12:00:00.000001"
	ok := func(n string) string { return "odd-" + e.prefix + "-" + n }
	const tenant = `"tenant_id":"p1"`
	repaired := []hostileBody{
		oddNova(ok("neg"), "compute.instance.exists", ts, tenant+`,"vcpus":-1,"memory_mb":2048`),
		oddNova(ok("negstr"), "compute.instance.exists", ts, tenant+`,"disk_gb":"-5","vcpus":2`),
		oddNova(ok("huge"), "compute.instance.exists", ts, tenant+`,"memory_mb":1e18,"vcpus":2`),
		oddNova(ok("inf"), "compute.instance.exists", ts, tenant+`,"memory_mb":1e999,"vcpus":2`),
		oddNova(ok("neginf"), "compute.instance.exists", ts, tenant+`,"vcpus":-1e999,"memory_mb":2048`),
		oddNova(ok("esc"), `compute\u002einstance.exists`, ts, tenant+`,"vcpus":2`),
	}
	refused := []hostileBody{
		oddNova(ok("y9999"), "compute.instance.exists", "9999-12-31T23:59:59-23:59", tenant),
		oddNova(ok("words"), "compute.instance.exists", "yesterday at noon", tenant),
		oddNova(ok("year1"), "compute.instance.exists", "0001-01-01 00:00:00", tenant),
		oddNova(ok("empty"), "compute.instance.exists", ts, `"tenant_id":""`),
		oddNova(ok("blank"), "compute.instance.exists", ts, `"tenant_id":"   "`),
		oddNova(ok("nul"), "compute.instance.exists", ts, `"tenant_id":"p\u0000"`),
	}
	excluded := []hostileBody{oddNova(ok("samples"), `compute.instance.delete.sample\u0073`, ts, tenant)}
	all := slices.Concat(repaired, refused, excluded)
	publishBodies(t, e.v, "nova", all)

	e.waitDelivered(t, len(repaired), 2*time.Minute)
	testkit.WaitFor(t, time.Minute, "every odd notification settled", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= float64(len(all))
	})
	events, raw := e.api.events(t)
	if len(events) != len(repaired) {
		t.Errorf("the API holds %d events, want %d:\n%s", len(events), len(repaired), raw)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev struct {
			EventID    string             `json:"event_id"`
			EventType  string             `json:"event_type"`
			Action     string             `json:"action"`
			Attributes map[string]any `json:"attributes"`
		}
		_ = json.Unmarshal([]byte(line), &ev)
		if ev.EventType != "compute.instance.exists" || ev.Action != "exists" {
			t.Errorf("event %s: type %q action %q, want compute.instance.exists and exists", ev.EventID, ev.EventType, ev.Action)
		}
		for k, v := range ev.Attributes {
			if f, isNum := v.(float64); !isNum || f < 0 || f > 1<<32 || k == "disk_gb" {
				t.Errorf("event %s: %s = %v reached the API", ev.EventID, k, v)
			}
		}
	}
	if st := e.api.stats(t); st.Rejected != 0 {
		t.Errorf("the API refused %d events; the collector must send none it refuses", st.Rejected)
	}
	m := e.c.metrics(t)
	if got := sum(m, "tally_collector_mapper_failures_total", `reason="invalid_event"`); got < float64(len(refused)) {
		t.Errorf(`mapper_failures_total{reason="invalid_event"} = %v, want %d`, got, len(refused))
	}
	if got := sum(m, "tally_collector_deadletters"); got != float64(len(refused)) {
		t.Errorf("dead letters %v, want %d", got, len(refused))
	}
	for reason, want := range map[string]int{"negative": 3, "out_of_range": 1, "not_finite": 1} {
		if got := sum(m, "tally_collector_event_members_dropped_total", `reason="`+reason+`"`); got < float64(want) {
			t.Errorf("event_members_dropped_total{%s} = %v, want %d", reason, got, want)
		}
	}
	if got := sum(m, "tally_collector_skipped_total", `reason="unclaimed"`); got < 1 {
		t.Errorf("the escaped excluded type was not skipped as unclaimed: %v", got)
	}
	code, body, err := e.c.get("/deadletters?after=0&limit=100")
	if err != nil || code != 200 {
		t.Fatalf("GET /deadletters: %d %v", code, err)
	}
	if n := strings.Count(body, `"reason":"invalid_event"`); n != len(refused) {
		t.Errorf("%d dead letters with reason invalid_event, want %d:\n%s", n, len(refused), body)
	}
	tot, _ := e.c.checkLedger(t)
	if tot.Delivered < int64(len(repaired)) {
		t.Errorf("ledger totals %+v", tot)
	}
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}
