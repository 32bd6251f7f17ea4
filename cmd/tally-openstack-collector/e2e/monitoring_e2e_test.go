package e2e

// The shipped alert rules and dashboard (examples/prometheus) against the
// metrics a running collector exports.
//
// The metric selectors are read out of the PromQL with a small tokenizer
// (promqlRefs) rather than the Prometheus module's parser, which would bring
// the whole Prometheus server into go.mod; promtool itself checks in
// examples/prometheus that every expression parses, and
// TestPromQLRefs pins what the tokenizer reads out of the forms the files use.

import (
	"bufio"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	monitoring "github.com/tally-billing/tally-openstack-collector/examples/prometheus"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// targetLabels are the labels Prometheus adds to every scraped series: a
// query may use them although the collector does not export them.
var targetLabels = map[string]bool{"job": true, "instance": true}

// matcher is one label matcher of a selector.
type matcher struct{ label, op, value string }

// selectorRef is a metric selector found in an expression.
type selectorRef struct {
	metric   string
	matchers []matcher
}

// promqlRefs reads the metric selectors of a PromQL expression, and the
// label names of its by, without, on, ignoring, group_left and group_right
// clauses. Grafana's variables ($name, ${name}) are skipped.
func promqlRefs(expr string) (sels []selectorRef, grouping []string, err error) {
	toks, err := promqlTokens(expr)
	if err != nil {
		return nil, nil, err
	}
	groupingWords := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "atan2": true, "inf": true, "nan": true}
	next := func(i int) string {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return ""
	}
	matchers := func(i int) ([]matcher, int, error) { // toks[i] == "{"
		var ms []matcher
		i++
		for i < len(toks) && toks[i] != "}" {
			if toks[i] == "," {
				i++
				continue
			}
			if i+2 >= len(toks) || !isIdent(toks[i]) || !isMatchOp(toks[i+1]) || !isString(toks[i+2]) {
				return nil, i, fmt.Errorf("bad matcher at %q", strings.Join(toks[i:min(i+3, len(toks))], " "))
			}
			ms = append(ms, matcher{toks[i], toks[i+1], unquote(toks[i+2])})
			i += 3
		}
		if i == len(toks) {
			return nil, i, fmt.Errorf("unclosed selector")
		}
		return ms, i, nil
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t == "[": // a range or a subquery: durations and variables only
			for i < len(toks) && toks[i] != "]" {
				i++
			}
		case t == "{": // a selector without a name: {__name__="..."}
			ms, j, err := matchers(i)
			if err != nil {
				return nil, nil, err
			}
			s := selectorRef{matchers: ms}
			for _, m := range ms {
				if m.label == "__name__" && m.op == "=" {
					s.metric = m.value
				}
			}
			if s.metric == "" {
				return nil, nil, fmt.Errorf("a selector without a metric name")
			}
			sels = append(sels, s)
			i = j
		case isIdent(t) && groupingWords[strings.ToLower(t)]:
			if next(i) != "(" {
				continue
			}
			for i += 2; i < len(toks) && toks[i] != ")"; i++ {
				if isIdent(toks[i]) {
					grouping = append(grouping, toks[i])
				}
			}
		case isIdent(t):
			n := next(i)
			if n == "(" || groupingWords[strings.ToLower(n)] || keywords[strings.ToLower(t)] {
				continue // a function or an aggregation, or a keyword
			}
			s := selectorRef{metric: t}
			if n == "{" {
				ms, j, err := matchers(i + 1)
				if err != nil {
					return nil, nil, err
				}
				s.matchers = ms
				i = j
			}
			sels = append(sels, s)
		}
	}
	return sels, grouping, nil
}

var (
	identRe = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	tokenRe = regexp.MustCompile(`^(?:` +
		`[a-zA-Z_:][a-zA-Z0-9_:]*` + // identifier
		`|[0-9.][0-9a-zA-Z.]*` + // number or duration
		`|\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*` + // Grafana variable
		`|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + // string
		`|=~|!~|!=|==|>=|<=|[-+*/%^=<>(){}\[\],:@])`)
)

func promqlTokens(expr string) ([]string, error) {
	var toks []string
	s := expr
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if s == "" {
			return toks, nil
		}
		if s[0] == '#' { // a comment, to the end of the line
			_, s, _ = strings.Cut(s, "\n")
			continue
		}
		t := tokenRe.FindString(s)
		if t == "" {
			return nil, fmt.Errorf("cannot read %q", s)
		}
		s = s[len(t):]
		if t[0] == '$' {
			continue
		}
		toks = append(toks, t)
	}
}

func isIdent(t string) bool   { return identRe.MatchString(t) }
func isString(t string) bool  { return t != "" && strings.ContainsRune("\"'`", rune(t[0])) }
func isMatchOp(t string) bool { return t == "=" || t == "!=" || t == "=~" || t == "!~" }

func unquote(t string) string {
	body := t[1 : len(t)-1]
	if t[0] == '`' {
		return body
	}
	return regexp.MustCompile(`\\(.)`).ReplaceAllString(body, "$1")
}

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
		sels, grouping, err := promqlRefs(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		var got []string
		for _, s := range sels {
			g := s.metric
			if len(s.matchers) > 0 {
				var ms []string
				for _, m := range s.matchers {
					ms = append(ms, m.label+m.op+fmt.Sprintf("%q", m.value))
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
		if _, _, err := promqlRefs(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// exported is what a scrape of /metrics holds: for every metric name (a
// histogram's base name and its _bucket, _sum and _count), its label names
// and the values each label takes.
type exported map[string]map[string]map[string]bool

func parseExposition(body string) exported {
	out := exported{}
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

	problems, checked := checkMonitoring(have, queries)
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

// checkMonitoring checks every query against what the collector exports (see
// TestMonitoringUsesExportedMetrics) and answers the problems found and the
// number of selectors checked.
func checkMonitoring(have exported, queries map[string]string) (problems []string, checked int) {
	names := make([]string, 0, len(queries))
	for n := range queries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, where := range names {
		sels, grouping, err := promqlRefs(queries[where])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no metric found in %q", where, queries[where]))
		}
		selected := map[string]bool{} // labels of the metrics the expression selects
		for _, s := range sels {
			labels, ok := have[s.metric]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", where, s.metric))
				continue
			}
			checked++
			for l := range labels {
				selected[l] = true
			}
			for _, m := range s.matchers {
				if targetLabels[m.label] || m.label == "__name__" {
					continue
				}
				values, ok := labels[m.label]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %s", where, s.metric, m.label))
					continue
				}
				if m.op == "=" && !values[m.value] {
					problems = append(problems, fmt.Sprintf("%s: %s{%s} never takes the value %q", where, s.metric, m.label, m.value))
				}
			}
		}
		for _, l := range grouping {
			if !targetLabels[l] && !selected[l] {
				problems = append(problems, fmt.Sprintf("%s: groups by %s, which none of its metrics exports", where, l))
			}
		}
	}
	return problems, checked
}

// checkMonitoring finds a metric that is not exported, a label a metric does
// not have, a value a label never takes and a grouping label no selected
// metric has; job and instance pass everywhere.
func TestCheckMonitoringFindsUnknownNames(t *testing.T) {
	have := parseExposition(`# TYPE m_total counter
m_total{reason="a"} 1
m_total{reason="b"} 2
# TYPE h_seconds histogram
h_seconds_bucket{le="1"} 1
h_seconds_sum 1
h_seconds_count 1
`)
	good := map[string]string{
		"ok": `sum by (job, reason) (rate(m_total{reason="a",instance=~"$instance"}[5m])) and on (le) h_seconds_bucket and h_seconds_count`,
	}
	if problems, checked := checkMonitoring(have, good); len(problems) != 0 || checked != 3 {
		t.Fatalf("%v, %d checked", problems, checked)
	}
	bad := map[string]string{
		"1 metric":   `n_total`,
		"2 label":    `m_total{kind="a"}`,
		"3 value":    `m_total{reason="c"}`,
		"4 grouping": `sum by (kind) (m_total)`,
	}
	problems, _ := checkMonitoring(have, bad)
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
