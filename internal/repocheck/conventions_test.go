package repocheck

import (
	"go/ast"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestSentinelErrorsLiveInErrorsGo: "Sentinel errors of a package live in
// its errors.go" (docs/architecture.md). A sentinel is a package-level
// variable made by errors.New or fmt.Errorf.
func TestSentinelErrorsLiveInErrorsGo(t *testing.T) {
	found := 0
	for _, f := range tree(t) {
		for _, decl := range f.file.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					if !isErrorConstructor(v) {
						continue
					}
					found++
					if f.name != "errors.go" {
						t.Errorf("%s/%s declares the sentinel error %s outside errors.go", f.dir, f.name, vs.Names[i].Name)
					}
				}
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d sentinel errors: the check no longer sees them", found)
	}
}

func isErrorConstructor(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && (pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf")
}

// metricsPkg is the package whose functions declare a metric from its name.
const metricsPkg = module + "/internal/metrics"

// declaring are the functions of metricsPkg that declare a metric from its
// name, their first argument, and whether it is a counter.
var declaring = map[string]bool{"Counter": true, "CounterVec": true, "Gauge": false, "GaugeFunc": false, "Histogram": false}

// TestMetricNames: "Metric names start with tally_collector_; counters end in
// _total" (docs/architecture.md). It reads the name of every metric declared
// by a function of internal/metrics (a string), and the Name of every
// Prometheus options literal in the tree outside internal/metrics: a string,
// or a call of a function of the same package that returns a string literal
// followed by its argument (the prefix helpers some packages keep).
func TestMetricNames(t *testing.T) {
	files := tree(t)
	// prefixes: "dir.func" -> the literal a helper returns before its argument.
	prefixes := map[string]string{}
	for _, f := range files {
		for _, decl := range f.file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil || len(fd.Body.List) != 1 {
				continue
			}
			ret, ok := fd.Body.List[0].(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			if bin, ok := ret.Results[0].(*ast.BinaryExpr); ok && bin.Op == token.ADD {
				if s, ok := stringLit(bin.X); ok {
					prefixes[f.dir+"."+fd.Name.Name] = s
				}
			}
		}
	}
	checked := 0
	check := func(f goFile, name string, counter bool) {
		checked++
		if !strings.HasPrefix(name, "tally_collector_") {
			t.Errorf("%s/%s: metric %s does not start with tally_collector_", f.dir, f.name, name)
		}
		if counter && !strings.HasSuffix(name, "_total") {
			t.Errorf("%s/%s: counter %s does not end in _total", f.dir, f.name, name)
		}
		if !counter && strings.HasSuffix(name, "_total") {
			t.Errorf("%s/%s: %s ends in _total but is not a counter", f.dir, f.name, name)
		}
	}
	for _, f := range files {
		metricsName := importName(f.file, metricsPkg)
		ast.Inspect(f.file, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && metricsName != "" {
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				counter, declares := declaring[sel.Sel.Name]
				if x, isIdent := sel.X.(*ast.Ident); !isIdent || x.Name != metricsName || !declares || len(call.Args) == 0 {
					return true
				}
				if name, ok := stringLit(call.Args[0]); ok {
					check(f, name, counter)
				} else {
					t.Errorf("%s/%s: a metric's name is not a string this check can read", f.dir, f.name)
				}
				return true
			}
			cl, ok := n.(*ast.CompositeLit)
			if !ok || f.dir == "internal/metrics" { // its functions pass on the name their callers give
				return true
			}
			sel, ok := cl.Type.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
				return true
			}
			for _, el := range cl.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key := kv.Key.(*ast.Ident).Name
				if key == "Namespace" || key == "Subsystem" {
					t.Errorf("%s/%s: a metric name is built with %s; write the whole name", f.dir, f.name, key)
				}
				if key != "Name" {
					continue
				}
				name, ok := stringLit(kv.Value)
				if call, isCall := kv.Value.(*ast.CallExpr); isCall && len(call.Args) == 1 {
					fn, _ := call.Fun.(*ast.Ident)
					arg, argOK := stringLit(call.Args[0])
					prefix, known := "", false
					if fn != nil {
						prefix, known = prefixes[f.dir+"."+fn.Name]
					}
					if known && argOK {
						name, ok = prefix+arg, true
					} else if known && strings.HasPrefix(prefix, "tally_collector_") {
						checked++ // a prefix helper called with a variable: the prefix holds
						continue
					}
				}
				if !ok {
					t.Errorf("%s/%s: a metric's Name is not a string this check can read", f.dir, f.name)
					continue
				}
				check(f, name, sel.Sel.Name == "CounterOpts")
			}
			return true
		})
	}
	if checked < 50 {
		t.Fatalf("checked only %d metric names: the check no longer sees them", checked)
	}
}

// importName is the name under which f imports path; "" when it does not.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path[strings.LastIndexByte(path, '/')+1:]
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
