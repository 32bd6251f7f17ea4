package pipeline_test

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func TestChainMostSpecificClaimWins(t *testing.T) {
	e := engine(t)
	nova := module(t, e, "mappers/dist/nova.wasm")             // compute.instance.*
	mirror := module(t, e, "runtime/testdata/mirror.wasm")     // *
	fieldmap := module(t, e, "runtime/testdata/fieldmap.wasm") // *

	c := pipeline.Chain{mirror, nova, fieldmap}
	for _, tc := range []struct{ eventType, want string }{
		{"compute.instance.exists", nova.ID()},     // more literal characters than "*"
		{"compute.instance.create.end", nova.ID()}, // nova's exclusions do not cover it
		{"volume.create.end", mirror.ID()},         // a tie between two "*": the one listed first
	} {
		if m, ok := c.Route(tc.eventType); !ok || m.ID() != tc.want {
			t.Errorf("Route(%q) = %v, want %s", tc.eventType, m, tc.want)
		}
	}
	if m, ok := (pipeline.Chain{nova}).Route("volume.create.end"); ok {
		t.Errorf("nova alone routed volume.create.end to %s", m.ID())
	}
}
