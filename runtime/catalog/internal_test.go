package catalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

func TestSemverLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"1.0.0", "1.0.1", true},
		{"1.9.0", "1.10.0", true},
		{"2.0.0", "1.99.99", false},
		{"1.0.0-rc.1", "1.0.0", true},
		{"1.0.0", "1.0.0-rc.1", false},
		{"1.0.0+b1", "1.0.0+b2", false},
		{"1.0.0-alpha", "1.0.0-beta", true},
		// Pre-releases compare by semver precedence (semver.org, item 11),
		// not as strings (1.0.0-rc.10 is above 1.0.0-rc.2): numeric
		// identifiers compare as numbers and below alphanumeric ones; a
		// longer set of identifiers wins when the shorter is its prefix.
		{"1.0.0-rc.2", "1.0.0-rc.10", true},
		{"1.0.0-rc.10", "1.0.0-rc.2", false},
		{"1.0.0-alpha.9", "1.0.0-alpha.10", true},
		{"1.0.0-alpha", "1.0.0-alpha.1", true},
		{"1.0.0-alpha.1", "1.0.0-alpha.beta", true},
		{"1.0.0-alpha.beta", "1.0.0-beta", true},
		{"1.0.0-beta.2", "1.0.0-beta.11", true},
		{"1.0.0-beta.11", "1.0.0-rc.1", true},
		{"1.0.0-9", "1.0.0-10", true},
		{"1.0.0-10", "1.0.0-a", true},
		{"1.0.0-rc.1+b2", "1.0.0-rc.1+b1", false},
		{"1.2.3-rc.1", "1.2.10-rc.1", true},
	} {
		if got := semverLess(tc.a, tc.b); got != tc.less {
			t.Errorf("semverLess(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

func TestSameOutcome(t *testing.T) {
	ev := func(s string) runtime.Result { return runtime.Result{Events: [][]byte{[]byte(s)}} }
	trap := &runtime.MapError{Reason: runtime.ReasonTrap, Err: errors.New("unreachable")}
	trap2 := &runtime.MapError{Reason: runtime.ReasonTrap, Err: errors.New("out of bounds")}
	timeout := &runtime.MapError{Reason: runtime.ReasonTimeout, Err: errors.New("deadline")}
	for _, tc := range []struct {
		name string
		a    runtime.Result
		aerr error
		c    runtime.Result
		cerr error
		same bool
	}{
		{"mapper differs only", ev(`{"a":1,"source":{"mapper":"x@1.0.0","exchange":"n"}}`), nil,
			ev(`{"source":{"exchange":"n","mapper":"x@2.0.0"},"a":1}`), nil, true},
		{"host layout, mapper differs only", ev(`{"a":1,"source":{"exchange":"n","mapper":"x@1.0.0"}}`), nil,
			ev(`{"a":1,"source":{"exchange":"n","mapper":"x@2.0.0"}}`), nil, true},
		{"host layout, field differs", ev(`{"a":1,"source":{"exchange":"n","mapper":"x@1.0.0"}}`), nil,
			ev(`{"a":2,"source":{"exchange":"n","mapper":"x@2.0.0"}}`), nil, false},
		{"exchange differs", ev(`{"a":1,"source":{"exchange":"n"}}`), nil, ev(`{"a":1,"source":{"exchange":"m"}}`), nil, false},
		{"number text differs", ev(`{"a":1.0}`), nil, ev(`{"a":1}`), nil, false},
		{"field differs", ev(`{"a":1}`), nil, ev(`{"a":2}`), nil, false},
		{"extra event", ev(`{"a":1}`), nil, runtime.Result{Events: [][]byte{[]byte(`{"a":1}`), []byte(`{"a":1}`)}}, nil, false},
		{"no events both", runtime.Result{}, nil, runtime.Result{}, nil, true},
		{"oversize differs", runtime.Result{Oversize: 1}, nil, runtime.Result{}, nil, false},
		{"same failure", runtime.Result{}, trap, runtime.Result{}, trap2, true},
		{"other failure", runtime.Result{}, trap, runtime.Result{}, timeout, false},
		{"candidate fails", ev(`{"a":1}`), nil, runtime.Result{}, trap, false},
		{"candidate fixes", runtime.Result{}, trap, ev(`{"a":1}`), nil, false},
	} {
		if got := sameOutcome(tc.a, tc.aerr, tc.c, tc.cerr); got != tc.same {
			t.Errorf("%s: sameOutcome = %v", tc.name, got)
		}
		if got := sameOutcomeIDs(tc.a, tc.aerr, tc.c, tc.cerr, "x@1.0.0", "x@2.0.0"); got != tc.same {
			t.Errorf("%s: sameOutcomeIDs = %v", tc.name, got)
		}
	}
}

func TestMigrationCountersAreBounded(t *testing.T) {
	m := newMigration(&loaded{}, 3, nil)
	for i := range maxShadowTypes + 10 {
		m.counters(string(rune('a'+i%26)) + string(rune(i)))
	}
	if n := m.ntypes.Load(); n != maxShadowTypes+1 {
		t.Errorf("%d types counted, want %d and the overflow bucket", n, maxShadowTypes)
	}
	if _, ok := m.types.Load(otherTypes); !ok {
		t.Error("no overflow bucket")
	}
}

// An event type longer than any an event may carry is routed, but neither
// kept in the route cache nor counted under its own name in a migration.
func TestLongEventTypesAreNotKept(t *testing.T) {
	long := strings.Repeat("x", maxCachedTypeBytes+1)
	m := &migration{}
	tc := m.counters(long)
	if tc != m.counters(otherTypes) || m.ntypes.Load() != 1 {
		t.Errorf("a long event type got counters of its own")
	}
	if _, ok := m.types.Load(long); ok {
		t.Errorf("a long event type is kept by name")
	}
	s := newSnapshot(1, nil, nil)
	s.route(long)
	s.route("compute.instance.exists")
	if _, ok := s.cache.Load(long); ok || s.cached.Load() != 1 {
		t.Errorf("route cache: long type kept %v, %d cached, want only the short one", ok, s.cached.Load())
	}
}

// sameOutcome is sameOutcomeIDs without the module IDs: the JSON comparison
// alone.
func sameOutcome(a runtime.Result, aerr error, c runtime.Result, cerr error) bool {
	return sameOutcomeIDs(a, aerr, c, cerr, "", "")
}
