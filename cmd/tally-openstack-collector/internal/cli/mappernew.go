package cli

// mapper new: a new mapper's directory, from templates built into the
// binary (mappertmpl/), with fixture pairs from a --dump capture.

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

const mapperNewUsage = `Usage: tally-openstack-collector mapper new NAME [--exchange EXCHANGE] [--event-type GLOB]... [--from CAPTURE] [--dir DIR]

Writes a new mapper's directory, mappers/NAME of the clone of this repository
the command runs in (or DIR, below the clone's mappers/): main.go with the
manifest (NAME, version 0.1.0, the event types), a mapping to start from, a
golden and a fuzz test, and testdata/ with the fixture inputs: the
notifications of CAPTURE (--dump output) of the claimed types, at most 3 of
each, or else one made-up example. The last line names what to do next.
Without --event-type, the types the capture holds (of EXCHANGE) are claimed.

Flags:
`

//go:embed mappertmpl/*.tmpl
var mapperTemplates embed.FS

// maxPairsPerType bounds the fixture inputs mapper new takes from a capture
// for one event type.
const maxPairsPerType = 3

// provenanceHeader is the header of every PROVENANCE.tsv of the mappers'
// fixtures (12 columns).
const provenanceHeader = "file\tservice\tevent_type\tsource_repo\tsource_path\trelease_date\tsource_commit\tsource_label\tshape\trealism\tnotes\tlocal_change"

// newMapper is what the templates of mapper new are filled with.
type newMapper struct {
	Name, Exchange, Func, ResourceType, ResourceIDPath, ActionPrefix string
	EventTypes                                                       []string
	ExampleType                                                      string
	UnclaimedPath, SchemaPath                                        string
}

// TypeList is the event types as the package doc lists them.
func (n newMapper) TypeList() string { return strings.Join(n.EventTypes, ", ") }

// TypesGo is the event types as Go string literals.
func (n newMapper) TypesGo() string {
	q := make([]string, len(n.EventTypes))
	for i, t := range n.EventTypes {
		q[i] = strconv.Quote(t)
	}
	return strings.Join(q, ", ")
}

// fixtureInput is one fixture input mapper new writes.
type fixtureInput struct {
	name, eventType, realism string
	doc                      []byte
}

func runMapperNew(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("mapper new", pflag.ContinueOnError)
	fs.SortFlags = false
	exchange := fs.String("exchange", "", "the exchange the service publishes its notifications on (default NAME)")
	types := fs.StringArray("event-type", nil, "an event type glob the mapper claims (repeatable; ! excludes)")
	from := fs.String("from", "", "a --dump capture: its notifications of the claimed types become the fixture inputs")
	dir := fs.String("dir", "", "the directory to write, below the clone's mappers/ (default mappers/NAME)")
	if code := parseFlags(fs, mapperNewUsage, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "mapper new: name the mapper: tally-openstack-collector mapper new NAME (try --help)\n")
		return 2
	}
	name := fs.Arg(0)
	if *exchange == "" {
		*exchange = name
	}
	if *dir == "" {
		*dir = filepath.Join("mappers", name)
	}
	next, err := writeNewMapper(name, *exchange, *types, *from, *dir)
	if err != nil {
		fmt.Fprintf(stderr, "mapper new: %v\n", err)
		if errors.Is(err, errMapperNewUsage) {
			return 2
		}
		return 1
	}
	fmt.Fprint(stdout, next)
	return 0
}

// writeNewMapper writes the mapper's directory and returns what to print:
// the files written and, last, what to do next.
func writeNewMapper(name, exchange string, types []string, from, dir string) (string, error) {
	var inputs []fixtureInput
	if from != "" {
		captured, err := captureTypes(from, exchange)
		if err != nil {
			return "", err
		}
		if len(types) == 0 {
			for t := range captured {
				types = append(types, t)
			}
			sort.Strings(types)
		}
	}
	if len(types) == 0 {
		return "", fmt.Errorf("%w: give the event types with --event-type, or a capture of them with --from", errMapperNewUsage)
	}
	mf := runtime.Manifest{Name: name, Version: "0.1.0", EventTypes: types}
	b, _ := json.Marshal(mf)
	if _, err := runtime.ParseManifest(b); err != nil {
		return "", fmt.Errorf("%w: %w", errMapperNewUsage, err)
	}
	root, err := cloneRoot(dir)
	if err != nil {
		return "", err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return "", fmt.Errorf("%s exists and is not empty", dir)
	}
	if from != "" {
		if inputs, err = captureInputs(from, mf); err != nil {
			return "", err
		}
		if len(inputs) == 0 {
			return "", fmt.Errorf("%s holds no notification of %s", from, strings.Join(types, ", "))
		}
	} else {
		in, err := exampleInput(mf)
		if err != nil {
			return "", err
		}
		inputs = []fixtureInput{in}
	}
	rel := func(p string) (string, error) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		r, err := filepath.Rel(abs, filepath.Join(root, p))
		return filepath.ToSlash(r), err
	}
	n := newMapper{Name: name, Exchange: exchange, EventTypes: types, Func: "map" + goName(name)}
	n.ResourceType, n.ActionPrefix = resourceAndPrefix(types)
	n.ResourceIDPath = "payload." + n.ResourceType + "_id"
	n.ExampleType = inputs[0].eventType
	if n.UnclaimedPath, err = rel("mappers/testdata/unclaimed"); err != nil {
		return "", err
	}
	if n.SchemaPath, err = rel("docs/event.schema.json"); err != nil {
		return "", err
	}
	files, err := renderMapper(n)
	if err != nil {
		return "", err
	}
	prov := []string{provenanceHeader}
	for _, in := range inputs {
		files["testdata/"+in.name+fixture.InSuffix] = in.doc
		prov = append(prov, strings.Join([]string{in.name + fixture.InSuffix, name, in.eventType, "", "", "", "", "", "inner oslo.message", in.realism, "", ""}, "\t"))
	}
	files["testdata/PROVENANCE.tsv"] = []byte(strings.Join(prov, "\n") + "\n")

	var out strings.Builder
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil { //nolint:gosec // G301: a source tree for its author, readable as any checkout is
			return "", err
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil { //nolint:gosec // G306: source files, readable as any checkout is
			return "", err
		}
		fmt.Fprintf(&out, "wrote %s\n", full)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	relDir, err := filepath.Rel(root, abs)
	if err != nil {
		return "", err
	}
	relDir = filepath.ToSlash(relDir)
	build := "make mapper NAME=" + name
	if relDir != "mappers/"+name {
		build += " MAPPER_DIR=" + relDir
	}
	fmt.Fprintf(&out, "next: go test ./%s -run TestGolden -update, check testdata/*.out.json against docs/events.md, "+
		"then %s; once it is dropped in, add %s to TALLY_OSC_EXCHANGES and restart the collector\n", relDir, build, exchange)
	return out.String(), nil
}

// cloneRoot finds the clone of this repository dir is to be written in: the
// tests mapper new writes use the clone's fixture runner, schema and
// unclaimed samples by relative paths.
func cloneRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "mappers", "mappers.mk")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "docs", "event.schema.json")); err == nil {
				if !strings.HasPrefix(abs, filepath.Join(d, "mappers")+string(filepath.Separator)) {
					return "", fmt.Errorf("%w: %s is not below %s: a mapper's directory is in the clone's mappers/", errMapperNewUsage, dir, filepath.Join(d, "mappers"))
				}
				return d, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%w: %s is not in a clone of tally-openstack-collector (no mappers/mappers.mk above it): run mapper new at the root of a clone", errMapperNewUsage, dir)
		}
	}
}

// goName is name as the end of a Go identifier: "magnum-v2" -> "MagnumV2".
func goName(name string) string {
	var b strings.Builder
	up := true
	for _, c := range name {
		switch {
		case c == '-' || c == '_':
			up = true
		case up && c >= 'a' && c <= 'z':
			b.WriteRune(c - 'a' + 'A')
			up = false
		default:
			b.WriteRune(c)
			up = false
		}
	}
	return b.String()
}

// resourceAndPrefix derives, from the include globs, the resource type (the
// second segment of the first: "magnum.cluster.*" -> "cluster") and the
// prefix the action follows (the dotted segments every glob begins with:
// "magnum.cluster.").
func resourceAndPrefix(types []string) (resource, prefix string) {
	var lits [][]string
	for _, t := range types {
		if strings.HasPrefix(t, "!") {
			continue
		}
		segs := strings.Split(t, ".")
		var lit []string
		for _, s := range segs[:len(segs)-1] {
			if strings.ContainsAny(s, "*?[") {
				break
			}
			lit = append(lit, s)
		}
		lits = append(lits, lit)
	}
	resource = "resource"
	if first := strings.Split(strings.TrimPrefix(types[0], "!"), "."); len(first) > 1 && !strings.ContainsAny(first[1], "*?[") {
		resource = first[1]
	}
	if len(lits) == 0 {
		return resource, ""
	}
	common := lits[0]
	for _, l := range lits[1:] {
		i := 0
		for i < len(common) && i < len(l) && common[i] == l[i] {
			i++
		}
		common = common[:i]
	}
	if len(common) == 0 {
		return resource, ""
	}
	return resource, strings.Join(common, ".") + "."
}

// renderMapper fills the templates: file name (below the mapper's
// directory) -> content, the Go files formatted.
func renderMapper(n newMapper) (map[string][]byte, error) {
	t, err := template.ParseFS(mapperTemplates, "mappertmpl/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("templates: %w", err)
	}
	files := map[string][]byte{}
	for _, tt := range t.Templates() {
		var b bytes.Buffer
		if err := tt.Execute(&b, n); err != nil {
			return nil, fmt.Errorf("template %s: %w", tt.Name(), err)
		}
		name := strings.TrimSuffix(tt.Name(), ".tmpl")
		src, err := format.Source(b.Bytes())
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", tt.Name(), err)
		}
		files[name] = src
	}
	return files, nil
}

// dumpLines calls f with each line of a --dump capture (a file, or the files
// below a directory) that holds a notification: its exchange and its inner
// oslo message, the members of the line but exchange and routing_key.
func dumpLines(capture string, f func(exchange, eventType string, msg []byte)) error {
	return readInputs([]string{capture}, nil, func(doc []byte) {
		var members map[string]json.RawMessage
		if json.Unmarshal(doc, &members) != nil {
			return
		}
		var exchange, eventType string
		_ = json.Unmarshal(members["exchange"], &exchange)
		if json.Unmarshal(members["event_type"], &eventType) != nil || eventType == "" {
			return
		}
		if _, bad := members["unparseable"]; bad {
			return
		}
		delete(members, "exchange")
		delete(members, "routing_key")
		f(exchange, eventType, innerMessage(members))
	})
}

// innerMessage writes members as an oslo message: the members a dump line
// puts first in its order, then the others by name, indented.
func innerMessage(members map[string]json.RawMessage) []byte {
	first := []string{"message_id", "event_type", "timestamp", "publisher_id", "priority", "payload"}
	var keys []string
	for k := range members {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := indexOf(first, keys[i]), indexOf(first, keys[j])
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(members[k])
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if json.Indent(&out, b.Bytes(), "", "  ") != nil {
		return append(b.Bytes(), '\n')
	}
	return append(out.Bytes(), '\n')
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return len(list)
}

// captureTypes lists the event types of a capture, of exchange's deliveries
// (or of every delivery when the capture names no exchange).
func captureTypes(capture, exchange string) (map[string]bool, error) {
	types := map[string]bool{}
	err := dumpLines(capture, func(ex, et string, _ []byte) {
		if ex == "" || ex == exchange {
			types[et] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	return types, nil
}

// captureInputs takes the fixture inputs from a capture: its notifications
// whose event types mf claims, at most maxPairsPerType of each type.
func captureInputs(capture string, mf runtime.Manifest) ([]fixtureInput, error) {
	var inputs []fixtureInput
	count := map[string]int{}
	err := dumpLines(capture, func(_, et string, msg []byte) {
		if ok, _ := mf.Match(et); !ok || count[et] >= maxPairsPerType {
			return
		}
		count[et]++
		inputs = append(inputs, fixtureInput{
			name: fmt.Sprintf("%s__capture__%d", et, count[et]), eventType: et,
			realism: "captured with --dump", doc: msg,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	return inputs, nil
}

// exampleInput is the made-up fixture input mapper new writes without a
// capture: a notification of the first include glob's type, its wildcards
// filled in.
func exampleInput(mf runtime.Manifest) (fixtureInput, error) {
	var et string
	for _, g := range mf.EventTypes {
		if strings.HasPrefix(g, "!") {
			continue
		}
		et = strings.NewReplacer("*", "create.end", "?", "x").Replace(g)
		break
	}
	if ok, _ := mf.Match(et); !ok || strings.ContainsAny(et, "[]") {
		return fixtureInput{}, fmt.Errorf("%w: no example of %s can be made up: give a capture with --from", errMapperNewUsage, strings.Join(mf.EventTypes, ", "))
	}
	msg := map[string]any{
		"message_id":          "00000000-0000-4000-8000-000000000001",
		"event_type":          et,
		"timestamp":           "2026-01-01 00:00:00.000000",
		"publisher_id":        mf.Name + ".example-host",
		"priority":            "INFO",
		"payload":             map[string]any{"id": "00000000-0000-4000-8000-000000000002", "project_id": "00000000000040008000000000000003"},
		"_context_user_id":    "00000000000040008000000000000004",
		"_context_project_id": "00000000000040008000000000000003",
	}
	raw := map[string]json.RawMessage{}
	for k, v := range msg {
		b, err := json.Marshal(v)
		if err != nil {
			return fixtureInput{}, err
		}
		raw[k] = b
	}
	return fixtureInput{name: et + "__example", eventType: et, realism: "made up by mapper new: replace it by a captured one", doc: innerMessage(raw)}, nil
}
