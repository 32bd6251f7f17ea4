// Package prometheus ships the collector's alerting rules
// (tally-openstack-collector.rules.yml, and prometheusrule.yaml generated
// from it for the Prometheus Operator) and its Grafana dashboard
// (tally-openstack-collector.dashboard.json). The files are what operators
// load; the package embeds them so that tests read the same bytes: their
// expressions are checked by promtool here, and (Check) against a fresh
// daemon's first scrape in cmd/tally-openstack-collector/internal/daemon and
// a running collector's /metrics in cmd/tally-openstack-collector/e2e.
package prometheus

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// RulesFile is the Prometheus rules file, the one source of the rules.
//
//go:embed tally-openstack-collector.rules.yml
var RulesFile []byte

// DashboardFile is the Grafana dashboard.
//
//go:embed tally-openstack-collector.dashboard.json
var DashboardFile []byte

// Rule is one rule of RulesFile.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Rules answers the rules of every group of RulesFile.
func Rules() ([]Rule, error) {
	var f struct {
		Groups []struct {
			Rules []Rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(RulesFile, &f); err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	var rs []Rule
	for _, g := range f.Groups {
		rs = append(rs, g.Rules...)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("rules file: no rules")
	}
	return rs, nil
}

// labelValues is the form of the dashboard's template variable queries.
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// DashboardQueries answers the PromQL of the dashboard, named by where it
// is: "panel <title> <refId>" for each panel target, and "variable <name>"
// for each query variable, whose label_values(selector, label) is given as
// the equivalent `count by (label) (selector)`. Grafana's variables ($job,
// $__rate_interval) are left in place.
func DashboardQueries() (map[string]string, error) {
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(DashboardFile, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	qs := map[string]string{}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			qs["panel "+p.Title+" "+t.RefID] = t.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("dashboard: variable %s: query %v is not label_values(selector, label)", v.Name, v.Query)
		}
		qs["variable "+v.Name] = fmt.Sprintf("count by (%s) (%s)", m[2], m[1])
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("dashboard: no queries")
	}
	return qs, nil
}

// Queries answers every expression of the alerts ("alert <name>") and of
// the dashboard (DashboardQueries).
func Queries() (map[string]string, error) {
	rs, err := Rules()
	if err != nil {
		return nil, err
	}
	qs, err := DashboardQueries()
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Alert != "" {
			qs["alert "+r.Alert] = r.Expr
		}
	}
	return qs, nil
}
