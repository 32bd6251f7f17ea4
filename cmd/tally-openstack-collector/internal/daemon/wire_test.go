package daemon

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
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

// The built-in modules run watched, or guarded on request; metered, they
// need neither and run unguarded unless guarded is asked for.
func TestBuiltinGuard(t *testing.T) {
	for _, c := range []struct {
		guard   runtime.Guard
		metered bool
		want    runtime.Guard
	}{
		{runtime.GuardWatched, false, runtime.GuardWatched},
		{runtime.GuardAlways, false, runtime.GuardAlways},
		{runtime.GuardWatched, true, runtime.GuardNever},
		{runtime.GuardAlways, true, runtime.GuardAlways},
	} {
		if g := builtinGuard(&settings.Config{MapperBuiltinGuard: c.guard, MapperMetered: c.metered}); g != c.want {
			t.Errorf("guard %v, metered %v: %v, want %v", c.guard, c.metered, g, c.want)
		}
	}
}

// A dead letter is replayed as its input made the message: plog's with a
// canonical event accepted and ids derived, the channel's with ids derived,
// the broker's as an AMQP delivery.
func TestReplayMessageFollowsTheInput(t *testing.T) {
	for _, c := range []struct {
		exchange            string
		canonical, deriveID bool
	}{
		{plog.Exchange, true, true},
		{channel.Exchange, false, true},
		{"nova", false, false},
	} {
		m := replayMessage(outbox.StoredDeadLetter{DeadLetter: outbox.DeadLetter{Body: []byte("b"), Exchange: c.exchange, RoutingKey: "rk"}})
		if m.Canonical != c.canonical || m.DeriveID != c.deriveID || string(m.Body) != "b" || m.RoutingKey != "rk" || m.Exchange != c.exchange {
			t.Errorf("%s: %+v", c.exchange, m)
		}
	}
}
