package cli

// map --diff: what a new version of a module changes in the events, on
// captured notifications, before it is shipped.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

const mapDiffUsage = `Usage: tally-openstack-collector map --diff OLD NEW [--examples N] [--mappers DIR] [CAPTURE...]

Maps every captured notification (CAPTUREs: --dump output or any input map
reads; stdin without any) with two versions of a module, OLD and NEW: each a
.wasm file or the name of a module of the catalogue (built-in or drop-in).
Prints per event type how many events are the same, changed, or produced by
one version only; which members changed and how often; and up to N examples
(redacted). source.mapper, which names the version, is not compared.

Exit 1 when a member billing reads changes (resource_id, project_id, or a
quantity or size: vcpus, memory_mb, root_gb, ephemeral_gb, disk_gb, size_gb,
size_bytes, volume_size_gb, bytes_received, bytes_sent), or when an event is
produced by one version only; 0 otherwise; 2 for usage or I/O errors.

Flags:
`

// billingMembers are the members billing reads (docs/events.md): the
// resource, the project, and the quantities and sizes.
var billingMembers = map[string]bool{
	"resource_id": true, "project_id": true,
	"attributes.vcpus": true, "attributes.memory_mb": true, "attributes.root_gb": true, "attributes.ephemeral_gb": true,
	"attributes.disk_gb": true, "attributes.size_gb": true, "attributes.size_bytes": true, "attributes.volume_size_gb": true,
	"attributes.bytes_received": true, "attributes.bytes_sent": true,
}

// diffType is what map --diff found for one event type.
type diffType struct {
	same, changed, onlyOld, onlyNew int
	members                         map[string]int
	examples                        []string
}

// diffReport is map --diff's result, per event type.
type diffReport struct {
	types       map[string]*diffType
	notes       int
	billing     map[string]bool
	maxExamples int
}

func (r *diffReport) of(eventType string) *diffType {
	if eventType == "" {
		eventType = "(none)"
	}
	d := r.types[eventType]
	if d == nil {
		d = &diffType{members: map[string]int{}}
		r.types[eventType] = d
	}
	return d
}

// compare records the events OLD and NEW made of one notification.
func (r *diffReport) compare(eventType string, olds, news [][]byte) {
	if len(olds) == 0 && len(news) == 0 {
		return
	}
	d := r.of(eventType)
	for i := range max(len(olds), len(news)) {
		switch {
		case i >= len(olds):
			d.onlyNew++
			r.billing["(an event only NEW makes)"] = true
			continue
		case i >= len(news):
			d.onlyOld++
			r.billing["(an event only OLD makes)"] = true
			continue
		}
		a, b := flatten(olds[i]), flatten(news[i])
		var changed []string
		for _, k := range slices.Sorted(maps.Keys(union(a, b))) {
			if k == "source.mapper" || a[k] == b[k] {
				continue
			}
			changed = append(changed, k)
			d.members[k]++
			if billingMembers[k] {
				r.billing[k] = true
			}
		}
		if len(changed) == 0 {
			d.same++
			continue
		}
		d.changed++
		if len(d.examples) < r.maxExamples {
			var ex strings.Builder
			fmt.Fprintf(&ex, "event %s:", orNone(a["event_id"]))
			for _, k := range changed {
				fmt.Fprintf(&ex, "\n      %s: %s -> %s", k, orNone(a[k]), orNone(b[k]))
			}
			d.examples = append(d.examples, ex.String())
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

func union(a, b map[string]string) map[string]bool {
	u := make(map[string]bool, len(a)+len(b))
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

// flatten reads an event, its credentials redacted, into member path ->
// JSON value.
func flatten(ev []byte) map[string]string {
	out := map[string]string{}
	var v any
	d := json.NewDecoder(bytes.NewReader(redact.JSON(nil, ev)))
	d.UseNumber()
	if d.Decode(&v) != nil {
		out[""] = string(ev)
		return out
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, c := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, c)
			}
			return
		}
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
	walk("", v)
	return out
}

// write prints the report.
func (r *diffReport) write(w io.Writer, oldID, newID string) {
	fmt.Fprintf(w, "map --diff %s -> %s: %d notifications\n", oldID, newID, r.notes)
	for _, t := range slices.Sorted(maps.Keys(r.types)) {
		d := r.types[t]
		fmt.Fprintf(w, "%s: %d same, %d changed, %d only in OLD, %d only in NEW\n", t, d.same, d.changed, d.onlyOld, d.onlyNew)
		if len(d.members) > 0 {
			keys := slices.SortedFunc(maps.Keys(d.members), func(a, b string) int {
				if d.members[a] != d.members[b] {
					return d.members[b] - d.members[a]
				}
				return strings.Compare(a, b)
			})
			var parts []string
			for _, k := range keys {
				p := fmt.Sprintf("%s %d", k, d.members[k])
				if billingMembers[k] {
					p += " (billing)"
				}
				parts = append(parts, p)
			}
			fmt.Fprintf(w, "  members changed: %s\n", strings.Join(parts, ", "))
		}
		for _, ex := range d.examples {
			fmt.Fprintf(w, "  %s\n", ex)
		}
	}
	if len(r.billing) == 0 {
		fmt.Fprintln(w, "no member billing reads changed")
		return
	}
	fmt.Fprintf(w, "billing changes: %s\n", strings.Join(slices.Sorted(maps.Keys(r.billing)), ", "))
}

// diffModule resolves OLD or NEW: a .wasm file, loaded on its own, or a
// module of the catalogue by name.
func diffModule(ctx context.Context, ms *daemon.Mappers, arg string) (pipeline.Mapper, error) {
	if strings.HasSuffix(arg, ".wasm") || strings.ContainsRune(arg, os.PathSeparator) {
		b, err := os.ReadFile(arg)
		if err != nil {
			return nil, err
		}
		return ms.Engine.Load(ctx, arg, b)
	}
	m, ok := ms.Catalog.Named(arg)
	if !ok {
		return nil, fmt.Errorf("%q is neither a .wasm file nor a module of the catalogue", arg)
	}
	return m, nil
}

var _ pipeline.Mapper = (*runtime.Module)(nil)

// runMapDiff is map --diff.
func runMapDiff(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := offlineFlags("map --diff")
	fs.Bool("diff", true, "compare two versions of a module")
	examples := fs.Int("examples", 3, "examples shown per event type at most")
	cfg, fs, log, code := offlineSetupWith(fs, mapDiffUsage, args, environ, stdout, stderr)
	if code >= 0 {
		return code
	}
	if fs.NArg() < 2 {
		fmt.Fprint(stderr, mapDiffUsage)
		return 2
	}
	ctx := context.Background()
	ms, err := daemon.OfflineMappers(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "map --diff: %v\n", err)
		return 2
	}
	defer func() { _ = ms.Close(ctx) }() // the modules hold nothing to keep
	var mods [2]pipeline.Mapper
	for i, arg := range fs.Args()[:2] {
		if mods[i], err = diffModule(ctx, ms, arg); err != nil {
			fmt.Fprintf(stderr, "map --diff: %v\n", err)
			return 2
		}
	}
	rep := &diffReport{types: map[string]*diffType{}, billing: map[string]bool{}, maxExamples: max(0, *examples)}
	process := func(doc []byte) {
		msg, ok := inputMessage(doc)
		if !ok {
			return
		}
		rep.notes++
		var evs [2][][]byte
		eventType := ""
		for i, m := range mods {
			msg.Modules = []pipeline.Mapper{m}
			r := ms.Pipeline.Process(ctx, msg)
			if r.Outcome == pipeline.Mapped {
				evs[i] = r.Events
			}
			if eventType == "" {
				eventType = r.EventType
			}
		}
		rep.compare(eventType, evs[0], evs[1])
	}
	if err := readInputs(fs.Args()[2:], stdin, process); err != nil {
		fmt.Fprintf(stderr, "map --diff: %v\n", err)
		return 2
	}
	rep.write(stdout, mods[0].ID(), mods[1].ID())
	if len(rep.billing) > 0 {
		return 1
	}
	return 0
}
