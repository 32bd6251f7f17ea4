package sender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
)

// Store is what the sender needs from the outbox.
type Store interface {
	// Peek returns up to max of the oldest undelivered events, with the
	// sequence numbers of the first and the last; 0, 0, nil, nil when
	// there is nothing to send.
	Peek(ctx context.Context, max int) (first, last uint64, events [][]byte, err error)
	// Delivered removes the delivered range first..last, inclusive, and
	// counts it in the completeness ledger with the number of duplicates
	// the Reporting API answered, in one durable step.
	Delivered(ctx context.Context, first, last uint64, duplicates int) error
	// SetAside moves the oldest undelivered event, at seq, to the local
	// dead-letter area with the reason and detail, and past it, in one
	// durable step. A seq already gone is ignored.
	SetAside(ctx context.Context, seq uint64, reason, detail string) error
}

// EventsRoute is the route of the Reporting API the sender posts to, added
// to REPORTING_URL (docs/reporting-api.md, "Ingestion").
const EventsRoute = "/api/v1/events"

// Defaults applied by New to zero-valued Options fields.
const (
	defaultBatchMax          = 500
	defaultMaxEventBytes     = 64 << 10
	defaultRequestTimeout    = 30 * time.Second
	defaultIdleInterval      = 200 * time.Millisecond
	defaultBackoffBase       = 500 * time.Millisecond
	defaultBackoffMax        = 60 * time.Second
	defaultAuthRetryInterval = 30 * time.Second
	defaultMaxRetryAfter     = 10 * time.Minute
	defaultYieldFor          = 30 * time.Second
	defaultYieldInterval     = 1 * time.Second

	// regrowAfter is how many full batches must succeed before the batch
	// limit grows by a quarter after a 413.
	regrowAfter = 4
	// forgetCeilingAfter is how many full batches must succeed just below
	// the size last refused with 413 before that size is tried again.
	forgetCeilingAfter = 64
)

// Options configures New. URL and one of Token or TokenFile are required.
type Options struct {
	URL       string // REPORTING_URL: base URL; EventsRoute is appended (a URL ending in it is refused)
	Token     string // REPORTING_TOKEN
	TokenFile string // REPORTING_TOKEN_FILE: re-read when it changes
	Insecure  bool   // REPORTING_INSECURE: allow http://
	BatchMax  int    // BATCH_MAX; default 500

	// TLS: REPORTING_CA_FILE (instead of the system's trust store),
	// REPORTING_CERT_FILE and REPORTING_KEY_FILE (a client certificate),
	// looked at before every POST and read again when they changed.
	TLS tlsfiles.Files

	MaxEventBytes     int           // an event larger than this refused alone with 413 is set aside at once; default 64 KiB
	RequestTimeout    time.Duration // per POST; default 30s
	IdleInterval      time.Duration // poll interval while the store is empty; default 200ms
	BackoffBase       time.Duration // first backoff step after a failure; default 500ms
	BackoffMax        time.Duration // backoff step cap; default 60s (each wait is uniform in [0, step])
	AuthRetryInterval time.Duration // retry interval while the token is refused; default 30s
	MaxRetryAfter     time.Duration // cap on a Retry-After; default 10m

	// Intake, when set, makes Run hold back while it reports a backlog: at
	// most one batch per YieldInterval, for at most YieldFor without a
	// break (see the package documentation). nil: the sender never holds
	// back.
	Intake        Intake
	YieldFor      time.Duration // longest continuous stretch of holding back; default 30s
	YieldInterval time.Duration // while holding back, at most one POST per interval; default 1s

	Logger     zerolog.Logger
	Registerer prometheus.Registerer // nil: no metrics are registered
	HTTPClient *http.Client          // optional, instead of TLS's files; redirects are disabled on a copy
}

// Sender drains a Store to the Reporting API.
type Sender struct {
	store    Store
	opts     Options
	endpoint string
	client   *http.Client // with Options.HTTPClient; else tls gives it
	tls      *tlsClient
	log      zerolog.Logger
	token    *tokenfile.Source

	mu       sync.Mutex     // one delivery at a time (Run, Flush)
	batch    int            // current batch limit
	ceiling  int            // smallest size refused with 413 since; 0: none
	streak   int            // consecutive full batches delivered at the current limit
	failures int            // consecutive failures, for the backoff
	jitter   backoff.Source // nil: math/rand/v2; tests seed their own
	lastPost time.Time      // when the last POST began; zero: none yet
	refusal  refusalState

	y yieldState // Run's goroutine only

	readyMu     sync.Mutex
	authErr     error // the token was refused (401/403)
	refuseErr   error // the API refuses every event it is sent (400/413/422)
	notFoundErr error // the last notFoundRun or more POSTs were answered 404
	notFound    int   // POSTs answered 404 in a row (under mu)

	m metrics
}

type metrics struct {
	sent, duplicates, rejected prometheus.Counter
	setAside                   *prometheus.CounterVec
	requests                   *prometheus.CounterVec
	batchSize                  prometheus.Histogram
	batchLimit                 prometheus.Gauge
	duration                   prometheus.Histogram
	yielding                   prometheus.Gauge
	yieldSeconds               prometheus.Counter
	endpointNotFound           prometheus.Gauge
}

// New validates the options and returns a Sender. It answers ErrInvalidURL
// for a URL that is not absolute, has no host, carries credentials, or is
// not https (unless Insecure), and ErrNoToken without a usable token.
func New(store Store, opts Options) (*Sender, error) {
	if store == nil {
		return nil, errors.New("sender: nil store")
	}
	endpoint, err := endpointURL(opts.URL, opts.Insecure)
	if err != nil {
		return nil, err
	}
	ts, err := newTokenSource(opts.Token, opts.TokenFile, opts.Logger)
	if err != nil {
		return nil, err
	}
	if err := CheckTLS(opts.URL, opts.TLS); err != nil {
		return nil, err
	}
	if opts.HTTPClient != nil && !opts.TLS.IsZero() {
		return nil, fmt.Errorf("%w: TLS files and an HTTP client are both given", ErrInvalidURL)
	}
	setDefault(&opts.BatchMax, defaultBatchMax)
	setDefault(&opts.MaxEventBytes, defaultMaxEventBytes)
	setDefault(&opts.RequestTimeout, defaultRequestTimeout)
	setDefault(&opts.IdleInterval, defaultIdleInterval)
	setDefault(&opts.BackoffBase, defaultBackoffBase)
	setDefault(&opts.BackoffMax, defaultBackoffMax)
	setDefault(&opts.AuthRetryInterval, defaultAuthRetryInterval)
	setDefault(&opts.MaxRetryAfter, defaultMaxRetryAfter)
	setDefault(&opts.YieldFor, defaultYieldFor)
	setDefault(&opts.YieldInterval, defaultYieldInterval)

	var client *http.Client
	var tc *tlsClient
	if opts.HTTPClient != nil {
		c := *opts.HTTPClient
		c.CheckRedirect = noRedirect
		client = &c
	} else {
		u, _ := url.Parse(endpoint)
		tc = &tlsClient{files: opts.TLS, host: u.Hostname()}
		if _, _, err := tc.get(newHTTPClient); err != nil {
			return nil, err
		}
	}

	s := &Sender{
		store:    store,
		opts:     opts,
		endpoint: endpoint,
		client:   client,
		tls:      tc,
		log:      opts.Logger,
		token:    ts,
		batch:    opts.BatchMax,
		y:        yieldState{interval: opts.YieldInterval, limit: opts.YieldFor},
	}
	s.m = newMetrics()
	s.m.batchLimit.Set(float64(s.batch))
	if err := s.m.register(opts.Registerer); err != nil {
		return nil, err
	}
	return s, nil
}

// newHTTPClient is a client of its own (a transport that keeps at most two
// idle connections) that never follows a redirect: the token must reach the
// configured host only.
func newHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	return &http.Client{Transport: tr, CheckRedirect: noRedirect}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func setDefault[T int | time.Duration](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

// CheckURL is the one check of a Reporting API base URL, for the settings
// (at start, exit 2) and for New: absolute with a host, https (http only
// when insecure), no credentials, query or fragment, and not already ending
// in EventsRoute. envPrefix is how the caller's settings are named
// ("TALLY_OSC_" for the daemon's environment), so that a problem names the
// setting to change. Errors quote the URL with any password hidden, and
// leave out the parser's message, which may quote a piece of it.
func CheckURL(raw string, insecure bool, envPrefix string) error {
	_, err := parseBaseURL(raw, insecure, envPrefix)
	return err
}

func endpointURL(raw string, insecure bool) (string, error) {
	u, err := parseBaseURL(raw, insecure, "")
	if err != nil {
		return "", err
	}
	u.Path = strings.TrimRight(u.Path, "/") + EventsRoute
	u.RawPath = ""
	return u.String(), nil
}

func parseBaseURL(raw string, insecure bool, envPrefix string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("%w: %sREPORTING_URL is empty", ErrInvalidURL, envPrefix)
	}
	shown := redact.URL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %q does not parse as a URL", ErrInvalidURL, shown)
	}
	switch {
	case !u.IsAbs() || u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%w: %q must be absolute with a host, like https://tally.example.com", ErrInvalidURL, shown)
	case u.User != nil:
		return nil, fmt.Errorf("%w: must not carry credentials: use %sREPORTING_TOKEN or %sREPORTING_TOKEN_FILE", ErrInvalidURL, envPrefix, envPrefix)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%w: %q must not carry a query or fragment", ErrInvalidURL, shown)
	case u.Scheme == "https":
	case u.Scheme == "http" && insecure:
	case u.Scheme == "http":
		return nil, fmt.Errorf("%w: %q must be https (the token travels with every request); set %sREPORTING_INSECURE=true to allow http on a trusted link", ErrInvalidURL, shown, envPrefix)
	default:
		return nil, fmt.Errorf("%w: scheme %q is not https", ErrInvalidURL, u.Scheme)
	}
	if base := strings.TrimRight(u.Path, "/"); strings.HasSuffix(base, EventsRoute) {
		fixed := *u
		fixed.Path, fixed.RawPath = strings.TrimSuffix(base, EventsRoute), ""
		return nil, fmt.Errorf("%w: %q ends in %s, which the collector adds itself (it would post to %s%s); set %sREPORTING_URL=%s",
			ErrInvalidURL, shown, EventsRoute, base, EventsRoute, envPrefix, fixed.String())
	}
	return u, nil
}

// Endpoint is the URL the sender posts to.
func (s *Sender) Endpoint() string { return s.endpoint }

// BatchLimit is the current batch limit (BatchMax until a 413 lowers it).
func (s *Sender) BatchLimit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batch
}

// Ready returns nil unless the Reporting API refused the token on the last
// attempt (401/403: it wraps ErrTokenRefused), answered 404 to the last
// notFoundRun POSTs or more (an *EndpointNotFoundError, until it answers
// anything else), or refuses every event it is sent, not one in particular
// (it wraps ErrRefusedByAPI until a batch is accepted again).
func (s *Sender) Ready() error {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	if s.authErr != nil {
		return s.authErr
	}
	if s.notFoundErr != nil {
		return s.notFoundErr
	}
	return s.refuseErr
}

// sentOK records a batch of n events the API answered with 200: the sender
// is ready, and the events sent, the duplicates and the rejected ones are
// counted.
func (s *Sender) sentOK(res result, n int) {
	s.setReady(nil)
	s.accepted(res.sent)
	s.m.batchSize.Observe(float64(n))
	s.m.sent.Add(float64(n))
	s.m.duplicates.Add(float64(res.answer.Duplicates))
	s.m.rejected.Add(float64(len(res.answer.Rejected)))
}

// counted counts a POST's outcome by class, and follows the run of 404s: a
// POST answered 404 extends it, any other answer ends it; a POST without an
// answer leaves it as it is.
func (s *Sender) counted(res result) {
	s.m.requests.WithLabelValues(res.class()).Inc()
	if res.err != nil {
		return
	}
	var err error
	if res.status == http.StatusNotFound {
		s.notFound++
		if s.notFound >= notFoundRun {
			err = &EndpointNotFoundError{URL: s.endpoint}
		}
	} else {
		s.notFound = 0
	}
	s.readyMu.Lock()
	first := err != nil && s.notFoundErr == nil
	s.notFoundErr = err
	s.readyMu.Unlock()
	if err != nil {
		s.m.endpointNotFound.Set(1)
	} else {
		s.m.endpointNotFound.Set(0)
	}
	if first {
		s.log.Error().Str("endpoint", s.endpoint).Int("in_a_row", s.notFound).
			Msg("reporting API answers 404 to every POST: REPORTING_URL must be the API's base URL; events kept, retrying")
	}
}

// setReady records the outcome of the token: nil once the API answered
// anything but 401 or 403.
func (s *Sender) setReady(err error) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	s.authErr = err
}

func (s *Sender) setRefusing(err error) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	s.refuseErr = err
}

// Run drains the store until ctx is done, then returns nil. With an Intake
// it holds back while the intake is backlogged: at most one batch per
// YieldInterval, for at most YieldFor at a stretch.
func (s *Sender) Run(ctx context.Context) error {
	s.log.Info().Str("endpoint", s.endpoint).Int("batch_max", s.opts.BatchMax).Msg("sender started")
	defer s.setYielding(false)
	for ctx.Err() == nil {
		s.yield(ctx)
		if ctx.Err() != nil {
			break
		}
		empty, wait, wake := s.step(ctx)
		if empty {
			wait = s.opts.IdleInterval
		}
		s.sleep(ctx, wait, wake)
	}
	return nil
}

// Flush delivers what the store holds, until it is empty (nil) or ctx is
// done (ctx's error). Failures are retried with the usual waits, bounded by
// ctx. It never holds back for the Intake. Meant for a graceful stop, after
// Run returned.
func (s *Sender) Flush(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		empty, wait, wake := s.step(ctx)
		if empty {
			return nil
		}
		s.sleep(ctx, wait, wake)
	}
}

func (s *Sender) sleep(ctx context.Context, d time.Duration, wakeOnToken bool) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var tick <-chan time.Time
	if wakeOnToken && s.token.File() != "" {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-tick:
			if s.token.Changed() {
				return
			}
		}
	}
}

// step makes one delivery attempt. empty: the store had nothing; wait: how
// long to pause before the next attempt; wake: the pause may end early when
// the token file changes.
func (s *Sender) step(ctx context.Context) (empty bool, wait time.Duration, wake bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last, events, err := s.store.Peek(ctx, s.limit())
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, false
		}
		s.log.Error().Err(err).Msg("reading the outbox failed")
		return false, s.backoff(), false
	}
	if len(events) == 0 {
		return true, 0, false
	}
	s.refusal.reached(first)
	s.lastPost = time.Now()
	res, wait, stop := s.send(ctx, events)
	if stop {
		return false, wait, false
	}
	n := len(events)
	switch {
	case res.status == http.StatusOK:
		s.sentOK(res, n)
		if len(res.answer.Rejected) > 0 {
			s.log.Warn().Int("rejected", len(res.answer.Rejected)).Str("first_reason", res.answer.Rejected[0].Reason).
				Msg("reporting API rejected events; they are in its dead-letter view")
		}
		if err := s.store.Delivered(ctx, first, last, res.answer.Duplicates); err != nil {
			// The batch is delivered; it will be resent and counted as
			// duplicates by the API.
			s.log.Error().Err(err).Uint64("first", first).Uint64("last", last).Msg("deleting a delivered batch failed")
			return false, s.backoff(), false
		}
		s.failures = 0
		s.grow(n)
		return false, 0, false

	case res.status == http.StatusRequestEntityTooLarge && n > 1:
		s.setReady(nil)
		s.refusal.shrinking(s, last)
		s.batch = max(1, n/2)
		s.ceiling = n
		s.streak = 0
		s.m.batchLimit.Set(float64(s.batch))
		s.log.Warn().Int("refused", n).Int("batch_limit", s.batch).Msg("reporting API answered 413; halving the batch")
		return false, 0, false

	case res.status == http.StatusBadRequest || res.status == http.StatusUnprocessableEntity:
		s.setReady(nil)
		if n > 1 {
			s.refusal.split(n, last)
			s.log.Warn().Int("status", res.status).Int("refused", n).Int("split_to", s.refusal.splitLimit).
				Msg("reporting API refused the batch; splitting it to find the events it refuses")
			return false, 0, false
		}
		return s.isolated(ctx, first, events[0], res)

	case res.status == http.StatusRequestEntityTooLarge:
		s.setReady(nil)
		return s.isolated(ctx, first, events[0], res)

	case res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable:
		s.setReady(nil)
		w := res.retryAfter
		if w <= 0 {
			w = s.backoff()
		} else {
			w = min(w, s.opts.MaxRetryAfter)
			s.failures++
		}
		s.log.Warn().Int("status", res.status).Dur("wait", w).Msg("reporting API asked to slow down; events kept")
		return false, w, false

	case res.status == http.StatusUnauthorized || res.status == http.StatusForbidden:
		s.setReady(fmt.Errorf("%w (HTTP %d)", ErrTokenRefused, res.status))
		src := "REPORTING_TOKEN"
		if s.token.File() != "" {
			src = "REPORTING_TOKEN_FILE " + s.token.File()
		}
		s.log.Error().Int("status", res.status).Str("token_from", src).Dur("retry_in", s.opts.AuthRetryInterval).Int("events", n).
			Msg("reporting API refused the token; events kept, retrying slowly; check the token")
		return false, s.opts.AuthRetryInterval, true

	default:
		s.setReady(nil)
		ev := s.log.Warn().Int("status", res.status).Int("events", n)
		if res.status >= 300 && res.status < 400 {
			ev = ev.Str("location_host", res.redirectHost)
			ev.Msg("reporting API answered a redirect, which is not followed (the token stays with the configured host); events kept")
		} else {
			ev.Msg("delivery failed; events kept")
		}
		return false, s.backoff(), false
	}
}

// grow raises the batch limit gradually after successes following a 413:
// by a quarter after regrowAfter full batches, up to just below the size
// last refused; past that only after forgetCeilingAfter full batches.
func (s *Sender) grow(n int) {
	if s.batch >= s.opts.BatchMax || n < s.batch {
		return
	}
	s.streak++
	if s.ceiling > 0 && s.batch >= s.ceiling-1 {
		if s.streak < forgetCeilingAfter {
			return
		}
		s.ceiling = 0
	} else if s.streak < regrowAfter {
		return
	}
	next := s.batch + max(1, s.batch/4)
	if s.ceiling > 0 {
		next = min(next, s.ceiling-1)
	}
	s.batch = min(s.opts.BatchMax, next)
	s.streak = 0
	s.m.batchLimit.Set(float64(s.batch))
}

// backoff returns the next wait after a failure (internal/backoff): full
// jitter, uniform in [0, step], the step doubling from BackoffBase with each
// consecutive failure up to BackoffMax.
func (s *Sender) backoff() time.Duration {
	p := backoff.Policy{Min: s.opts.BackoffBase, Max: s.opts.BackoffMax, Jitter: true, Rand: s.jitter}
	d := p.Delay(s.failures)
	s.failures++
	return d
}

type answer struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
	Rejected   []struct {
		EventID string `json:"event_id"`
		Reason  string `json:"reason"`
	} `json:"rejected"`
}

type result struct {
	status       int
	timeout      bool // err is a timeout: no answer within RequestTimeout
	retryAfter   time.Duration
	answer       answer
	redirectHost string
	refusal      []byte // the answer's body for a 400, 413 or 422 (bounded)
	sent         int    // bytes of the request body
	err          error
}

// Request classes, the label values of tally_collector_sender_requests_total.
const (
	classNetwork = "network" // no answer: connection refused or reset, DNS, TLS
	classTimeout = "timeout" // no answer within RequestTimeout
)

// requestClasses are every class a POST is counted under.
var requestClasses = []string{"2xx", "3xx", "4xx", "5xx", classNetwork, classTimeout}

// refusedStatuses are the statuses of an event refused on its own, the
// label values of tally_collector_sender_deadlettered_events_total.
var refusedStatuses = []string{"400", "413", "422"}

func (r result) class() string {
	switch {
	case r.err != nil && r.timeout:
		return classTimeout
	case r.err != nil:
		return classNetwork
	}
	return strconv.Itoa(r.status/100) + "xx"
}

// send posts events as one batch and counts the answer (counted). stop says
// the step ends here, to be tried again after wait: ctx ended the POST
// (shutting down: the batch stays in the store, wait 0) or the POST got no
// answer (the events are kept, wait is the back-off).
func (s *Sender) send(ctx context.Context, events [][]byte) (res result, wait time.Duration, stop bool) {
	res = s.post(ctx, events)
	if ctx.Err() != nil && res.err != nil {
		return res, 0, true
	}
	s.counted(res)
	if res.err != nil {
		s.log.Warn().Err(res.err).Int("events", len(events)).Msg("delivery failed; events kept")
		return res, s.backoff(), true
	}
	return res, 0, false
}

func (s *Sender) post(ctx context.Context, events [][]byte) result {
	size := len(`{"events":[]}`) + len(events) - 1
	for _, e := range events {
		size += len(e)
	}
	body := make([]byte, 0, size)
	body = append(body, `{"events":[`...)
	for i, e := range events {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, e...)
	}
	body = append(body, "]}"...)

	tok, err := s.token.Get()
	if err != nil {
		s.log.Error().Err(err).Msg("reading the token file failed; using the previous token")
	}
	rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	client, attempt := s.client, (*tlsfiles.Attempt)(nil)
	if s.tls != nil {
		var terr error
		client, attempt, terr = s.tls.get(newHTTPClient)
		if terr != nil {
			s.log.Error().Err(terr).Msg("reading the TLS files failed; using those read before")
		}
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		timeout := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
		return result{err: attempt.Explain(scrub(err), TLSSettings), timeout: timeout}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	s.m.duration.Observe(time.Since(start).Seconds())
	r := result{status: resp.StatusCode, sent: len(body)}
	if err != nil && resp.StatusCode == http.StatusOK {
		// The API stored the batch but the answer was cut: count it as
		// delivered anyway (a resend would only add duplicates).
		s.log.Warn().Err(scrub(err)).Msg("reading the reporting API answer failed after a 200")
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if jerr := json.Unmarshal(raw, &r.answer); jerr != nil {
			s.log.Warn().Err(jerr).Msg("reporting API answered 200 with an unexpected body; batch counted as delivered")
		}
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		r.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		r.refusal = raw[:min(len(raw), maxRefusalRead)]
	}
	if loc, lerr := resp.Location(); lerr == nil {
		r.redirectHost = loc.Host
	}
	return r
}

// scrub removes the URL from client errors: it carries no secret, but a
// url.Error is noisy; the endpoint is logged once at start.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or
// unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// newTokenSource is the token of REPORTING_TOKEN, or the file of
// REPORTING_TOKEN_FILE, re-read when it changes (tokenfile.Source).
func newTokenSource(token, file string, log zerolog.Logger) (*tokenfile.Source, error) {
	token = strings.TrimSpace(token)
	switch {
	case token != "" && file != "":
		return nil, fmt.Errorf("%w: set REPORTING_TOKEN or REPORTING_TOKEN_FILE, not both", ErrNoToken)
	case token != "":
		if strings.ContainsAny(token, "\r\n") {
			return nil, fmt.Errorf("%w: the token contains a line break", ErrNoToken)
		}
		return tokenfile.Static(token), nil
	case file != "":
		t, err := tokenfile.Open(file, log)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoToken, err)
		}
		return t, nil
	default:
		return nil, fmt.Errorf("%w: set REPORTING_TOKEN or REPORTING_TOKEN_FILE", ErrNoToken)
	}
}

func newMetrics() metrics {
	m := metrics{
		sent: imetrics.Counter("tally_collector_sent_events_total",
			"Events delivered to the Reporting API (in batches answered 200), including duplicates and rejections."),
		duplicates: imetrics.Counter("tally_collector_duplicate_events_total",
			"Delivered events the Reporting API already held (resends after a crash, redeliveries)."),
		rejected: imetrics.Counter("tally_collector_rejected_events_total",
			"Delivered events the Reporting API refused individually; they are in its dead-letter view."),
		setAside: imetrics.CounterVec("tally_collector_sender_deadlettered_events_total",
			"Events the Reporting API refused on their own, moved to the local dead-letter area, by status (400, 413, 422).",
			imetrics.By("status", refusedStatuses...)),
		requests: imetrics.CounterVec("tally_collector_sender_requests_total",
			"POSTs to the Reporting API by outcome: the answer's status class (2xx, 3xx, 4xx, 5xx), or no answer: network (connection refused or reset, DNS, TLS) or timeout (none within the request timeout).",
			imetrics.By("class", requestClasses...)),
		batchSize: imetrics.Histogram("tally_collector_sender_batch_events",
			"Events per delivered batch.",
			[]float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500}),
		batchLimit: imetrics.Gauge("tally_collector_sender_batch_limit_events",
			"Current batch limit: BATCH_MAX, or less after the Reporting API answered 413."),
		duration: imetrics.Histogram("tally_collector_sender_request_duration_seconds",
			"Time from sending a POST to reading its answer.",
			prometheus.ExponentialBuckets(0.005, 3, 9)),
		yielding: imetrics.Gauge("tally_collector_sender_yielding",
			"1 while the sender holds back to make room for a backlogged intake (at most one batch per interval), 0 otherwise."),
		yieldSeconds: imetrics.Counter("tally_collector_sender_yield_seconds_total",
			"Time the sender waited before a batch to make room for a backlogged intake."),
		endpointNotFound: imetrics.Gauge("tally_collector_sender_endpoint_not_found",
			fmt.Sprintf("1 while the Reporting API answers 404 to every POST (%d or more in a row): REPORTING_URL does not lead to the events route; 0 otherwise.", notFoundRun)),
	}
	return m
}

func (m metrics) register(r prometheus.Registerer) error {
	err := imetrics.Register(r, m.sent, m.duplicates, m.rejected, m.setAside, m.requests, m.batchSize, m.batchLimit, m.duration, m.yielding, m.yieldSeconds, m.endpointNotFound)
	if err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	return nil
}
