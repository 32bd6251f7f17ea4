package sender_test

// What an operator sees of the sender: its metrics from the start, the
// classes of its requests, and a Reporting API URL whose path is wrong.

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// labelValues answers the values label takes on the series of name in reg,
// with the value of each series.
func labelValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// keys answers the keys of m, sorted, separated by spaces.
func keys(m map[string]float64) string { return strings.Join(slices.Sorted(maps.Keys(m)), " ") }

// Every value of the sender's labelled counters is exported at 0 before the
// first POST, so that increase() sees the first increment, and the gauge of
// a missing events route is there at 0.
func TestLabelValuesExportedFromTheStart(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	e.sender(t, func(o *sender.Options) { o.Registerer = reg })
	for _, c := range []struct{ name, label, want string }{
		{"tally_collector_sender_requests_total", "class", "2xx 3xx 4xx 5xx network timeout"},
		{"tally_collector_sender_deadlettered_events_total", "status", "400 413 422"},
	} {
		got := labelValues(t, reg, c.name, c.label)
		if keys(got) != c.want {
			t.Errorf("%s{%s}: %q, want %q", c.name, c.label, keys(got), c.want)
		}
		for v, n := range got {
			if n != 0 {
				t.Errorf("%s{%s=%q} = %v before any POST", c.name, c.label, v, n)
			}
		}
	}
	if n, err := testutil.GatherAndCount(reg, "tally_collector_sender_endpoint_not_found"); err != nil || n != 1 {
		t.Errorf("tally_collector_sender_endpoint_not_found: %d series, %v", n, err)
	}
}

// A refused connection counts as class network, an answer that does not
// come within the request timeout as class timeout.
func TestRequestClassesNetworkAndTimeout(t *testing.T) {
	e := newEnv(t)
	e.append(t, 0, 5, 10)

	reg := prometheus.NewRegistry()
	down := e.sender(t, func(o *sender.Options) { o.URL = "http://127.0.0.1:1"; o.Registerer = reg })
	runUntil(t, down, "a network failure counted", func() bool {
		return labelValues(t, reg, "tally_collector_sender_requests_total", "class")["network"] >= 1
	})

	reg = prometheus.NewRegistry()
	slow := e.sender(t, func(o *sender.Options) { o.RequestTimeout = 50 * time.Millisecond; o.Registerer = reg })
	e.srv.SetFault(&server.Fault{DelayMS: 500})
	t.Cleanup(func() { e.srv.SetFault(nil) })
	runUntil(t, slow, "a timeout counted", func() bool {
		return labelValues(t, reg, "tally_collector_sender_requests_total", "class")["timeout"] >= 1
	})
	if got := labelValues(t, reg, "tally_collector_sender_requests_total", "class"); got["network"] != 0 {
		t.Errorf("a timeout counted as network: %v", got)
	}
}

// runUntil runs s until cond holds, then stops it.
func runUntil(t *testing.T, s *sender.Sender, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	testkit.WaitFor(t, 20*time.Second, what, cond)
}

// A URL whose path leads nowhere (every POST answered 404) makes the sender
// not ready after a run of 404s, with an error naming the URL that answered
// and the setting; the gauge shows it. The first other answer ends it.
func TestRunOf404sIsNotReady(t *testing.T) {
	e := newEnv(t)
	var notFound atomic.Bool
	notFound.Store(true)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if notFound.Load() {
			http.NotFound(w, r)
			return
		}
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/wrong")
		e.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	reg := prometheus.NewRegistry()
	s := e.sender(t, func(o *sender.Options) { o.URL = api.URL + "/wrong"; o.Registerer = reg })
	e.append(t, 0, 5, 10)

	runUntil(t, s, "not ready after 404s", func() bool { return s.Ready() != nil })
	err := s.Ready()
	var nf *sender.EndpointNotFoundError
	if !errors.Is(err, sender.ErrEndpointNotFound) || !errors.As(err, &nf) {
		t.Fatalf("Ready: %v, want ErrEndpointNotFound", err)
	}
	want := api.URL + "/wrong/api/v1/events"
	if nf.URL != want || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "REPORTING_URL") {
		t.Errorf("Ready: %v (URL %q), want it to name %s and REPORTING_URL", err, nf.URL, want)
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("the error shows the token: %v", err)
	}
	gauge := func() float64 {
		return testkit.Metric(t, reg, "tally_collector_sender_endpoint_not_found")
	}
	if gauge() != 1 {
		t.Errorf("tally_collector_sender_endpoint_not_found = %v while every POST answers 404", gauge())
	}
	if e.ob.Depth() != 5 {
		t.Errorf("depth %d: events lost to 404s", e.ob.Depth())
	}

	notFound.Store(false)
	flush(t, s, 10*time.Second)
	if err := s.Ready(); err != nil || gauge() != 0 {
		t.Errorf("after a 200: Ready %v, gauge %v", err, gauge())
	}
}

// A URL that already ends in the events route is refused: the sender adds
// the route itself.
func TestURLEndingInTheEventsRouteRefused(t *testing.T) {
	e := newEnv(t)
	for _, u := range []string{"https://h.example/api/v1/events", "https://h.example/base/api/v1/events/"} {
		_, err := sender.New(e.ob, sender.Options{URL: u, Token: "t"})
		if !errors.Is(err, sender.ErrInvalidURL) || !strings.Contains(err.Error(), sender.EventsRoute) {
			t.Errorf("%s: %v, want ErrInvalidURL naming %s", u, err, sender.EventsRoute)
		}
	}
}
