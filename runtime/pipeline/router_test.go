package pipeline_test

import (
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func TestStaticRouterMostSpecificClaimWins(t *testing.T) {
	e := engine(t)
	nova := module(t, e, "mappers/dist/nova.wasm")             // compute.instance.*
	mirror := module(t, e, "runtime/testdata/mirror.wasm")     // *
	fieldmap := module(t, e, "runtime/testdata/fieldmap.wasm") // *

	r, conflicts := pipeline.NewStaticRouter(nova, mirror, fieldmap)
	if len(conflicts) != 1 || !strings.Contains(conflicts[0], `"*"`) || !strings.Contains(conflicts[0], fieldmap.ID()+" wins") {
		t.Errorf("conflicts = %q, want one about \"*\" won by %s", conflicts, fieldmap.ID())
	}
	for _, tc := range []struct {
		eventType string
		want      string
	}{
		{"compute.instance.exists", nova.ID()},     // more literal characters than "*"
		{"compute.instance.create.end", nova.ID()}, // and again, from the cache
		{"volume.create.end", fieldmap.ID()},       // tie between two "*": the later one
	} {
		for range 2 { // the second answer comes from the cache
			m, ok := r.Route(tc.eventType)
			if !ok || m.ID() != tc.want {
				t.Errorf("Route(%q) = %v, want %s", tc.eventType, m, tc.want)
			}
		}
	}
	only, _ := pipeline.NewStaticRouter(nova)
	if m, ok := only.Route("volume.create.end"); ok {
		t.Errorf("nova alone routed volume.create.end to %s", m.ID())
	}
	if m, ok := only.Route("compute.instance.create.start"); !ok || m.ID() != nova.ID() {
		t.Errorf("nova alone did not route compute.instance.create.start")
	}
}
