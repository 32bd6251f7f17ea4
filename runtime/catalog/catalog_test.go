package catalog_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func TestRoutingBuiltinsDropInsAndTies(t *testing.T) {
	dir := t.TempDir()
	drop(t, dir, "special.wasm", "special")
	drop(t, dir, "tie.wasm", "tie")
	c := newCatalog(t, catalog.Options{
		Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1")},
		Dir:     dir,
	})
	p := newPipeline(c)

	// The most specific claim wins, whatever the origin.
	if ev := mapOne(t, p, "test.special", "m1"); ev.Variant != "special" || ev.Source.Mapper != "special@1.0.0" {
		t.Errorf("test.special went to %+v", ev)
	}
	// echo (built-in) and tie (drop-in) both claim test.*: the drop-in wins the tie.
	if ev := mapOne(t, p, "test.other", "m2"); ev.Source.Mapper != "tie@1.0.0" {
		t.Errorf("test.other went to %s, want the drop-in tie@1.0.0", ev.Source.Mapper)
	}
	// Nobody claims it.
	r := p.Process(context.Background(), pipeline.Message{Body: body("volume.create.end", "m3")})
	if r.Outcome != pipeline.Skipped || r.Reason != pipeline.ReasonUnclaimed {
		t.Errorf("unclaimed type: %v %q", r.Outcome, r.Reason)
	}
	st := c.Status()
	if len(st.Conflicts) != 1 || !strings.Contains(st.Conflicts[0], "echo@1.0.0") || !strings.Contains(st.Conflicts[0], "tie@1.0.0 wins") {
		t.Errorf("conflicts: %q", st.Conflicts)
	}
	var pats []string
	for _, ps := range st.Patterns {
		pats = append(pats, ps.Pattern+"="+ps.Active+"/"+ps.Origin+"/"+ps.State)
	}
	want := "test.*=echo@1.0.0/builtin/active test.*=tie@1.0.0/drop-in/active test.special=special@1.0.0/drop-in/active"
	if got := strings.Join(pats, " "); got != want {
		t.Errorf("patterns:\n got %s\nwant %s", got, want)
	}
}

func TestStartupDropInOverridesBuiltinOfSameName(t *testing.T) {
	_, c, p := catalogOn(t, catalog.Options{Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1")}}, "echo.wasm", "echo_v2")
	if ev := mapOne(t, p, "test.a", "m1"); ev.Source.Mapper != "echo@2.0.0" || ev.Variant != "two" {
		t.Errorf("at start-up the drop-in should be active at once, got %+v", ev)
	}
	m := mustModule(t, c, "echo")
	if m.State != catalog.StateActive || m.Builtin == nil || m.Builtin.ID != "echo@1.0.0" {
		t.Errorf("module status %+v", m)
	}
}

func TestStartupDuplicateNamesHigherVersionWins(t *testing.T) {
	dir := t.TempDir()
	drop(t, dir, "a-echo.wasm", "echo_v2")
	_, c, p := catalogOn(t, catalog.Options{Dir: dir}, "b-echo.wasm", "echo_v1")
	if ev := mapOne(t, p, "test.a", "m1"); ev.Source.Mapper != "echo@2.0.0" {
		t.Errorf("got %s, want the higher version", ev.Source.Mapper)
	}
	if f, ok := fileState(c.Status(), dir, "b-echo.wasm"); !ok || f.State != "parked" {
		t.Errorf("the lower version should be parked: %+v", c.Status().Files)
	}
}

func TestRejectedModulesLeaveServiceUnaffected(t *testing.T) {
	dir := t.TempDir()
	copyFixtures(t, dir, "echo", "echo.fixtures")
	reg := prometheus.NewRegistry()
	_, c, p := catalogOn(t, catalog.Options{Dir: dir, Registerer: reg}, "echo.wasm", "echo_v1")
	if ev := mapOne(t, p, "test.a", "m0"); ev.Source.Mapper != "echo@1.0.0" {
		t.Fatalf("start: %+v", ev)
	}
	if r := c.Status().LastReload; r == nil || !r.OK || r.Trigger != "start" {
		t.Fatalf("start-up reload: %+v", r)
	}

	cases := []struct {
		name, file string
		put        func()
		reason     string
	}{
		{"corrupt", "broken.wasm", func() { dropBytes(t, dir, "broken.wasm", []byte("\x00asm\x01\x00\x00\x00garbage")) }, "compile"},
		{"forbidden import", "forbidden.wasm", func() { drop(t, dir, "forbidden.wasm", "forbidden") }, "env"},
		{"failing its fixtures", "echo.wasm", func() { drop(t, dir, "echo.wasm", "echo_v2") }, "fixture pairs failed"},
		{"corrupt in place", "echo.wasm", func() { dropBytes(t, dir, "echo.wasm", []byte("not wasm at all")) }, "invalid mapper module"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.put()
			r := reload(t, c)
			if r.OK || len(r.Rejected) != 1 || r.Rejected[0].File != filepath.Join(dir, tc.file) ||
				!strings.Contains(r.Rejected[0].Reason, tc.reason) {
				t.Fatalf("reload result %+v, want %s rejected for %q", r, tc.file, tc.reason)
			}
			// Service unaffected: echo@1.0.0 still maps.
			if ev := mapOne(t, p, "test.a", "m"+tc.name); ev.Source.Mapper != "echo@1.0.0" || ev.Variant != "one" {
				t.Errorf("after a rejected module: %+v", ev)
			}
			st := c.Status()
			if f, ok := fileState(st, dir, tc.file); !ok || f.State != "rejected" || !strings.Contains(f.Reason, tc.reason) {
				t.Errorf("file status %+v", st.Files)
			}
			if st.LastReload == nil || st.LastReload.OK || st.Reloads["error"] != i+1 {
				t.Errorf("last reload %+v, reloads %v", st.LastReload, st.Reloads)
			}
			if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Migration != nil {
				t.Errorf("a rejected module must not start a migration: %+v", m)
			}
			// Not retried while the content is unchanged.
			if again := c.Reload(context.Background()); again.Changed {
				t.Errorf("unchanged rejected file reloaded again: %+v", again)
			}
		})
	}
	if got := testkit.Metric(t, reg, "tally_collector_mapper_reloads_total", "error"); got != float64(len(cases)) {
		t.Errorf("reloads_total{result=error} = %v, want %d", got, len(cases))
	}

	// Repairing the file brings it back (as a candidate of the active echo).
	drop(t, dir, "echo.wasm", "echo_v1b")
	if r := reload(t, c); !r.OK {
		t.Fatalf("repaired: %+v", r)
	}
	if m := mustModule(t, c, "echo"); m.Migration == nil || m.Migration.Candidate.ID != "echo@1.0.1" {
		t.Errorf("repaired module should shadow the active one: %+v", m)
	}
}

func TestUnreadableDirectoryChangesNothing(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "mappers")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	_, c, p := catalogOn(t, catalog.Options{Dir: sub}, "echo.wasm", "echo_v1")
	if err := os.Rename(sub, sub+".gone"); err != nil {
		t.Fatal(err)
	}
	r := c.Reload(context.Background())
	if r.OK || r.Error == "" {
		t.Errorf("reload of a missing directory: %+v", r)
	}
	if ev := mapOne(t, p, "test.a", "m1"); ev.Source.Mapper != "echo@1.0.0" {
		t.Errorf("a missing directory must not remove the modules: %+v", ev)
	}
}

func TestFixturesChangedAloneAreRunAgain(t *testing.T) {
	dir := t.TempDir()
	copyFixtures(t, dir, "echo", "echo.fixtures")
	_, c, p := catalogOn(t, catalog.Options{Dir: dir}, "echo.wasm", "echo_v1")
	out := filepath.Join(dir, "echo.fixtures", "basic.out.json")
	good, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(strings.Replace(string(good), `"one"`, `"two"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := reload(t, c)
	if r.OK || len(r.Rejected) != 1 || !strings.Contains(r.Rejected[0].Reason, "fixture") {
		t.Fatalf("changed fixtures: %+v", r)
	}
	if ev := mapOne(t, p, "test.a", "x"); ev.Source.Mapper != "echo@1.0.0" {
		t.Errorf("the module keeps serving: %+v", ev)
	}
	if err := os.WriteFile(out, good, 0o644); err != nil {
		t.Fatal(err)
	}
	r = reload(t, c)
	if !r.OK || len(r.Loaded) != 1 || !strings.Contains(r.Loaded[0], "unchanged") {
		t.Errorf("restored fixtures: %+v", r)
	}
	if _, ok := fileState(c.Status(), dir, "echo.wasm"); ok {
		t.Errorf("the file is still reported: %+v", c.Status().Files)
	}
}
