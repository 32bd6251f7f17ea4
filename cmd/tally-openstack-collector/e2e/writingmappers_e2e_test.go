package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// docTestMarker marks a fenced block of docs/writing-mappers.md that
// TestEndToEndWritingMappersDoc runs; "<!-- doc-test: FILE -->" marks a Go block
// that replaces, in FILE, the function it declares.
const docTestMarker = "<!-- doc-test"

// docStep is one marked block of the doc.
type docStep struct {
	file string // for a Go block: the file whose function it replaces
	body string // the block, its indentation removed
	line int    // where the block begins in the doc
}

// docSteps reads the marked blocks of the doc, in order.
func docSteps(t *testing.T, doc string) []docStep {
	t.Helper()
	var steps []docStep
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, docTestMarker) {
			continue
		}
		file := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(l, docTestMarker), ":"), "-->"))
		if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```") {
			t.Fatalf("docs/writing-mappers.md:%d: a marker not followed by a fenced block", i+1)
		}
		indent := lines[i+1][:len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " "))]
		var body []string
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			t.Fatalf("docs/writing-mappers.md:%d: a block that does not end", i+2)
		}
		steps = append(steps, docStep{file: file, body: strings.Join(body, "\n") + "\n", line: i + 2})
		i = j
	}
	return steps
}

// TestEndToEndWritingMappersDoc follows docs/writing-mappers.md, "A new mapper", in a
// copy of the tree: it runs every block the doc marks, as it is written, with
// the collector on the PATH, the capture the doc describes in the working
// directory and TALLY_OSC_MAPPERS_DIR set to an empty directory, as on a
// collector's host. The Go block of the mapping replaces the function main.go
// declares. Every command must succeed, and the last (map of the capture with
// the drop-in) must map each of the capture's magnum notifications with the
// new module. Then, as the doc's last step says, a daemon with that drop-in
// directory and the exchange magnum in TALLY_OSC_EXCHANGES receives the
// capture's notifications from the broker and delivers one event of the new
// module for each. A doc whose commands no longer work, or that no longer has
// them, fails it.
func TestEndToEndWritingMappersDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a new mapper in a copy of the tree and runs it in the daemon")
	}
	testkit.RequireBroker(t)
	gitBin := testkit.LookPath(t, "git", "git")
	testkit.LookPath(t, "make", "make")
	bash := testkit.LookPath(t, "bash", "bash")
	root := testkit.RepoRoot(t)
	doc := testkit.ReadFile(t, filepath.Join(root, "docs", "writing-mappers.md"))
	steps := docSteps(t, string(doc))
	if len(steps) < 6 {
		t.Fatalf("docs/writing-mappers.md marks %d blocks; the loop has more steps", len(steps))
	}

	b := buildBinaries(t)
	tree := t.TempDir()
	testkit.CopyWorkingTree(t, gitBin, root, tree)
	capture := testkit.ReadFile(t, filepath.Join("testdata", "writing-mappers", "magnum.dump"))
	if err := os.WriteFile(filepath.Join(tree, "magnum.dump"), capture, 0o644); err != nil {
		t.Fatal(err)
	}
	dropins := t.TempDir()
	env := append(testkit.CleanMakeEnv(),
		"PATH="+filepath.Dir(b.collector)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TALLY_OSC_MAPPERS_DIR="+dropins,
		"TALLY_OSC_MAPPER_CACHE_DIR="+testkit.CacheDir(t))

	var last string
	for _, s := range steps {
		if s.file != "" {
			replaceFunc(t, filepath.Join(tree, s.file), s)
			continue
		}
		cmd := exec.Command(bash, "-e", "-o", "pipefail", "-c", s.body)
		cmd.Dir = tree
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docs/writing-mappers.md:%d:\n%s: %v\n%s", s.line, s.body, err, out)
		}
		t.Logf("docs/writing-mappers.md:%d:\n%s%s", s.line, s.body, out)
		last = string(out)
	}

	// The capture's magnum notifications, as oslo messages.
	var bodies [][]byte
	for _, line := range bytes.Split(bytes.TrimSpace(capture), []byte("\n")) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if string(m["exchange"]) != `"magnum"` {
			continue
		}
		delete(m, "exchange")
		delete(m, "routing_key")
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	mapped := 0
	sc := bufio.NewScanner(strings.NewReader(last))
	for sc.Scan() {
		var ev storedEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Source.Mapper == "magnum@0.1.0" && strings.HasPrefix(ev.EventType, "magnum.cluster.") {
			mapped++
		}
	}
	if mapped != len(bodies) || !strings.Contains(last, "failed 0") {
		t.Fatalf("the last step mapped %d notifications with magnum@0.1.0, want %d, and none failed:\n%s", mapped, len(bodies), last)
	}

	// The daemon, with the drop-in and the exchange added.
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, "magnum")
	a := startAPI(t, b)
	c := newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=magnum", "TALLY_OSC_MAPPERS_DIR="+dropins)
	c.start(t)
	c.waitReady(t)
	v.Publish(t, "magnum", "notifications.info", bodies...)
	testkit.WaitFor(t, 60*time.Second, "the daemon delivers an event of magnum@0.1.0 for each notification", func() bool {
		evs, _ := a.events(t)
		n := 0
		for _, ev := range evs {
			if ev.Source.Mapper == "magnum@0.1.0" && ev.Source.Exchange == "magnum" {
				n++
			}
		}
		return n == len(bodies)
	})
	if code, _ := c.p.stop(t, 40*time.Second); code != 0 {
		t.Fatalf("collector exit %d", code)
	}
}

// replaceFunc replaces, in the Go file path, the function the block s
// declares (from its "func NAME(" to the end of its body) with the block.
func replaceFunc(t *testing.T, path string, s docStep) {
	t.Helper()
	head, _, ok := strings.Cut(s.body, "(")
	if !ok || !strings.HasPrefix(head, "func ") {
		t.Fatalf("docs/writing-mappers.md:%d: the Go block does not begin with a function", s.line)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("docs/writing-mappers.md:%d: %v", s.line, err)
	}
	src := string(b)
	i := strings.Index(src, head+"(")
	if i < 0 {
		t.Fatalf("docs/writing-mappers.md:%d: %s declares no %s", s.line, path, head)
	}
	end := strings.Index(src[i:], "\n}\n")
	if end < 0 {
		t.Fatalf("docs/writing-mappers.md:%d: %s: the end of %s not found", s.line, path, head)
	}
	src = src[:i] + s.body + src[i+end+len("\n}\n"):]
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
