package metrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "test"})
}

func TestRegisterNilRegistersNothing(t *testing.T) {
	if err := Register(nil, counter("tally_collector_a_total")); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterAllOrNoneAndNamesTheDuplicate(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, counter("tally_collector_b_total")); err != nil {
		t.Fatal(err)
	}
	a := counter("tally_collector_a_total")
	err := Register(reg, a, counter("tally_collector_b_total"), counter("tally_collector_c_total"))
	var are prometheus.AlreadyRegisteredError
	if !errors.Is(err, ErrDuplicate) || !errors.As(err, &are) || !strings.Contains(err.Error(), "tally_collector_b_total") {
		t.Fatalf("err %v", err)
	}
	// a was unregistered again, c never registered: both can be now.
	if err := Register(reg, a, counter("tally_collector_c_total")); err != nil {
		t.Fatalf("after a refused call: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 3 {
		t.Fatalf("gathered %d families, %v", len(mfs), err)
	}
}

// A collector that conflicts without being the same (one name, another help
// text) is refused with its name too, not taken for a duplicate.
func TestRegisterNamesAConflictingCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, counter("tally_collector_b_total")); err != nil {
		t.Fatal(err)
	}
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_collector_b_total", Help: "another help"})
	err := Register(reg, counter("tally_collector_x_total"), other)
	if err == nil || errors.Is(err, ErrDuplicate) || !strings.Contains(err.Error(), "tally_collector_b_total") {
		t.Fatalf("err %v", err)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 1 {
		t.Fatalf("%d families registered, want the first one only", len(mfs))
	}
}

func TestNames(t *testing.T) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_collector_v_total", Help: "h"}, []string{"l"})
	if got := describedNames(v); got != "tally_collector_v_total" {
		t.Fatalf("describedNames = %q", got)
	}
}
