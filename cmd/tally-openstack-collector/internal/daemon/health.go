package daemon

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// livenessTracker decides liveness from the outbox alone: the collector is
// live unless the outbox has been unusable without a break for at least
// threshold. One usable observation resets the clock. Safe for concurrent use.
type livenessTracker struct {
	now       func() time.Time
	threshold time.Duration

	mu       sync.Mutex
	badSince time.Time // zero while usable
	lastErr  error
}

func newLivenessTracker(threshold time.Duration, now func() time.Time) *livenessTracker {
	if now == nil {
		now = time.Now
	}
	return &livenessTracker{now: now, threshold: threshold}
}

// observe records one reading of the outbox's health.
func (t *livenessTracker) observe(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		t.badSince = time.Time{}
		t.lastErr = nil
		return
	}
	if t.badSince.IsZero() {
		t.badSince = t.now()
	}
	t.lastErr = err
}

// check is nil while live; otherwise it says how long the outbox has been
// unusable and why.
func (t *livenessTracker) check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.badSince.IsZero() {
		return nil
	}
	if d := t.now().Sub(t.badSince); d >= t.threshold {
		return &unusableError{For: d, Err: t.lastErr}
	}
	return nil
}

type unusableError struct {
	For time.Duration
	Err error
}

func (e *unusableError) Error() string {
	return "outbox unusable for " + e.For.Round(time.Second).String() + ": " + e.Err.Error()
}

func (e *unusableError) Unwrap() error { return e.Err }

// probes serves /readyz and /livez.
//
// Readiness fails as soon as any check fails (the outbox, the broker session,
// the Reporting API refusing the token). Liveness weighs only the outbox,
// through the tracker, which a sampler feeds every second so that a break in
// the unusability is seen even between two probes. Bodies carry no detail
// beyond readyBody's: what failed goes to the log, once per change.
type probes struct {
	outbox func() error
	ready  map[string]func() error // name -> check; nil func means not started
	live   *livenessTracker
	log    zerolog.Logger

	mu        sync.Mutex
	lastReady string // "" when ready; else the failure last logged
	lastLive  string
}

func (p *probes) readyErr() (string, error) {
	if err := callCheck(p.outbox); err != nil {
		return "outbox", err
	}
	p.mu.Lock()
	checks := make(map[string]func() error, len(p.ready))
	for k, v := range p.ready {
		checks[k] = v
	}
	p.mu.Unlock()
	for _, name := range sortedKeys(checks) {
		if err := callCheck(checks[name]); err != nil {
			return name, err
		}
	}
	return "", nil
}

func callCheck(f func() error) error {
	if f == nil {
		return errNotStarted
	}
	return f()
}

func (p *probes) readyz(w http.ResponseWriter, _ *http.Request) {
	name, err := p.readyErr()
	state := ""
	if err != nil {
		state = name + ": " + err.Error()
	}
	p.mu.Lock()
	changed := state != p.lastReady
	p.lastReady = state
	p.mu.Unlock()
	if changed {
		if err != nil {
			p.log.Warn().Str("check", name).Err(err).Msg("not ready")
		} else {
			p.log.Info().Msg("ready")
		}
	}
	if err != nil {
		plain(w, http.StatusServiceUnavailable, readyBody(err))
		return
	}
	plain(w, http.StatusOK, "ok\n")
}

// readyBody is what /readyz says when err fails it: "not ready", and the
// reason only when the operator can act on it from the body and it holds
// nothing to hide. The one such reason is a Reporting API URL that answers
// 404: the URL, which carries no credential, query or fragment (they are
// refused at start), and the setting to fix.
func readyBody(err error) string {
	var nf *sender.EndpointNotFoundError
	if errors.As(err, &nf) {
		return "not ready: the Reporting API answers 404 at " + nf.URL + "; set " + settings.EnvPrefix + "REPORTING_URL to its base URL\n"
	}
	return "not ready\n"
}

func (p *probes) livez(w http.ResponseWriter, _ *http.Request) {
	p.live.observe(callCheck(p.outbox))
	err := p.live.check()
	state := ""
	if err != nil {
		state = err.Error()
	}
	p.mu.Lock()
	changed := state != p.lastLive
	p.lastLive = state
	p.mu.Unlock()
	if changed && err != nil {
		p.log.Error().Err(err).Msg("not live")
	}
	if err != nil {
		plain(w, http.StatusServiceUnavailable, "not live\n")
		return
	}
	plain(w, http.StatusOK, "ok\n")
}

// sample feeds the liveness tracker every interval until ctx is done.
func (p *probes) sample(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.live.observe(callCheck(p.outbox))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func plain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// newMux routes the probes and the metrics of reg, open to every caller, and
// every other path through guard to control (the catalogue's /mappers and
// /deadletters routes; nil: nothing else is served).
func newMux(p *probes, reg *prometheus.Registry, guard *controlAuth, control http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", p.readyz)
	mux.HandleFunc("GET /livez", p.livez)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if control == nil {
		control = http.NotFoundHandler()
	}
	mux.Handle("/", guard.wrap(control))
	return mux
}
