package prometheus

// A small reader of the PromQL the shipped files use, and the check of their
// expressions against what a collector exports. The metric selectors are read
// out of the PromQL with a tokenizer (Refs) rather than the Prometheus
// module's parser, which would bring the whole Prometheus server into go.mod;
// promtool checks that every expression parses (rules_test.go), and
// TestPromQLRefs pins what the tokenizer reads out of the forms the files use.

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// TargetLabels are the labels Prometheus adds to every scraped series: a
// query may use them although the collector does not export them.
var TargetLabels = map[string]bool{"job": true, "instance": true}

// Matcher is one label matcher of a selector.
type Matcher struct{ Label, Op, Value string }

// Selector is a metric selector found in an expression.
type Selector struct {
	Metric   string
	Matchers []Matcher
}

// Refs reads the metric selectors of a PromQL expression, and the
// label names of its by, without, on, ignoring, group_left and group_right
// clauses. Grafana's variables ($name, ${name}) are skipped.
func Refs(expr string) (sels []Selector, grouping []string, err error) {
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
	matchers := func(i int) ([]Matcher, int, error) { // toks[i] == "{"
		var ms []Matcher
		i++
		for i < len(toks) && toks[i] != "}" {
			if toks[i] == "," {
				i++
				continue
			}
			if i+2 >= len(toks) || !isIdent(toks[i]) || !isMatchOp(toks[i+1]) || !isString(toks[i+2]) {
				return nil, i, fmt.Errorf("bad matcher at %q", strings.Join(toks[i:min(i+3, len(toks))], " "))
			}
			ms = append(ms, Matcher{toks[i], toks[i+1], unquote(toks[i+2])})
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
			s := Selector{Matchers: ms}
			for _, m := range ms {
				if m.Label == "__name__" && m.Op == "=" {
					s.Metric = m.Value
				}
			}
			if s.Metric == "" {
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
			s := Selector{Metric: t}
			if n == "{" {
				ms, j, err := matchers(i + 1)
				if err != nil {
					return nil, nil, err
				}
				s.Matchers = ms
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

// Exported is what a scrape of /metrics holds: for every metric name (a
// histogram's base name and its _bucket, _sum and _count), its label names
// and the values each label takes.
type Exported map[string]map[string]map[string]bool

// Check checks every query (Queries) against what a collector exports, and
// answers the problems found and the number of selectors checked: each
// metric a query selects is exported, with each label it matches on (a
// label matched with = has that value on some series), and each label of
// its by, on, without and group clauses is exported by a metric it selects.
// job and instance, the labels of the scrape, pass everywhere.
func Check(have Exported, queries map[string]string) (problems []string, checked int) {
	names := make([]string, 0, len(queries))
	for n := range queries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, where := range names {
		sels, grouping, err := Refs(queries[where])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no metric found in %q", where, queries[where]))
		}
		selected := map[string]bool{} // labels of the metrics the expression selects
		for _, s := range sels {
			labels, ok := have[s.Metric]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", where, s.Metric))
				continue
			}
			checked++
			for l := range labels {
				selected[l] = true
			}
			for _, m := range s.Matchers {
				if TargetLabels[m.Label] || m.Label == "__name__" {
					continue
				}
				values, ok := labels[m.Label]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %s", where, s.Metric, m.Label))
					continue
				}
				if m.Op == "=" && !values[m.Value] {
					problems = append(problems, fmt.Sprintf("%s: %s{%s} never takes the value %q", where, s.Metric, m.Label, m.Value))
				}
			}
		}
		for _, l := range grouping {
			if !TargetLabels[l] && !selected[l] {
				problems = append(problems, fmt.Sprintf("%s: groups by %s, which none of its metrics exports", where, l))
			}
		}
	}
	return problems, checked
}
