// Package metrics holds the one registration policy of the collector, and
// the declaring of its common kinds of metrics.
//
// Every package that has metrics takes a prometheus.Registerer in its options;
// nil means do not register (the collectors still count, nobody reads them).
// The package builds its collectors and hands them all to Register in one
// call from its constructor, which returns Register's error. Counter,
// Gauge, GaugeFunc, Histogram and CounterVec declare the common kinds from
// a name and a help text; CounterVec creates the series of the label values
// it is given at once, at zero, so that a dashboard sees them before the
// first count.
//
// Register is all or nothing: when one collector cannot be registered, the
// ones registered before it in the same call are unregistered again and the
// error names the metric. A metric already registered is an error, never
// shared: two components claiming one metric name is a wiring mistake (two
// outboxes or two pipelines on one registry), and sharing would let a gauge
// read from one component report for the other.
package metrics

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers cs on reg, all or none. A nil reg registers nothing and
// returns nil. The error names the metric that could not be registered and
// wraps ErrDuplicate and prometheus.AlreadyRegisteredError when another
// collector already has it.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for i, c := range cs {
		err := reg.Register(c)
		if err == nil {
			continue
		}
		for _, done := range cs[:i] {
			reg.Unregister(done)
		}
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return fmt.Errorf("register %s: %w: %w", describedNames(c), ErrDuplicate, err)
		}
		return fmt.Errorf("register %s: %w", describedNames(c), err)
	}
	return nil
}

// describedNames lists the metric names a collector describes, comma-separated.
func describedNames(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		names = append(names, fqName(d))
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "a collector without metrics"
	}
	return strings.Join(names, ",")
}

// fqName reads the name out of a Desc, which exposes it only through String:
// Desc{fqName: "name", help: ...}.
func fqName(d *prometheus.Desc) string {
	s := d.String()
	const key = `fqName: "`
	i := strings.Index(s, key)
	if i < 0 {
		return s
	}
	s = s[i+len(key):]
	if j := strings.IndexByte(s, '"'); j >= 0 {
		return s[:j]
	}
	return s
}
