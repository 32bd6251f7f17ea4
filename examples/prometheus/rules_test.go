package prometheus

// The tests of the shipped files: promtool checks and unit-tests the rules
// file, the Prometheus Operator's manifest is generated from it, every alert
// names a runbook section of docs/operations.md, and the dashboard's queries
// parse.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

const (
	rulesFile     = "tally-openstack-collector.rules.yml"
	testsFile     = "tests.yml"
	manifestFile  = "prometheusrule.yaml"
	operationsDoc = "../../docs/operations.md"

	// writeManifestEnv makes TestPrometheusRuleMatchesRulesFile write the
	// manifest instead of comparing it.
	writeManifestEnv = "TALLY_OSC_WRITE_PROMETHEUSRULE"
)

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := testkit.LookPath(t, "promtool", "prometheus")
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The rules file loads in Prometheus (promtool check rules) and its unit
// tests pass (promtool test rules): each alert fires on its firing series
// and on nothing else, at every evaluation time listed.
func TestRulesWithPromtool(t *testing.T) {
	if out := promtool(t, "check", "rules", rulesFile); !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
	if out := promtool(t, "test", "rules", testsFile); !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// manifest is the PrometheusRule generated from the rules file: its groups,
// as they are, under spec.
func manifest(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`# The alerting rules of tally-openstack-collector for the Prometheus Operator.
# GENERATED from tally-openstack-collector.rules.yml (the one source of the
# rules): edit that file, then run
#   TALLY_OSC_WRITE_PROMETHEUSRULE=1 go test ./examples/prometheus -run TestPrometheusRuleMatchesRulesFile
# The Prometheus resource's ruleSelector must match the labels below (add
# the label your Prometheus selects on, e.g. release: <name> with kube-prometheus-stack).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tally-openstack-collector
  labels:
    app.kubernetes.io/name: tally-openstack-collector
spec:
`)
	started := false
	for _, line := range strings.SplitAfter(string(rules), "\n") {
		if !started && !strings.HasPrefix(line, "groups:") {
			continue // the file's own header comment
		}
		started = true
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return b.Bytes()
}

// prometheusrule.yaml is generated from the rules file and equal to what the
// generator makes of it now; parsed, its spec holds the same groups.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	rules := RulesFile
	want := manifest(rules)
	if os.Getenv(writeManifestEnv) == "1" {
		if err := os.WriteFile(manifestFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := testkit.ReadFile(t, manifestFile)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what %s generates; run %s=1 go test ./examples/prometheus -run %s",
			manifestFile, rulesFile, writeManifestEnv, t.Name())
	}
	var m struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Groups []any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &f); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "monitoring.coreos.com/v1" || m.Kind != "PrometheusRule" || m.Metadata.Name == "" {
		t.Fatalf("manifest header: %+v", m)
	}
	if len(f.Groups) == 0 || !reflect.DeepEqual(m.Spec.Groups, f.Groups) {
		t.Fatalf("the manifest's groups differ from the rules file's")
	}
}

// anchor is the fragment GitHub gives a Markdown heading.
func anchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// Every alert has a severity and a runbook annotation naming a section of
// docs/operations.md, and that section says what the alert means, what to
// check and what to do. Every alert is tested in tests.yml both where it
// fires and where it must not.
func TestAlertsHaveRunbooksAndTests(t *testing.T) {
	doc := testkit.ReadFile(t, operationsDoc)
	sections := map[string]string{} // anchor -> body up to the next heading
	var cur string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			cur = anchor(strings.TrimLeft(line, "#"))
			sections[cur] = ""
			continue
		}
		if cur != "" {
			sections[cur] += line + "\n"
		}
	}
	tb := testkit.ReadFile(t, testsFile)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(tb, &tests); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	rules, err := Rules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q", r.Alert, s)
		}
		doc, frag, ok := strings.Cut(r.Annotations["runbook"], "#")
		if !ok || doc != "docs/operations.md" {
			t.Errorf("%s: runbook %q does not name a section of docs/operations.md", r.Alert, r.Annotations["runbook"])
			continue
		}
		body, ok := sections[frag]
		if !ok {
			t.Errorf("%s: docs/operations.md has no section #%s", r.Alert, frag)
			continue
		}
		for _, part := range []string{"**What it means.**", "**What to check.**", "**What to do.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("%s: section #%s lacks %q", r.Alert, frag, part)
			}
		}
		if !firing[r.Alert] || !quiet[r.Alert] {
			t.Errorf("%s: tests.yml must test it firing (%v) and not firing (%v)", r.Alert, firing[r.Alert], quiet[r.Alert])
		}
	}
}

// Every query of the dashboard (its template variables included) is valid
// PromQL: promtool checks them as the expressions of recording rules, with
// Grafana's variables replaced by what Grafana puts there.
func TestDashboardQueriesParse(t *testing.T) {
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	qs, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(qs))
	for where := range qs {
		names = append(names, where)
	}
	sort.Strings(names)
	for i, where := range names {
		q := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$instance", "a", "$job", "tally").Replace(qs[where])
		if strings.Contains(q, "$") {
			t.Fatalf("%s uses a variable this test does not know: %s", where, q)
		}
		qj, _ := json.Marshal(q) // a JSON string is a YAML string
		fmt.Fprintf(&b, "      # %s\n      - record: dashboard:query%d\n        expr: %s\n", where, i, qj)
	}
	f := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := promtool(t, "check", "rules", f); !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
}
