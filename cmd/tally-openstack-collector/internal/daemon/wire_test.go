package daemon

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// An empty CONTROL_EXCHANGE leaves the control link off.
func TestNoControlExchangeNoLink(t *testing.T) {
	cfg := &settings.Config{ControlExchange: "", ReplicaName: "tally-collector-1"}
	if l, err := newControl(cfg, zerolog.Nop(), nil, nil); l != nil || err != nil {
		t.Errorf("an empty CONTROL_EXCHANGE should leave the link off: %v %v", l, err)
	}
}

// The built-in modules get one option, their guard, whichever
// MAPPER_BUILTIN_GUARD says.
func TestBuiltinModuleOptions(t *testing.T) {
	for _, g := range []runtime.Guard{runtime.GuardWatched, runtime.GuardAlways} {
		if opts := builtinModuleOptions(&settings.Config{MapperBuiltinGuard: g}); len(opts) != 1 {
			t.Errorf("%v: %d module options", g, len(opts))
		}
	}
}
