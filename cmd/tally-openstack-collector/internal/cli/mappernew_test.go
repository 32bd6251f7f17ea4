package cli

import (
	"bytes"
	"encoding/json"
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
)

// fakeClone is a directory with what mapper new looks for in a clone: the
// mappers' make file and the event schema.
func fakeClone(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{"mappers/mappers.mk", "docs/event.schema.json"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// capture writes a --dump capture of the notifications (exchange, oslo
// message), the lines as the dump writes them.
func capture(t *testing.T, dir string, notes [][2]string) string {
	t.Helper()
	var b []byte
	for _, n := range notes {
		b = broker.DumpLine(b, n[0], "notifications.info", []byte(n[1]))
	}
	p := filepath.Join(dir, "capture.dump")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func note(eventType, id string) string {
	return `{"message_id":"` + id + `","event_type":"` + eventType + `","timestamp":"2026-01-02 03:04:05.000000","publisher_id":"magnum.host",` +
		`"priority":"INFO","payload":{"id":"c1","password":"hunter2"},"_context_project_id":"p1"}`
}

// mapper new writes main.go with the manifest, the event types and the
// exchange; a golden and a fuzz test naming the new mapper alone, with
// attributes of its own allowed; the capture's notifications of the claimed
// types as fixture inputs (at most 3 a type, in the inner oslo form, redacted
// as the dump wrote them), with their provenance rows; and last, what to do
// next, the exchange for TALLY_OSC_EXCHANGES included.
func TestMapperNewFromCapture(t *testing.T) {
	root := fakeClone(t)
	notes := [][2]string{{"magnum", note("compute.instance.create.end", "n0")}}
	for i := range 5 {
		notes = append(notes, [2]string{"magnum", note("magnum.cluster.create", "c"+string(rune('0'+i)))})
	}
	notes = append(notes, [2]string{"magnum", note("magnum.cluster.delete", "d0")})
	cp := capture(t, root, notes)
	dir := filepath.Join(root, "mappers", "magnum")
	code, out, errOut := runCmd(t, "", nil, "mapper", "new", "magnum", "--exchange", "magnum-ex",
		"--event-type", "magnum.cluster.*", "--from", cp, "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	testkit.WantAll(t, "the last line", last, "go test ./mappers/magnum", "make mapper NAME=magnum", "magnum-ex", "TALLY_OSC_EXCHANGES")
	read := func(name string) string {
		t.Helper()
		return string(testkit.ReadFile(t, filepath.Join(dir, name)))
	}
	for _, f := range []string{"main.go", "golden_test.go", "fuzz_test.go"} {
		src := read(f)
		if formatted, err := format.Source([]byte(src)); err != nil || !bytes.Equal(formatted, []byte(src)) {
			t.Errorf("%s is not gofmt's: %v", f, err)
		}
		if strings.Contains(src, "octavia") || strings.Contains(src, "WorkedExample") {
			t.Errorf("%s names another mapper:\n%s", f, src)
		}
	}
	testkit.WantAll(t, "main.go", read("main.go"), `Name:       "magnum"`, `EventTypes: []string{"magnum.cluster.*"}`, `"magnum-ex"`, "func mapMagnum(", `"cluster"`, `"magnum.cluster."`)
	testkit.WantAll(t, "golden_test.go", read("golden_test.go"), "mapMagnum", "FreeForm: true", `"../testdata/unclaimed"`, `"../../docs/event.schema.json"`, `EventType: "magnum.cluster.create"`)
	ins, _ := filepath.Glob(filepath.Join(dir, "testdata", "*.in.json"))
	var names []string
	for _, in := range ins {
		names = append(names, filepath.Base(in))
		var msg map[string]any
		b, _ := os.ReadFile(in)
		if err := json.Unmarshal(b, &msg); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if _, ok := msg["exchange"]; ok {
			t.Errorf("%s keeps the dump's exchange", in)
		}
		if p, _ := msg["payload"].(map[string]any); p["password"] != "[redacted]" {
			t.Errorf("%s: payload %v", in, msg["payload"])
		}
	}
	want := []string{"magnum.cluster.create__capture__1.in.json", "magnum.cluster.create__capture__2.in.json",
		"magnum.cluster.create__capture__3.in.json", "magnum.cluster.delete__capture__1.in.json"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("fixture inputs %v, want %v", names, want)
	}
	prov := strings.Split(strings.TrimRight(read("testdata/PROVENANCE.tsv"), "\n"), "\n")
	if len(prov) != len(want)+1 {
		t.Fatalf("PROVENANCE.tsv has %d lines, want a header and %d rows", len(prov), len(want))
	}
	for _, row := range prov {
		if n := len(strings.Split(row, "\t")); n != 12 {
			t.Errorf("PROVENANCE.tsv row of %d columns, want 12: %q", n, row)
		}
	}
}

// Without --event-type the capture's types of the exchange are claimed;
// without a capture one made-up input of the claimed type is written.
func TestMapperNewDefaults(t *testing.T) {
	root := fakeClone(t)
	cp := capture(t, root, [][2]string{{"magnum", note("magnum.cluster.update", "u0")}, {"nova", note("compute.instance.exists", "e0")}})
	dir := filepath.Join(root, "mappers", "magnum")
	if code, out, errOut := runCmd(t, "", nil, "mapper", "new", "magnum", "--from", cp, "--dir", dir); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "main.go")); !strings.Contains(string(b), `EventTypes: []string{"magnum.cluster.update"}`) {
		t.Errorf("main.go:\n%s", b)
	}
	dir2 := filepath.Join(root, "mappers", "other")
	if code, out, errOut := runCmd(t, "", nil, "mapper", "new", "other", "--event-type", "other.thing.*", "--dir", dir2); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir2, "testdata", "other.thing.create.end__example.in.json")); err != nil {
		t.Error(err)
	}
}

// mapper new refuses, writing nothing: a name the manifest would refuse, no
// event type, a directory that is not empty, a directory outside a clone's
// mappers/.
func TestMapperNewRefuses(t *testing.T) {
	root := fakeClone(t)
	full := filepath.Join(root, "mappers", "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"Magnum", "--event-type", "magnum.*", "--dir", filepath.Join(root, "mappers", "m1")}, 2, "only a-z"},
		{[]string{"magnum", "--dir", filepath.Join(root, "mappers", "m2")}, 2, "--event-type"},
		{[]string{"full", "--event-type", "magnum.*", "--dir", full}, 1, "not empty"},
		{[]string{"magnum", "--event-type", "magnum.*", "--dir", filepath.Join(t.TempDir(), "magnum")}, 2, "clone"},
		{[]string{"magnum", "--event-type", "magnum.*", "--dir", filepath.Join(root, "docs", "magnum")}, 2, "mappers/"},
		{nil, 2, "name the mapper"},
	} {
		code, _, errOut := runCmd(t, "", nil, append([]string{"mapper", "new"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("mapper new %v: exit %d, %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	for _, d := range []string{"m1", "m2"} {
		if _, err := os.Stat(filepath.Join(root, "mappers", d)); err == nil {
			t.Errorf("mappers/%s written", d)
		}
	}
}
