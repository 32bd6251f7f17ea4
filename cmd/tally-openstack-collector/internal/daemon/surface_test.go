package daemon

// What an operator sees of a fresh daemon: its first scrape of /metrics
// against the shipped alert rules and dashboard and against the metrics
// tables of docs/operations.md, and /readyz when the Reporting API's URL
// leads nowhere.

import (
	"bufio"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	monitoring "github.com/tally-billing/tally-openstack-collector/examples/prometheus"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// family is one metric of a scrape: its type, its help, and the values each
// of its labels takes.
type family struct {
	typ    string
	help   string
	labels map[string]map[string]bool
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseScrape reads the Prometheus text format. A histogram's _bucket, _sum
// and _count samples count under its own name, its le label left out.
func parseScrape(t *testing.T, body string) map[string]*family {
	t.Helper()
	out := map[string]*family{}
	get := func(name string) *family {
		if out[name] == nil {
			out[name] = &family{labels: map[string]map[string]bool{}}
		}
		return out[name]
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			get(name).typ = typ
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			get(name).help = help
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && out[base] != nil && out[base].typ == "histogram" {
				name = base
			}
		}
		f := get(name)
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			if l[1] == "le" && f.typ == "histogram" {
				continue
			}
			if f.labels[l[1]] == nil {
				f.labels[l[1]] = map[string]bool{}
			}
			f.labels[l[1]][l[2]] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("nothing read from the scrape:\n%s", body)
	}
	return out
}

// firstScrape answers the first /metrics the daemon answers 200 to,
// scraping from its start on.
func (d *inProcess) firstScrape(t *testing.T) string {
	t.Helper()
	var body string
	d.waitFor(t, startLimit, "/metrics to answer", func() bool {
		code, b, err := d.get("/metrics")
		body = b
		return err == nil && code == http.StatusOK
	})
	return body
}

// toExported is a scrape as examples/prometheus's Check reads it.
func toExported(fams map[string]*family) monitoring.Exported {
	out := monitoring.Exported{}
	for name, f := range fams {
		out[name] = f.labels
	}
	return out
}

// openLabels take values from the build or the configuration, not from a
// set the code knows: no series of theirs need exist at the start.
var openLabels = map[string]bool{"version": true, "commit": true, "go_version": true, "mapper": true, "listener": true}

// TestFreshDaemonExportsWhatTheRulesAndDocsName starts a daemon (the local
// channel and a plog listener on, so that their metrics are there too) and
// takes the first scrape
// that answers, before anything was consumed or sent. In it:
//   - every metric and label value that an alert rule or a dashboard query
//     of examples/prometheus selects is present, so that increase() and
//     rate() see the first event after a start;
//   - every value of a label whose values form a known set is exported
//     (at 0), and the metric's help names it;
//   - the metrics tables of docs/operations.md hold: each metric documented
//     is exported with the documented type and labels, the values the
//     documentation lists for a label are exactly those exported, and each
//     metric exported is documented (the channel's in docs/channel.md);
//   - every metric{label="value"} the document names elsewhere (the
//     runbooks) is a value the daemon exports.
func TestFreshDaemonExportsWhatTheRulesAndDocsName(t *testing.T) {
	queries, err := monitoring.Queries()
	if err != nil {
		t.Fatal(err)
	}
	v := testkit.NewVhost(t)
	cfg := daemonSettings(t, v, "http://127.0.0.1:9", "TALLY_OSC_CHANNEL_SOCKET="+filepath.Join(t.TempDir(), "ch.sock"),
		"TALLY_OSC_PLOG_LISTENERS=tcp://"+testkit.FreeAddr(t))
	d := runInProcess(t, cfg)
	fams := parseScrape(t, d.firstScrape(t))

	t.Run("rules and dashboard", func(t *testing.T) {
		problems, checked := monitoring.Check(toExported(fams), queries)
		for _, p := range problems {
			t.Error(p)
		}
		if checked == 0 {
			t.Fatal("no selector checked")
		}
	})

	t.Run("known label values at 0, named in the help", func(t *testing.T) {
		for name, f := range fams {
			if !strings.HasPrefix(name, "tally_collector_") {
				continue
			}
			for label, values := range f.labels {
				if openLabels[label] {
					continue
				}
				for value := range values {
					if !regexp.MustCompile(`\b` + regexp.QuoteMeta(value) + `\b`).MatchString(f.help) {
						t.Errorf("%s{%s=%q}: the help does not name the value: %q", name, label, value, f.help)
					}
				}
			}
		}
		// The two whose first increment an alert or a panel must see.
		for _, c := range []struct{ name, label, values string }{
			{"tally_collector_sender_requests_total", "class", "2xx 3xx 4xx 5xx network timeout"},
			{"tally_collector_sender_deadlettered_events_total", "status", "400 413 422"},
		} {
			f := fams[c.name]
			if f == nil {
				t.Errorf("%s is not exported", c.name)
				continue
			}
			if got := setString(f.labels[c.label]); got != c.values {
				t.Errorf("%s{%s}: %q, want %q", c.name, c.label, got, c.values)
			}
		}
	})

	t.Run("docs/operations.md", func(t *testing.T) {
		doc := testkit.ReadFile(t, testkit.RepoPath(t, "docs", "operations.md"))
		rows := metricRows(t, string(doc))
		documented := map[string]bool{}
		for _, r := range rows {
			documented[r.name] = true
			f := fams[r.name]
			if f == nil && !hasOpen(r.labels) { // one with an open label has no series before its first value
				t.Errorf("%s is documented but not exported", r.name)
			}
			if f == nil {
				continue
			}
			if f.typ != r.typ {
				t.Errorf("%s: documented as a %s, exported as a %s", r.name, r.typ, f.typ)
			}
			if got, want := setString(f.labels), strings.Join(r.labels, " "); got != want && !(len(f.labels) == 0 && hasOnlyOpen(r.labels)) {
				t.Errorf("%s: labels %q exported, %q documented", r.name, got, want)
			}
			var exported []string
			allClosed := true
			for _, l := range r.labels {
				if openLabels[l] {
					allClosed = false
					continue
				}
				for v := range f.labels[l] {
					exported = append(exported, v)
				}
			}
			sort.Strings(exported)
			for _, v := range exported {
				if !r.values[v] {
					t.Errorf("%s: exports the value %q, which its row does not list", r.name, v)
				}
			}
			if allClosed {
				for v := range r.values {
					if !slices.Contains(exported, v) {
						t.Errorf("%s: its row lists %q, which a fresh daemon does not export", r.name, v)
					}
				}
			}
		}
		channelDoc := testkit.ReadFile(t, testkit.RepoPath(t, "docs", "channel.md"))
		for name := range fams {
			if !strings.HasPrefix(name, "tally_collector_") || documented[name] {
				continue
			}
			if strings.HasPrefix(name, "tally_collector_channel_") && strings.Contains(string(channelDoc), name) {
				continue
			}
			if strings.HasPrefix(name, "tally_collector_plog_") {
				continue // the row tally_collector_plog_*{listener}, and docs/plog.md
			}
			t.Errorf("%s is exported but not in the metrics tables of docs/operations.md", name)
		}
		// The runbooks' and the text's metric{label="value"}.
		for _, m := range regexp.MustCompile(`(tally_collector_[a-z0-9_]+)\{([a-z_]+)="([^"]*)"\}`).FindAllStringSubmatch(string(doc), -1) {
			f := fams[m[1]]
			if f == nil {
				t.Errorf("docs/operations.md names %s, which is not exported", m[0])
				continue
			}
			if !f.labels[m[2]][m[3]] {
				t.Errorf("docs/operations.md names %s: %s takes the values %q", m[0], m[2], setString(f.labels[m[2]]))
			}
		}
	})
}

// metricRow is a row of a metrics table of docs/operations.md, for one
// metric: its name, type, labels, and the values its meaning lists in
// backquotes (lower case words and numbers that are not a label's name).
type metricRow struct {
	name   string
	typ    string
	labels []string
	values map[string]bool
}

// metricRows reads the tables of the "Metrics" section. A row may name
// several metrics, the later ones by the suffix that replaces the first's
// (`tally_collector_channel_mapped_total`, `_skipped_total`); a row with a
// wildcard (the plog listeners' counters) is left out.
func metricRows(t *testing.T, doc string) []metricRow {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/operations.md has no Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	nameRe := regexp.MustCompile("^`([a-z0-9_*]+)(?:\\{([a-z_,]+)\\})?`$")
	valueRe := regexp.MustCompile("`([a-z0-9_]+)`")
	var rows []metricRow
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 3 {
			t.Fatalf("a row of fewer than 3 cells: %s", line)
		}
		meaning := strings.Join(cells[2:], " | ")
		var first string
		for _, n := range strings.Split(cells[0], ", ") {
			m := nameRe.FindStringSubmatch(n)
			if m == nil {
				t.Fatalf("cannot read the metric %q of: %s", n, line)
			}
			name := m[1]
			if strings.Contains(name, "*") {
				continue
			}
			if strings.HasPrefix(name, "_") {
				parts := strings.Split(first, "_")
				name = strings.Join(parts[:len(parts)-strings.Count(name, "_")], "_") + name
			} else {
				first = name
			}
			r := metricRow{name: name, typ: cells[1], values: map[string]bool{}}
			if m[2] != "" {
				r.labels = strings.Split(m[2], ",")
				sort.Strings(r.labels)
			}
			for _, v := range valueRe.FindAllStringSubmatch(meaning, -1) {
				if !slices.Contains(r.labels, v[1]) && !strings.HasPrefix(v[1], "tally_collector_") && len(r.labels) > 0 {
					r.values[v[1]] = true
				}
			}
			rows = append(rows, r)
		}
	}
	if len(rows) < 50 {
		t.Fatalf("only %d metrics read from the tables", len(rows))
	}
	return rows
}

func hasOpen(labels []string) bool {
	for _, l := range labels {
		if openLabels[l] {
			return true
		}
	}
	return false
}

func hasOnlyOpen(labels []string) bool {
	for _, l := range labels {
		if !openLabels[l] {
			return false
		}
	}
	return true
}

// setString is the keys of m, sorted, separated by spaces.
func setString[V any](m map[string]V) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), " ")
}

// TestReadyzNamesTheURLThatAnswers404: a REPORTING_URL whose path leads
// nowhere (every POST answered 404) makes /readyz answer not ready with the
// URL that answered and the setting to fix, and the metric says it, while
// the events wait in the outbox.
func TestReadyzNamesTheURLThatAnswers404(t *testing.T) {
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, "nova")
	_, srv := referenceAPI(t)

	cfg := daemonSettings(t, v, srv.URL+"/tally")
	d := runInProcess(t, cfg)
	d.waitReady(t)
	v.Publish(t, "nova", "notifications.info", novaNotification(t, 1))

	endpoint := srv.URL + "/tally" + sender.EventsRoute
	var body string
	testkit.WaitFor(t, 60*time.Second, "/readyz to say the URL answers 404", func() bool {
		code, b, err := d.get("/readyz")
		body = b
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "404")
	})
	want := "not ready: the Reporting API answers 404 at " + endpoint + "; set TALLY_OSC_REPORTING_URL to its base URL\n"
	if body != want {
		t.Errorf("/readyz: %q, want %q", body, want)
	}
	if strings.Contains(body, "in-process") {
		t.Errorf("/readyz shows the token: %q", body)
	}
	// tally_collector_ready follows /readyz within its sampling interval.
	var metrics string
	testkit.WaitFor(t, 30*time.Second, "the metrics to show the 404s", func() bool {
		_, b, err := d.get("/metrics")
		if err != nil {
			return false
		}
		metrics = grepLines(b, "tally_collector_sender_endpoint_not_found ", "tally_collector_ready ")
		return strings.Contains(metrics, "tally_collector_sender_endpoint_not_found 1") && strings.Contains(metrics, "tally_collector_ready 0")
	})
	if !strings.Contains(d.log.String(), endpoint) {
		t.Errorf("the log does not name %s", endpoint)
	}
}

func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
