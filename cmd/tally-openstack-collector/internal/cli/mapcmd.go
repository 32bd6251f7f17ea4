package cli

// The offline tools: map and mapper test. Both load the same modules as the
// daemon (built-in, then --mappers) and go through the same pipeline.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

const mapUsage = `Usage: tally-openstack-collector map [--mappers DIR] [FILE|DIR...]

Maps notifications offline with the built-in mappers and the drop-ins of DIR,
as the daemon would. Input (FILEs, the files below each DIR, or stdin without
any): JSON, one document per file or one per line; each is an AMQP body (the
oslo envelope), a bare oslo message, or a line of --dump output. One canonical
event per line on stdout; on stderr a summary, in total and by service (read,
mapped, skipped with the reason, failed). Exit 0 when every input was read.

Flags:
`

const mapperTestUsage = `Usage: tally-openstack-collector mapper test [--mappers DIR] [DIR...]

Runs the fixture pairs (<case>.in.json -> <case>.out.json) found in each DIR
and its subdirectories through the compiled modules (built-in, then the
drop-ins of --mappers). Without DIR, the fixtures beside the drop-ins are run.
Prints one line per case and "N passed, N failed"; exits non-zero on any
failure.

Flags:
`

// offlineFlags are --mappers and the mapper settings; the others are hidden.
func offlineFlags(name string) *pflag.FlagSet {
	return shortFlags(name, settings.ModeOffline, "mappers", "mappers_dir", "drop-in directory of .wasm modules, on top of the built-in ones (TALLY_OSC_MAPPERS_DIR)")
}

func offlineSetup(name, usage string, args, environ []string, stdout, stderr io.Writer) (*settings.Config, *pflag.FlagSet, zerolog.Logger, int) {
	return offlineSetupWith(offlineFlags(name), usage, args, environ, stdout, stderr)
}

// offlineSetupWith is offlineSetup on the flags fs (offlineFlags and more).
func offlineSetupWith(fs *pflag.FlagSet, usage string, args, environ []string, stdout, stderr io.Writer) (*settings.Config, *pflag.FlagSet, zerolog.Logger, int) {
	if code := parseFlags(fs, usage, args, stdout, stderr); code >= 0 {
		return nil, nil, zerolog.Nop(), code
	}
	takeShortFlag(fs, "mappers", "mappers_dir")
	cfg, err := settings.Load(fs, environ, settings.ModeOffline)
	if err == nil && cfg.MappersDir != "" {
		if fi, serr := os.Stat(cfg.MappersDir); serr != nil || !fi.IsDir() {
			err = &settings.ConfigError{Problems: []string{fmt.Sprintf("--mappers %s: not a directory", cfg.MappersDir)}}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, zerolog.Nop(), 2
	}
	level := cfg.LogLevel
	if level < zerolog.WarnLevel && settings.LookupEnv(environ, settings.EnvPrefix+"LOG_LEVEL") == "" && !fs.Changed("log-level") {
		level = zerolog.WarnLevel // a tool: quiet unless asked
	}
	return cfg, fs, daemon.NewLogger(stderr, cfg.LogFormat, level), -1
}

func runMap(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if slices.Contains(args, "--diff") {
		return runMapDiff(args, environ, stdin, stdout, stderr)
	}
	cfg, fs, log, code := offlineSetup("map", mapUsage, args, environ, stdout, stderr)
	if code >= 0 {
		return code
	}
	ctx := context.Background()
	ms, err := daemon.OfflineMappers(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "map: %v\n", err)
		return 1
	}
	defer func() { _ = ms.Close(ctx) }() // the modules hold nothing to keep

	out := bufio.NewWriter(stdout)
	defer func() { _ = out.Flush() }() // the early returns; the result's own Flush below is checked
	sum := newMapSummary(serviceOf(ms.Catalog.Status().Patterns))
	process := func(doc []byte) {
		msg, ok := inputMessage(doc)
		if !ok {
			sum.count(pipeline.Result{Outcome: pipeline.Unparseable, Reason: "dump_unparseable"})
			return
		}
		r := ms.Pipeline.Process(ctx, msg)
		sum.count(r)
		for _, e := range r.Events {
			out.Write(e)
			out.WriteByte('\n')
		}
	}
	if err := readInputs(fs.Args(), stdin, process); err != nil {
		_ = out.Flush() // the read error is the one to report
		fmt.Fprintf(stderr, "map: %v\n", err)
		return 1
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "map: write: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, sum.String())
	_ = sum.writeByService(stderr)
	return 0
}

// inputMessage is the message of one input document of map; false for a
// --dump line of a body the dump could not read.
func inputMessage(doc []byte) (pipeline.Message, bool) {
	msg := pipeline.Message{Body: doc}
	var top struct {
		Exchange    string `json:"exchange"`
		RoutingKey  string `json:"routing_key"`
		Unparseable any    `json:"unparseable"`
	}
	if json.Unmarshal(doc, &top) == nil {
		msg.Exchange, msg.RoutingKey = top.Exchange, top.RoutingKey
		if top.Unparseable != nil {
			return msg, false
		}
	}
	return msg, true
}

// readInputs hands every document of the inputs of map (the files and
// directories of args, or stdin without any) to process.
func readInputs(args []string, stdin io.Reader, process func([]byte)) error {
	if len(args) == 0 {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		splitDocuments(b, process)
		return nil
	}
	files, err := inputFiles(args)
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		splitDocuments(b, process)
	}
	return nil
}

// inputFiles expands the arguments of map: a file stands for itself, a
// directory for every regular file below it whose name does not begin with
// a dot, in lexical order.
func inputFiles(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, a)
			continue
		}
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != a && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// splitDocuments calls f with the whole input when it is one JSON document,
// else with each non-empty line.
func splitDocuments(b []byte, f func([]byte)) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return
	}
	if json.Valid(t) {
		f(t)
		return
	}
	for _, line := range bytes.Split(t, []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			f(line)
		}
	}
}

// tally counts the outcomes of a set of inputs: all of them, or those of
// one service.
type tally struct {
	read, mapped, skipped, unparseable, failed, events int
	reasons                                            map[string]int // outcome/reason -> count
}

func (t *tally) count(r pipeline.Result) {
	if t.reasons == nil {
		t.reasons = map[string]int{}
	}
	t.read++
	switch r.Outcome {
	case pipeline.Mapped:
		t.mapped++
		t.events += len(r.Events)
		return
	case pipeline.Skipped:
		t.skipped++
	case pipeline.Unparseable:
		t.unparseable++
	case pipeline.Failed:
		t.failed++
	}
	t.reasons[r.Outcome.String()+"/"+r.Reason]++
}

// detail lists the reasons counted under outcome prefix: " (unclaimed: 2)".
func (t *tally) detail(prefix string) string {
	var parts []string
	for k, n := range t.reasons {
		if r, ok := strings.CutPrefix(k, prefix+"/"); ok {
			parts = append(parts, fmt.Sprintf("%s: %d", r, n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

func (t *tally) String() string {
	return fmt.Sprintf("read %d, mapped %d (%d events), skipped %d%s, unparseable %d%s, failed %d%s",
		t.read, t.mapped, t.events, t.skipped, t.detail("skipped"), t.unparseable, t.detail("unparseable"), t.failed, t.detail("failed"))
}

// mapSummary is the summary map prints on stderr: the total, and the same
// counts by service, so that a capture of a cloud's traffic shows at a glance
// which services are mapped and what is skipped, and why.
type mapSummary struct {
	tally
	services map[string]*tally
	// bySegment names the service of an event type by its first segment
	// ("compute" -> "nova"), from the include patterns of the active modules.
	bySegment map[string]string
}

func newMapSummary(bySegment map[string]string) *mapSummary {
	return &mapSummary{services: map[string]*tally{}, bySegment: bySegment}
}

func (s *mapSummary) count(r pipeline.Result) {
	s.tally.count(r)
	key := s.service(r)
	t := s.services[key]
	if t == nil {
		t = &tally{}
		s.services[key] = t
	}
	t.count(r)
}

// service names the service an input belongs to: the module that mapped it
// (or failed on it); else the module whose patterns begin with the same
// segment as its type ("compute.metrics.update" belongs to nova, which claims
// compute.instance.*); else the type's first segment as a family
// ("identity.*"); "(no event type)" for an input without one.
func (s *mapSummary) service(r pipeline.Result) string {
	if r.Module != "" {
		name, _, _ := strings.Cut(r.Module, "@")
		return name
	}
	if r.EventType == "" {
		return "(no event type)"
	}
	seg, _, _ := strings.Cut(r.EventType, ".")
	if name, ok := s.bySegment[seg]; ok {
		return name
	}
	return seg + ".*"
}

// writeByService writes one line per service, sorted by name.
func (s *mapSummary) writeByService(w io.Writer) error {
	keys := make([]string, 0, len(s.services))
	for k := range s.services {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "by service:")
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%s\n", k, s.services[k].short())
	}
	return tw.Flush()
}

// short is String without the outcomes that did not occur (read and mapped
// always show).
func (t *tally) short() string {
	var b strings.Builder
	fmt.Fprintf(&b, "read %d, mapped %d (%d events)", t.read, t.mapped, t.events)
	for _, o := range []struct {
		name string
		n    int
	}{{"skipped", t.skipped}, {"unparseable", t.unparseable}, {"failed", t.failed}} {
		if o.n > 0 {
			fmt.Fprintf(&b, ", %s %d%s", o.name, o.n, t.detail(o.name))
		}
	}
	return b.String()
}

// serviceOf maps the first segment of each include pattern of the active
// modules to the module's name ("compute.instance.*" -> "compute": "nova").
// A segment that holds a wildcard, or that two modules share, names no
// service.
func serviceOf(patterns []catalog.PatternStatus) map[string]string {
	out := map[string]string{}
	shared := map[string]bool{}
	for _, p := range patterns {
		seg, _, _ := strings.Cut(strings.TrimPrefix(p.Pattern, "!"), ".")
		if seg == "" || strings.ContainsAny(seg, "*?[") || strings.HasPrefix(p.Pattern, "!") {
			continue
		}
		name, _, _ := strings.Cut(p.Active, "@")
		if prev, ok := out[seg]; ok && prev != name {
			shared[seg] = true
		}
		out[seg] = name
	}
	for seg := range shared {
		delete(out, seg)
	}
	return out
}

func runMapperTest(args, environ []string, stdout, stderr io.Writer) int {
	cfg, flags, log, code := offlineSetup("mapper test", mapperTestUsage, args, environ, stdout, stderr)
	if code >= 0 {
		return code
	}
	roots := flags.Args()
	if len(roots) == 0 {
		if cfg.MappersDir == "" {
			fmt.Fprintln(stderr, "mapper test: name fixture directories, or --mappers DIR to run the fixtures beside the drop-ins")
			return 2
		}
		roots = []string{cfg.MappersDir}
	}
	var dirs []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if m, _ := filepath.Glob(filepath.Join(p, "*"+fixture.InSuffix)); len(m) > 0 {
					dirs = append(dirs, p)
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintf(stderr, "mapper test: %v\n", err)
			return 2
		}
	}
	if len(dirs) == 0 {
		fmt.Fprintf(stderr, "mapper test: no fixture pairs (*%s) under %s\n", fixture.InSuffix, strings.Join(roots, ", "))
		return 1
	}
	ctx := context.Background()
	ms, err := daemon.OfflineMappers(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "mapper test: %v\n", err)
		return 1
	}
	defer func() { _ = ms.Close(ctx) }() // the modules hold nothing to keep
	mapFn := func(in []byte) ([]byte, error) {
		r := ms.Pipeline.Process(ctx, pipeline.Message{Body: in})
		switch r.Outcome {
		case pipeline.Mapped:
			return fixture.Document(r.Events), nil
		case pipeline.Skipped:
			return fixture.Document(nil), nil
		case pipeline.Failed:
			return fixture.HostDocument(runtime.Result{}, r.Err)
		}
		return nil, fmt.Errorf("unparseable: %s", r.Reason)
	}
	passed, failed := 0, 0
	for _, dir := range dirs {
		results, err := fixture.Run(dir, mapFn, false)
		if err != nil {
			fmt.Fprintf(stderr, "mapper test: %v\n", err)
			return 1
		}
		for _, r := range results {
			name := filepath.Join(dir, r.Case.Name)
			if r.Err != nil {
				failed++
				fmt.Fprintf(stdout, "FAIL %s\n    %s\n", name, strings.ReplaceAll(r.Err.Error(), "\n", "\n    "))
				continue
			}
			passed++
			fmt.Fprintf(stdout, "ok   %s\n", name)
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}
