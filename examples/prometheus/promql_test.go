package prometheus

import (
	"fmt"
	"strings"
	"testing"
)

// What the tokenizer reads out of the forms the shipped files use.
func TestPromQLRefs(t *testing.T) {
	for _, c := range []struct {
		expr, sels, grouping string
	}{
		{`tally_collector_ready == 0 unless on (job, instance) tally_collector_stopping == 1`,
			`tally_collector_ready tally_collector_stopping`, `job instance`},
		{`sum by (job, instance) (rate(tally_collector_skipped_total{reason="unclaimed"}[1h] offset 1d)) + 0.01 and on (job, instance) ` +
			`count by (job, instance, version) (max_over_time(tally_collector_build_info[1d])) > 1`,
			`tally_collector_skipped_total{reason="unclaimed"} tally_collector_build_info`, `job instance job instance job instance version`},
		{`sum(rate(x_total{job=~"$job",instance=~"$instance"}[$__rate_interval])) without (le)`,
			`x_total{job=~"$job",instance=~"$instance"}`, `le`},
		{"{__name__=\"y\", a!~'b\\'c'} # comment with a_metric\n * on() group_left(v) z",
			`y{__name__="y",a!~"b'c"} z`, `v`},
	} {
		sels, grouping, err := Refs(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		var got []string
		for _, s := range sels {
			g := s.Metric
			if len(s.Matchers) > 0 {
				var ms []string
				for _, m := range s.Matchers {
					ms = append(ms, m.Label+m.Op+fmt.Sprintf("%q", m.Value))
				}
				g += "{" + strings.Join(ms, ",") + "}"
			}
			got = append(got, g)
		}
		if strings.Join(got, " ") != c.sels || strings.Join(grouping, " ") != c.grouping {
			t.Errorf("%s:\n got %q, %q\nwant %q, %q", c.expr, strings.Join(got, " "), strings.Join(grouping, " "), c.sels, c.grouping)
		}
	}
	for _, bad := range []string{`x{a}`, `x{a="b"`, `x ~ y`} {
		if _, _, err := Refs(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// Check finds a metric that is not exported, a label a metric does
// not have, a value a label never takes and a grouping label no selected
// metric has; job and instance pass everywhere.
func TestCheckMonitoringFindsUnknownNames(t *testing.T) {
	have := Exported{
		"m_total":          {"reason": {"a": true, "b": true}},
		"h_seconds":        {"le": {"1": true}},
		"h_seconds_bucket": {"le": {"1": true}},
		"h_seconds_count":  {},
	}
	good := map[string]string{
		"ok": `sum by (job, reason) (rate(m_total{reason="a",instance=~"$instance"}[5m])) and on (le) h_seconds_bucket and h_seconds_count`,
	}
	if problems, checked := Check(have, good); len(problems) != 0 || checked != 3 {
		t.Fatalf("%v, %d checked", problems, checked)
	}
	bad := map[string]string{
		"1 metric":   `n_total`,
		"2 label":    `m_total{kind="a"}`,
		"3 value":    `m_total{reason="c"}`,
		"4 grouping": `sum by (kind) (m_total)`,
	}
	problems, _ := Check(have, bad)
	want := []string{"metric n_total is not exported", "m_total has no label kind", `never takes the value "c"`, "groups by kind"}
	if len(problems) != len(want) {
		t.Fatalf("problems %q", problems)
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d: %q, want %q", i, problems[i], w)
		}
	}
}
