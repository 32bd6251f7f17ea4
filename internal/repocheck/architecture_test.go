package repocheck

import (
	"encoding/json"
	"go/ast"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureListsEveryPackage: docs/architecture.md's package table
// names every directory of the tree that holds a Go package (other than its
// tests), and every row names a directory that exists. A path with a
// `<placeholder>` component stands for every directory at that place.
func TestArchitectureListsEveryPackage(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `([^`]+)/` \\|")
	var rows []string
	for _, m := range row.FindAllStringSubmatch(readDoc(t, "architecture.md"), -1) {
		rows = append(rows, m[1])
	}
	if len(rows) < 10 {
		t.Fatalf("found %d rows in the package table: %v", len(rows), rows)
	}
	covers := func(pattern, dir string) bool {
		ps, ds := strings.Split(pattern, "/"), strings.Split(dir, "/")
		if len(ps) > len(ds) {
			return false
		}
		for i, p := range ps {
			if !strings.HasPrefix(p, "<") && p != ds[i] {
				return false
			}
		}
		// A placeholder row covers what is below it; a plain row only its
		// own directory.
		return len(ps) == len(ds) || strings.HasPrefix(ps[len(ps)-1], "<")
	}
	used := map[string]bool{}
	for _, f := range tree(t) {
		if used[f.dir] {
			continue
		}
		used[f.dir] = true
		found := false
		for _, r := range rows {
			if covers(r, f.dir) {
				used[r], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("docs/architecture.md's package table has no row for %s/", f.dir)
		}
	}
	for _, r := range rows {
		if !used[r] {
			t.Errorf("docs/architecture.md's package table lists %s/, which holds no Go package", r)
		}
	}
}

// declared is what the tree declares, by the names the docs use for it:
// "pkg.Func", "pkg.Type.Method" (methods and interface methods alike).
type declared map[string]bool

func declarations(t *testing.T) declared {
	d := declared{}
	for _, f := range tree(t) {
		pkg := f.file.Name.Name
		for _, decl := range f.file.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					d[pkg+"."+decl.Name.Name] = true
					continue
				}
				typ := decl.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if g, ok := typ.(*ast.IndexExpr); ok {
					typ = g.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					d[pkg+"."+id.Name+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					d[pkg+"."+ts.Name.Name] = true
					if it, ok := ts.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								d[pkg+"."+ts.Name.Name+"."+n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return d
}

// has reports whether name (Type.Method or Func) is declared in pkg, or in
// any package when pkg is empty.
func (d declared) has(pkg, name string) bool {
	if pkg != "" {
		return d[pkg+"."+name]
	}
	for k := range d {
		if strings.HasSuffix(k, "."+name) && strings.Count(k, ".") == strings.Count(name, ".")+1 {
			return true
		}
	}
	return false
}

// TestDataPathNamesExist: every function and method that docs/architecture.md's
// walk through the data path names (`pkg.(*Type).Method`, `(*Type).Method`,
// `pkg.Func`, `Iface.Method`) is declared in the tree, in the package it
// names: the walk is the code as it runs, not as it once ran.
func TestDataPathNamesExist(t *testing.T) {
	doc := readDoc(t, "architecture.md")
	start := strings.Index(doc, "## The data path, function by function")
	end := strings.Index(doc, "## Where things live")
	if start < 0 || end < start {
		t.Fatal(`docs/architecture.md has no section "The data path, function by function" before "Where things live"`)
	}
	section := doc[start:end]
	d := declarations(t)
	packages := map[string]bool{}
	for k := range d {
		packages[strings.SplitN(k, ".", 2)[0]] = true
	}
	method := regexp.MustCompile("`(?:([a-z][a-z0-9]*)\\.)?\\(\\*?([A-Za-z_][A-Za-z0-9_]*)\\)\\.([A-Za-z_][A-Za-z0-9_]*)`")
	plain := regexp.MustCompile("`([A-Za-z][A-Za-z0-9]*)\\.([A-Za-z_][A-Za-z0-9_]*)`")
	checked := 0
	for _, m := range method.FindAllStringSubmatch(section, -1) {
		checked++
		if !d.has(m[1], m[2]+"."+m[3]) {
			t.Errorf("the data path names %s, which the tree does not declare", m[0])
		}
	}
	for _, m := range plain.FindAllStringSubmatch(section, -1) {
		switch {
		case packages[m[1]]: // pkg.Func or pkg.Type
			checked++
			if !d.has(m[1], m[2]) {
				t.Errorf("the data path names %s, which package %s does not declare", m[0], m[1])
			}
		case m[1][0] >= 'A' && m[1][0] <= 'Z': // Type.Method, an interface's method
			checked++
			if !d.has("", m[1]+"."+m[2]) {
				t.Errorf("the data path names %s, which the tree does not declare", m[0])
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d names checked in the data path: the pattern no longer matches the doc", checked)
	}
}

// An import rule of docs/architecture.md: the packages matched by from
// have no dependency, direct or not, matched by to (unless allowed).
type importRule struct {
	doc   string // the rule as the doc states it
	from  func(pkg string) bool
	to    func(dep string) bool
	allow func(dep string) bool
}

func under(prefix string) func(string) bool {
	return func(p string) bool { return p == module+"/"+prefix || strings.HasPrefix(p, module+"/"+prefix+"/") }
}

func is(paths ...string) func(string) bool {
	return func(p string) bool {
		for _, q := range paths {
			if p == module+"/"+q {
				return true
			}
		}
		return false
	}
}

func stdlib(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

func anyOf(fs ...func(string) bool) func(string) bool {
	return func(p string) bool {
		for _, f := range fs {
			if f(p) {
				return true
			}
		}
		return false
	}
}

var importRules = []importRule{
	{doc: "The host never imports wasm-sdk, except wasm-sdk/secret, wasm-sdk/jsonstr, wasm-sdk/contract, wasm-sdk/jsonindex (with wasm-sdk/internal/abi/kind) and wasm-sdk/timestamp",
		from:  not(anyOf(under("wasm-sdk"), isGuestMapper, under("examples"))),
		to:    under("wasm-sdk"),
		allow: is("wasm-sdk/secret", "wasm-sdk/jsonstr", "wasm-sdk/contract", "wasm-sdk/jsonindex", "wasm-sdk/internal/abi/kind", "wasm-sdk/timestamp")},
	{doc: "mappers import only wasm-sdk and its packages",
		from:  isGuestMapper,
		to:    not(stdlib),
		allow: under("wasm-sdk")},
	{doc: "runtime/input/channel/client and wire import neither the daemon's packages nor anything outside the standard library",
		from:  anyOf(is("runtime/input/channel/client"), is("runtime/input/channel/wire")),
		to:    not(stdlib),
		allow: is("runtime/input/channel/wire")},
	{doc: "broker does not import channel",
		from: under("runtime/input/broker"), to: under("runtime/input/channel")},
	{doc: "sender never imports outbox, nor runtime/input/broker",
		from: is("sender"), to: anyOf(under("outbox"), under("runtime/input/broker"))},
	{doc: "broker never imports sender",
		from: under("runtime/input/broker"), to: under("sender")},
	{doc: "the inputs never import sender",
		from: under("runtime/input"), to: under("sender")},
	{doc: "runtime/catalog knows no AMQP",
		from: under("runtime/catalog"), to: func(p string) bool { return strings.HasPrefix(p, "github.com/rabbitmq/") }},
	{doc: "broker knows no catalogue",
		from: under("runtime/input/broker"), to: under("runtime/catalog")},
	{doc: "Neither runtime nor runtime/pipeline imports outbox itself (outbox/ledger only)",
		from: anyOf(is("runtime"), is("runtime/pipeline")), to: under("outbox"), allow: is("outbox/ledger")},
	{doc: "outbox and sender know nothing of WebAssembly or of where a message came from",
		from: anyOf(under("outbox"), under("sender")),
		to:   anyOf(under("runtime"), under("wasm-sdk"), func(p string) bool { return strings.HasPrefix(p, "github.com/tetratelabs/") }),
		// the credential-name rule (through internal/redact), the JSON
		// indexer (the ledger reads an event's keys with it) and the one JSON
		// unescaper (jsonindex's and internal/redact's), all
		// dependency-free packages of the SDK's module; and the table of
		// kind numbers jsonindex.Kind takes its numbers from, constants only
		allow: is("wasm-sdk/secret", "wasm-sdk/jsonindex", "wasm-sdk/jsonstr", "wasm-sdk/internal/abi/kind")},
	{doc: "only cmd/ reads settings (koanf) and wires the packages",
		from: not(under("cmd")),
		to:   anyOf(under("cmd"), func(p string) bool { return strings.HasPrefix(p, "github.com/knadh/koanf") })},
}

// isGuestMapper: a mapper's own package, mappers/<name> (built for wasip1).
func isGuestMapper(p string) bool {
	rest, ok := strings.CutPrefix(p, module+"/mappers/")
	return ok && !strings.Contains(rest, "/") && rest != "internal"
}

// TestImportRules: the import rules of docs/architecture.md hold for every
// package and every one of its dependencies (go list -deps), tests aside.
func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-deps=false", "-json=ImportPath,Deps", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath string
		Deps       []string
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for _, r := range importRules {
		matched := 0
		for _, p := range pkgs {
			if !r.from(p.ImportPath) {
				continue
			}
			matched++
			for _, dep := range p.Deps {
				if r.to(dep) && (r.allow == nil || !r.allow(dep)) && dep != p.ImportPath {
					t.Errorf("%s depends on %s, against the rule %q", strings.TrimPrefix(p.ImportPath, module+"/"), dep, r.doc)
				}
			}
		}
		if matched == 0 {
			t.Errorf("the rule %q matches no package", r.doc)
		}
	}
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return isGuestMapper(p.ImportPath) }) {
		t.Error("no mapper package found under mappers/")
	}
}

// supportedAPI is the set docs/architecture.md's "supported API" column
// marks: the packages another module may import and hold the project to.
var supportedAPI = []string{
	"runtime/conformance",
	"runtime/fixture",
	"runtime/input/channel/client",
	"runtime/input/channel/wire",
	"wasm-sdk",
	"wasm-sdk/contract",
	"wasm-sdk/jsonindex",
	"wasm-sdk/jsonstr",
	"wasm-sdk/openstack",
	"wasm-sdk/secret",
	"wasm-sdk/timestamp",
}

// exampleImports are the unmarked packages a program under examples/ may
// import, each for the reason docs/architecture.md gives beside the table.
var exampleImports = map[string]string{
	"examples/publisher": "runtime/input/broker", // broker.ParseTransportURL, the one transport URL parser
}

// TestSupportedAPI: the "supported API" column of docs/architecture.md's
// package table marks exactly supportedAPI, and the programs under
// examples/, which show another module how to use the collector, import no
// package of this repository that the column leaves unmarked (their own
// packages and exampleImports aside). What other modules import cannot be
// checked from here; what the examples teach them to import can.
func TestSupportedAPI(t *testing.T) {
	doc := readDoc(t, "architecture.md")
	if !strings.Contains(doc, "| path | package | supported API | owns |") {
		t.Fatal(`docs/architecture.md's package table has no "supported API" column`)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)/` \\|[^|]*\\| *([^| ]*) *\\|")
	var marked []string
	rows := 0
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		rows++
		switch m[2] {
		case "yes":
			marked = append(marked, m[1])
		case "":
		default:
			t.Errorf("docs/architecture.md marks %s/ with %q; the column holds yes or nothing", m[1], m[2])
		}
	}
	if rows < 10 {
		t.Fatalf("found %d rows in the package table", rows)
	}
	slices.Sort(marked)
	if !slices.Equal(marked, supportedAPI) {
		t.Errorf("docs/architecture.md marks %v as supported API, want %v", marked, supportedAPI)
	}

	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports", "./examples/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	programs := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		programs++
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok || under("examples")(imp) || slices.Contains(supportedAPI, dep) || exampleImports[from] == dep {
				continue
			}
			t.Errorf("%s imports %s, which is not a supported API (docs/architecture.md, \"Packages\")", from, dep)
		}
	}
	if programs < 3 {
		t.Fatalf("go list found %d packages under examples/", programs)
	}
}
