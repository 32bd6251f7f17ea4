package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func TestShadowMigrationWithDifferenceThenPromote(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	c := newCatalog(t, catalog.Options{
		Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1")}, Dir: dir, Registerer: reg, SampleSize: 4,
	})
	p := newPipeline(c)

	drop(t, dir, "echo.wasm", "echo_v2")
	if r := reload(t, c); !r.OK || len(r.Loaded) != 1 || !strings.Contains(r.Loaded[0], "candidate in shadow of echo@1.0.0") {
		t.Fatalf("reload: %+v", r)
	}
	m := mustModule(t, c, "echo")
	if m.State != catalog.StateMigrating || m.Active.ID != "echo@1.0.0" || m.Migration.Candidate.ID != "echo@2.0.0" {
		t.Fatalf("status %+v", m)
	}
	// Live traffic: the active module's events are the ones returned.
	for i := range 5 {
		if ev := mapOne(t, p, "test.a", fmt.Sprintf("a%d", i)); ev.Source.Mapper != "echo@1.0.0" || ev.Variant != "one" {
			t.Fatalf("during the migration the active module answers, got %+v", ev)
		}
	}
	for i := range 3 {
		mapOne(t, p, "test.b", fmt.Sprintf("b%d", i))
	}
	m = mustModule(t, c, "echo")
	mg := m.Migration
	if mg.Matches != 0 || mg.Differences != 8 {
		t.Errorf("counters: %d matches %d differences, want 0/8", mg.Matches, mg.Differences)
	}
	want := []catalog.TypeCounters{{EventType: "test.a", Differences: 5}, {EventType: "test.b", Differences: 3}}
	if fmt.Sprint(mg.EventTypes) != fmt.Sprint(want) {
		t.Errorf("per type: %v, want %v", mg.EventTypes, want)
	}
	// A bounded sample of the last differences, both outputs kept.
	if len(mg.Samples) != 4 {
		t.Fatalf("%d samples, want the last 4", len(mg.Samples))
	}
	last := mg.Samples[3]
	var a, b struct{ Events []event }
	if err := json.Unmarshal(last.Active, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(last.Candidate, &b); err != nil {
		t.Fatal(err)
	}
	if last.EventType != "test.b" || a.Events[0].Attributes.Variant != "one" || b.Events[0].Attributes.Variant != "two" ||
		a.Events[0].EventID != "b2" || b.Events[0].Source.Mapper != "echo@2.0.0" {
		t.Errorf("last sample %+v / %+v", a, b)
	}
	if mg.Samples[0].EventType != "test.a" || mg.Samples[1].EventType != "test.b" {
		t.Errorf("samples are not the last four, oldest first: %s %s", mg.Samples[0].EventType, mg.Samples[1].EventType)
	}
	if got := testkit.Metric(t, reg, "tally_collector_mapper_shadow_comparisons_total", "echo", "difference"); got != 8 {
		t.Errorf("shadow differences metric %v", got)
	}
	if got := testkit.Metric(t, reg, "tally_collector_mapper_migrations"); got != 1 {
		t.Errorf("migrations gauge %v", got)
	}
	var pat catalog.PatternStatus
	for _, ps := range c.Status().Patterns {
		if ps.Pattern == "test.*" {
			pat = ps
		}
	}
	if pat.State != catalog.StateMigrating || pat.Candidate != "echo@2.0.0" || pat.Differences != 8 {
		t.Errorf("pattern view %+v", pat)
	}

	var text strings.Builder
	if err := c.Status().WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"PATTERN", "test.*", "echo@1.0.0", "builtin", "migrating", "echo@2.0.0",
		"echo: echo@2.0.0 in shadow of echo@1.0.0", "test.a: 0 matches, 5 differences", "last reload:",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("mappers view lacks %q:\n%s", want, text.String())
		}
	}
	t.Logf("mappers view:\n%s", text.String())

	out, err := c.Promote(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != "promoted" || out.Active != "echo@2.0.0" || out.Differences != 8 {
		t.Errorf("outcome %+v", out)
	}
	if ev := mapOne(t, p, "test.a", "after"); ev.Source.Mapper != "echo@2.0.0" || ev.Variant != "two" {
		t.Errorf("after promotion: %+v", ev)
	}
	m = mustModule(t, c, "echo")
	if m.State != catalog.StateActive || m.Migration != nil || m.Last == nil || m.Last.Result != "promoted" ||
		m.Builtin == nil || m.Builtin.ID != "echo@1.0.0" {
		t.Errorf("after promotion: %+v", m)
	}
	if got := testkit.Metric(t, reg, "tally_collector_mapper_migrations"); got != 0 {
		t.Errorf("migrations gauge %v", got)
	}
	if _, err := c.Promote(context.Background(), "echo"); !errors.Is(err, catalog.ErrNoMigration) {
		t.Errorf("second promote: %v", err)
	}
	if _, err := c.Abort(context.Background(), "nope"); !errors.Is(err, catalog.ErrUnknownModule) {
		t.Errorf("abort unknown: %v", err)
	}
	// A later reload does not bring anything back.
	if r := c.Reload(context.Background()); r.Changed {
		t.Errorf("reload after promotion changed: %+v", r)
	}
}

func TestShadowComparisonIgnoresMapperID(t *testing.T) {
	// echo 1.0.1: the same output, another version.
	_, c, p := migrating(t, catalog.Options{}, "echo.wasm", "echo_v1", "echo.wasm", "echo_v1b")
	for i := range 4 {
		mapOne(t, p, "test.a", fmt.Sprint(i))
	}
	mg := mustModule(t, c, "echo").Migration
	if mg == nil || mg.Matches != 4 || mg.Differences != 0 || len(mg.Samples) != 0 {
		t.Fatalf("migration %+v", mg)
	}
}

func TestShadowCountsAFailingActive(t *testing.T) {
	_, c, p := migrating(t, catalog.Options{}, "flaky.wasm", "flaky_v1", "flaky.wasm", "flaky_v2")
	r := p.Process(context.Background(), pipeline.Message{Body: body("flaky.x", "f1")})
	if r.Outcome != pipeline.Failed || r.Reason != "trap" || r.Module != "flaky@1.0.0" {
		t.Fatalf("the active module answers even when it fails: %+v", r)
	}
	mg := mustModule(t, c, "flaky").Migration
	if mg.Differences != 1 || len(mg.Samples) != 1 || !strings.Contains(mg.Samples[0].ActiveError, "trap") ||
		!strings.Contains(string(mg.Samples[0].Candidate), `"fixed"`) {
		t.Fatalf("migration %+v", mg)
	}
}

func TestAbortParksTheCandidate(t *testing.T) {
	dir, c, p := migrating(t, catalog.Options{}, "echo.wasm", "echo_v1", "echo-next.wasm", "echo_v2")
	out, err := c.Abort(context.Background(), "echo")
	if err != nil || out.Result != "aborted" || out.Active != "echo@1.0.0" {
		t.Fatalf("abort: %+v %v", out, err)
	}
	if ev := mapOne(t, p, "test.a", "x"); ev.Source.Mapper != "echo@1.0.0" {
		t.Errorf("after abort: %+v", ev)
	}
	if f, ok := fileState(c.Status(), dir, "echo-next.wasm"); !ok || f.State != "parked" {
		t.Errorf("aborted file: %+v", c.Status().Files)
	}
	if r := c.Reload(context.Background()); r.Changed {
		t.Errorf("an aborted candidate came back: %+v", r)
	}
	// New content at the path is a new candidate.
	drop(t, dir, "echo-next.wasm", "echo_v1b")
	reload(t, c)
	if m := mustModule(t, c, "echo"); m.Migration == nil || m.Migration.Candidate.ID != "echo@1.0.1" {
		t.Errorf("new content: %+v", m)
	}
}

func TestImmediatePromotion(t *testing.T) {
	_, c, p := migrating(t, catalog.Options{Promote: catalog.PromoteImmediate}, "echo.wasm", "echo_v1", "echo.wasm", "echo_v2")
	if ev := mapOne(t, p, "test.a", "x"); ev.Source.Mapper != "echo@2.0.0" {
		t.Errorf("immediate: %+v", ev)
	}
	if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Migration != nil {
		t.Errorf("immediate: %+v", m)
	}
}

func TestNewNameIsActiveAtOnce(t *testing.T) {
	dir := t.TempDir()
	c := newCatalog(t, catalog.Options{Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1")}, Dir: dir})
	p := newPipeline(c)
	drop(t, dir, "special.wasm", "special")
	reload(t, c)
	if ev := mapOne(t, p, "test.special", "x"); ev.Source.Mapper != "special@1.0.0" {
		t.Errorf("a module of a new name serves at once: %+v", ev)
	}
}

func TestDeletionDuringMigration(t *testing.T) {
	t.Run("active file removed", func(t *testing.T) {
		dir, c, p := migrating(t, catalog.Options{}, "echo.wasm", "echo_v1", "echo-2.wasm", "echo_v2")
		remove(t, dir, "echo.wasm")
		r := reload(t, c)
		if len(r.Removed) != 1 || !strings.Contains(r.Removed[0], "echo@1.0.0") {
			t.Errorf("removed: %q", r.Removed)
		}
		// Deletion wins: no echo left at all, the candidate does not slip in.
		res := p.Process(context.Background(), pipeline.Message{Body: body("test.a", "x")})
		if res.Outcome != pipeline.Skipped || res.Reason != pipeline.ReasonUnclaimed {
			t.Errorf("after deletion: %+v", res)
		}
		if _, ok := module(c.Status(), "echo"); ok {
			t.Errorf("echo still listed")
		}
		if f, ok := fileState(c.Status(), dir, "echo-2.wasm"); !ok || f.State != "parked" || !strings.Contains(f.Reason, "cancelled") {
			t.Errorf("candidate file: %+v", c.Status().Files)
		}
		if r := c.Reload(context.Background()); r.Changed {
			t.Errorf("the cancelled candidate came back: %+v", r)
		}
	})
	t.Run("candidate file removed", func(t *testing.T) {
		dir, c, p := migrating(t, catalog.Options{}, "echo.wasm", "echo_v1", "echo-2.wasm", "echo_v2")
		mapOne(t, p, "test.a", "x")
		remove(t, dir, "echo-2.wasm")
		reload(t, c)
		m := mustModule(t, c, "echo")
		if m.State != catalog.StateActive || m.Last == nil || m.Last.Result != "cancelled" || m.Last.Differences != 1 {
			t.Errorf("after removing the candidate: %+v %+v", m, m.Last)
		}
		if ev := mapOne(t, p, "test.a", "y"); ev.Source.Mapper != "echo@1.0.0" {
			t.Errorf("the active module serves on: %+v", ev)
		}
	})
	t.Run("file replaced in place then removed falls back to the built-in", func(t *testing.T) {
		dir, c, p := migrating(t, catalog.Options{Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1")}},
			"echo.wasm", "echo_v1b", "echo.wasm", "echo_v2")
		if m := mustModule(t, c, "echo"); m.Active.ID != "echo@1.0.1" || m.Migration.Candidate.ID != "echo@2.0.0" {
			t.Fatalf("in place: %+v", m)
		}
		remove(t, dir, "echo.wasm")
		reload(t, c)
		if ev := mapOne(t, p, "test.a", "x"); ev.Source.Mapper != "echo@1.0.0" {
			t.Errorf("after deleting both versions the built-in serves: %+v", ev)
		}
		if m := mustModule(t, c, "echo"); m.State != catalog.StateActive || m.Last.Result != "cancelled" {
			t.Errorf("%+v", m)
		}
	})
}
