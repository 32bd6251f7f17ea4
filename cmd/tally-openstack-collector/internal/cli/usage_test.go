package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// runCommands are the command names Run's switch accepts, read from its
// source: what --help must list.
func runCommands(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "cli.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Run" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, _ := strconv.Unquote(lit.Value)
					names = append(names, name)
				}
			}
			return true
		})
	}
	if len(names) < 10 {
		t.Fatalf("found only %v in Run's switch", names)
	}
	return names
}

// The top usage lists every command Run accepts, and every subcommand each
// command's own usage lists (deadletter's purge among them).
func TestUsageListsEveryCommand(t *testing.T) {
	code, out, _ := runCmd(t, "", nil, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, name := range runCommands(t) {
		if name == "" || name == "help" {
			continue
		}
		if !strings.Contains(out, "  tally-openstack-collector "+name+" ") && !strings.Contains(out, "  tally-openstack-collector "+name+"\n") {
			t.Errorf("--help does not list the command %q", name)
		}
	}
	for cmd, usage := range map[string]string{"deadletter": deadletterUsage, "mappers": mappersUsage} {
		top := regexp.MustCompile(`(?m)^  tally-openstack-collector ` + cmd + ` \[?([a-z|]+)`).FindStringSubmatch(out)
		if top == nil {
			t.Fatalf("--help has no line for %s", cmd)
		}
		listed := strings.Split(top[1], "|")
		for _, m := range regexp.MustCompile(`tally-openstack-collector `+cmd+` \[?([a-z]+)`).FindAllStringSubmatch(usage, -1) {
			if !slices.Contains(listed, m[1]) {
				t.Errorf("--help lists %s %v, without %q of its own usage", cmd, listed, m[1])
			}
		}
	}
}

// Flags that take a number or a duration say so in --help, not "string".
func TestUsageNamesFlagTypes(t *testing.T) {
	_, out, _ := runCmd(t, "", nil, "--help")
	for flag, typ := range map[string]string{"prefetch": "int", "batch-max": "int", "reporting-timeout": "duration", "stop-timeout": "duration", "channel-socket-mode": "octal"} {
		m := regexp.MustCompile(`(?m)^\s+--` + flag + ` (\S+)`).FindStringSubmatch(out)
		if m == nil || m[1] != typ {
			t.Errorf("--%s is shown as %v, want %s", flag, m, typ)
		}
	}
	if m := regexp.MustCompile(`(?m)^\s+--(\S+) string .*\(default "[0-9]+(ms|s|m|h)?"\)`).FindString(out); m != "" {
		t.Errorf("a numeric flag shown as a string: %s", m)
	}
}
