package sender_test

// These tests run the sender against the reference Reporting API over
// loopback, with a real outbox as its store.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

const token = "s3cret-token"

type env struct {
	srv *server.Server
	ts  *httptest.Server
	ob  *outbox.Outbox
	dir string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv, err := server.New(server.Options{Token: token, DataDir: testkit.BenchDir(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	dir := testkit.BenchDir(t)
	ob, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close(); srv.Close(); ob.Close() })
	return &env{srv: srv, ts: ts, ob: ob, dir: dir}
}

func (e *env) sender(t testing.TB, mod ...func(*sender.Options)) *sender.Sender {
	t.Helper()
	opts := sender.Options{
		URL: e.ts.URL, Token: token, Insecure: true, BatchMax: 100, Logger: zerolog.Nop(),
		BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, IdleInterval: 10 * time.Millisecond,
	}
	for _, m := range mod {
		m(&opts)
	}
	s, err := sender.New(e.ob, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func event(i, pad int) []byte {
	return []byte(fmt.Sprintf(`{"event_id":"id-%06d","timestamp":"2024-05-01T12:00:00.123456Z","event_type":"compute.instance.exists",`+
		`"service":"nova","resource_type":"instance","resource_id":"r-%06d","project_id":"p1","action":"exists",`+
		`"attributes":{"vcpus":2,"pad":"%s"},"source":{"exchange":"nova","routing_key":"notifications.info"}}`, i, i, strings.Repeat("x", pad)))
}

func (e *env) append(t testing.TB, from, n, pad int) {
	t.Helper()
	evs := make([][]byte, n)
	for i := range evs {
		evs[i] = event(from+i, pad)
	}
	if err := e.ob.Append(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

func (e *env) stats(t testing.TB) server.Stats {
	t.Helper()
	st, err := e.srv.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func flush(t testing.TB, s *sender.Sender, d time.Duration) {
	t.Helper()
	if err := flushFor(s, d); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// flushFor lets s drain for d at the most and answers Flush's error: for
// the tests that leave events in the outbox.
func flushFor(s *sender.Sender, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.Flush(ctx)
}

// listIDs reads every stored event id through GET /api/v1/events.
func listIDs(t testing.TB, base string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	after := uint64(0)
	for {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/v1/events?after=%d&limit=1000", base, after), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Events []struct {
				EventID string `json:"event_id"`
			} `json:"events"`
			Next uint64 `json:"next"`
			More bool   `json:"more"`
		}
		json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		for _, e := range page.Events {
			ids[e.EventID] = true
		}
		if !page.More {
			return ids
		}
		after = page.Next
	}
}

func TestRunDeliversEverythingAndDeletes(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	s := e.sender(t, func(o *sender.Options) { o.Registerer = reg })
	e.append(t, 0, 1234, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	drained := func() bool { return e.ob.Depth() == 0 }
	testkit.WaitFor(t, 20*time.Second, "the outbox drained", drained)
	e.append(t, 1234, 10, 100) // arrives while Run idles
	testkit.WaitFor(t, 20*time.Second, "the outbox drained again", drained)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if e.ob.Depth() != 0 {
		t.Fatalf("depth %d after run", e.ob.Depth())
	}
	st := e.stats(t)
	if st.Accepted != 1244 || st.Duplicates != 0 || st.Rejected != 0 {
		t.Fatalf("server stats %+v", st)
	}
	if ids := listIDs(t, e.ts.URL); len(ids) != 1244 || !ids["id-000000"] || !ids["id-001243"] {
		t.Fatalf("listing has %d ids", len(ids))
	}
	if got := testkit.Metric(t, reg, "tally_collector_sent_events_total"); got != 1244 {
		t.Fatalf("sent counter %v", got)
	}
	if s.Ready() != nil {
		t.Fatalf("not ready: %v", s.Ready())
	}
}

func TestOutageThenRecovery(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	s := e.sender(t, func(o *sender.Options) { o.Registerer = reg })
	e.append(t, 0, 250, 50)
	e.srv.SetFault(&server.Fault{Status: 500}) // until cleared
	err := flushFor(s, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush during an outage: %v", err)
	}
	if e.ob.Depth() != 250 {
		t.Fatalf("events lost during the outage: depth %d", e.ob.Depth())
	}
	fails := testkit.Metric(t, reg, "tally_collector_sender_requests_total", "5xx")
	if fails < 2 {
		t.Fatalf("only %v failed requests counted: no retries", fails)
	}
	// A network failure (nothing listening) is kept the same way.
	down := e.sender(t, func(o *sender.Options) { o.URL = "http://127.0.0.1:1" })
	_ = flushFor(down, 100*time.Millisecond)
	if e.ob.Depth() != 250 {
		t.Fatalf("events lost to a refused connection: depth %d", e.ob.Depth())
	}
	e.srv.SetFault(nil)
	flush(t, s, 10*time.Second)
	if st := e.stats(t); st.Accepted != 250 || e.ob.Depth() != 0 {
		t.Fatalf("after recovery: %+v depth %d", st, e.ob.Depth())
	}
}

func Test413HalvesThenRegrowsGradually(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t, func(o *sender.Options) { o.BatchMax = 64 })
	one := len(event(0, 100))
	e.srv.SetMaxBodyBytes(int64(20*(one+1) + 20)) // 20 events fit, 32 do not
	// 64 -> 413 -> 32 -> 413 -> 16 fits; after 4 full batches of 16 the
	// limit grows by a quarter to 20, which still fits.
	e.append(t, 0, 64, 100)
	flush(t, s, 10*time.Second)
	if got := s.BatchLimit(); got != 20 {
		t.Fatalf("batch limit after 413s and 4 batches = %d, want 20 (64 -> 32 -> 16 -> 20)", got)
	}
	st := e.stats(t)
	if st.Requests["413"] != 2 || st.Accepted != 64 {
		t.Fatalf("stats %+v", st)
	}
	// The destination takes more again: the limit grows a quarter at a time.
	e.srv.SetMaxBodyBytes(1 << 20)
	e.append(t, 64, 80, 100) // 4 full batches of 20
	flush(t, s, 10*time.Second)
	if got := s.BatchLimit(); got != 25 {
		t.Fatalf("batch limit after 4 more full batches = %d, want 25 (not straight to 64)", got)
	}
	e.append(t, 144, 4000, 100)
	flush(t, s, 30*time.Second)
	if got := s.BatchLimit(); got != 64 {
		t.Fatalf("batch limit after many successes = %d, want back at 64", got)
	}
	if st := e.stats(t); st.Accepted != 4144 || st.Requests["413"] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSingleEventRefusedAlone(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	s := e.sender(t, func(o *sender.Options) { o.Registerer = reg })
	// Past 64 KiB: set aside at once; the events behind it go through.
	e.srv.SetMaxBodyBytes(64 << 10)
	e.append(t, 0, 1, 70<<10)
	e.append(t, 1, 3, 10)
	flush(t, s, 10*time.Second)
	if got := testkit.Metric(t, reg, "tally_collector_sender_deadlettered_events_total", "413"); got != 1 {
		t.Fatalf("dead-lettered %v, want 1", got)
	}
	if st := e.stats(t); st.Accepted != 3 || e.ob.Depth() != 0 || e.ob.DeadLetterCount() != 1 {
		t.Fatalf("stats %+v depth %d dead letters %d", st, e.ob.Depth(), e.ob.DeadLetterCount())
	}
	// Below 64 KiB, alone in the outbox: nothing tells whether the 413 is
	// about the event or the destination; the event is kept.
	e.srv.SetMaxBodyBytes(1 << 10)
	e.append(t, 10, 1, 2<<10)
	_ = flushFor(s, 300*time.Millisecond)
	if e.ob.Depth() != 1 {
		t.Fatalf("a 2 KiB event refused alone was not kept: depth %d", e.ob.Depth())
	}
	// Events behind it, sent on their own, are refused too: the body limit
	// is too small for any of them (an ingress with a small
	// client_max_body_size): everything is kept, and the sender says so.
	e.append(t, 11, 20, 100)
	_ = flushFor(s, 300*time.Millisecond)
	if e.ob.Depth() != 21 || e.ob.DeadLetterCount() != 1 {
		t.Fatalf("events set aside under a destination limit: depth %d dead letters %d", e.ob.Depth(), e.ob.DeadLetterCount())
	}
	if err := s.Ready(); !errors.Is(err, sender.ErrRefusedByAPI) {
		t.Fatalf("ready while the API refuses every body: %v", err)
	}
	e.srv.SetMaxBodyBytes(1 << 20)
	flush(t, s, 10*time.Second)
	if st := e.stats(t); st.Accepted != 24 || e.ob.DeadLetterCount() != 1 {
		t.Fatalf("kept events not delivered: %+v", st)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("not ready after the API took a batch: %v", err)
	}
}

// A batch the API refuses with 400 or 422 for one event in it is split until
// that event is alone; it goes to the local dead-letter area with the status
// and the API's answer, and everything else is delivered.
func TestPoisonEventsSetAside(t *testing.T) {
	for _, status := range []int{400, 422} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t)
			reg := prometheus.NewRegistry()
			s := e.sender(t, func(o *sender.Options) { o.Registerer = reg })
			e.append(t, 0, 300, 50)
			if err := e.srv.SetRefusal(&server.Refusal{EventIDs: []string{"id-000037", "id-000038", "id-000150"}, Status: status}); err != nil {
				t.Fatal(err)
			}
			flush(t, s, 20*time.Second)
			st := e.stats(t)
			if st.Accepted != 297 || e.ob.Depth() != 0 {
				t.Fatalf("stats %+v depth %d", st, e.ob.Depth())
			}
			refused := st.Requests[strconv.Itoa(status)]
			if refused > 24 {
				t.Fatalf("%d refused requests to isolate 3 events in 300: the split is not a halving", refused)
			}
			dls, err := e.ob.ListDeadLetters(context.Background(), 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range dls {
				if d.Reason != outbox.ReasonRefusedByAPI || d.EventType != "compute.instance.exists" ||
					!strings.HasPrefix(d.Detail, fmt.Sprintf("HTTP %d: ", status)) || !strings.Contains(d.Detail, "malformed") {
					t.Fatalf("dead letter %+v", d)
				}
				var ev struct {
					EventID string `json:"event_id"`
				}
				if err := json.Unmarshal(d.Body, &ev); err != nil {
					t.Fatalf("dead letter body is not the event: %v", err)
				}
				ids = append(ids, ev.EventID)
			}
			if strings.Join(ids, ",") != "id-000037,id-000038,id-000150" {
				t.Fatalf("dead letters hold %v", ids)
			}
			if got := testkit.Metric(t, reg, "tally_collector_sender_deadlettered_events_total", strconv.Itoa(status)); got != 3 {
				t.Fatalf("dead-lettered counter %v", got)
			}
			if s.BatchLimit() != 100 || s.Ready() != nil {
				t.Fatalf("batch limit %d, ready %v", s.BatchLimit(), s.Ready())
			}
			// The next batches go out whole again.
			e.append(t, 300, 200, 50)
			before := e.stats(t).Requests["200"]
			flush(t, s, 10*time.Second)
			if n := e.stats(t).Requests["200"] - before; n != 2 {
				t.Fatalf("200 events after the poison took %d requests, want 2", n)
			}
		})
	}
}

// A refused event at the head with nothing delivered yet (after a restart):
// the events behind it, sent alone, are taken, so the refusal is about the
// event. When the API turns to refusing everything, the first event refused
// after a success is set aside (the API had just taken others); for the
// next one, the event behind it is refused as well: nothing more is set
// aside, and the sender reports not ready.
func TestPoisonAtHeadAndAPIRefusingEverything(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t)
	e.append(t, 0, 10, 50)
	e.srv.SetRefusal(&server.Refusal{EventIDs: []string{"id-000000"}})
	flush(t, s, 10*time.Second)
	if st := e.stats(t); st.Accepted != 9 || e.ob.DeadLetterCount() != 1 {
		t.Fatalf("stats %+v dead letters %d", st, e.ob.DeadLetterCount())
	}

	e.append(t, 10, 10, 50)
	var all []string
	for i := 10; i < 20; i++ {
		all = append(all, fmt.Sprintf("id-%06d", i))
	}
	e.srv.SetRefusal(&server.Refusal{EventIDs: all, Status: 422})
	_ = flushFor(s, 500*time.Millisecond)
	if e.ob.Depth() != 9 || e.ob.DeadLetterCount() != 2 {
		t.Fatalf("events set aside while the API refuses everything: depth %d dead letters %d", e.ob.Depth(), e.ob.DeadLetterCount())
	}
	if err := s.Ready(); !errors.Is(err, sender.ErrRefusedByAPI) {
		t.Fatalf("ready: %v", err)
	}
	e.srv.SetRefusal(nil)
	flush(t, s, 10*time.Second)
	if st := e.stats(t); st.Accepted != 18 || s.Ready() != nil {
		t.Fatalf("stats %+v ready %v", st, s.Ready())
	}
}

// An API that refuses one event with 413 because of that event (a limit per
// event, not per body): the 413 halving isolates it, batches larger than it
// were taken, so it is set aside, and the batch limit returns to where it
// was instead of staying halved.
func Test413ForOneEventSetAside(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	s := e.sender(t, func(o *sender.Options) { o.Registerer = reg; o.BatchMax = 64 })
	e.srv.SetRefusal(&server.Refusal{MaxEventBytes: 2 << 10})
	e.append(t, 0, 1, 3<<10) // at the head: nothing taken yet
	e.append(t, 1, 100, 100)
	e.append(t, 101, 1, 3<<10) // in the middle
	e.append(t, 102, 100, 100)
	flush(t, s, 20*time.Second)
	st := e.stats(t)
	if st.Accepted != 200 || e.ob.Depth() != 0 || e.ob.DeadLetterCount() != 2 {
		t.Fatalf("stats %+v depth %d dead letters %d", st, e.ob.Depth(), e.ob.DeadLetterCount())
	}
	if got := testkit.Metric(t, reg, "tally_collector_sender_deadlettered_events_total", "413"); got != 2 {
		t.Fatalf("dead-lettered counter %v", got)
	}
	if s.BatchLimit() != 64 {
		t.Fatalf("batch limit %d after a 413 caused by one event, want 64", s.BatchLimit())
	}
}

func Test429RetryAfterHonoured(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t)
	e.append(t, 0, 10, 10)
	e.srv.SetFault(&server.Fault{Status: 429, Count: 1, RetryAfter: "1"})
	start := time.Now()
	flush(t, s, 10*time.Second)
	waited := time.Since(start)
	if waited < 950*time.Millisecond {
		t.Fatalf("delivered %v after a 429 with Retry-After: 1", waited)
	}
	st := e.stats(t)
	if st.Requests["429"] != 1 || st.Requests["200"] != 1 || st.Accepted != 10 {
		t.Fatalf("stats %+v", st)
	}
	// 503 with an HTTP date.
	e.append(t, 10, 5, 10)
	e.srv.SetFault(&server.Fault{Status: 503, Count: 1, RetryAfter: time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)})
	start = time.Now()
	flush(t, s, 10*time.Second)
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("delivered %v after a 503 with a Retry-After date", waited)
	}
	if st := e.stats(t); st.Accepted != 15 || st.Requests["503"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTokenRefusedKeepsEventsAndRecoversOnFileChange(t *testing.T) {
	e := newEnv(t)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("wrong-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testkit.SyncBuffer
	s := e.sender(t, func(o *sender.Options) {
		o.Token = ""
		o.TokenFile = tokFile
		o.AuthRetryInterval = time.Hour // only the file change may wake it
		o.Logger = zerolog.New(&logs)
	})
	e.append(t, 0, 20, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	testkit.WaitFor(t, 5*time.Second, "the sender not ready", func() bool { return s.Ready() != nil })
	if !errors.Is(s.Ready(), sender.ErrTokenRefused) {
		t.Fatalf("ready = %v, want ErrTokenRefused", s.Ready())
	}
	time.Sleep(200 * time.Millisecond)
	if e.ob.Depth() != 20 {
		t.Fatalf("events not kept on 401: depth %d", e.ob.Depth())
	}
	if st := e.stats(t); st.Requests["401"] != 1 {
		t.Fatalf("retried fast while the token is refused: %+v", st)
	}
	// Fix the token file: the sender re-reads it and delivers.
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the outbox drained", func() bool { return e.ob.Depth() == 0 })
	cancel()
	<-done
	if e.ob.Depth() != 0 || s.Ready() != nil {
		t.Fatalf("after fixing the token: depth %d ready %v", e.ob.Depth(), s.Ready())
	}
	l := logs.String()
	if !strings.Contains(l, "refused the token") || strings.Contains(l, token) || strings.Contains(l, "wrong-token") {
		t.Fatalf("log does not say the token was refused, or shows a token:\n%s", l)
	}
}

func TestSlowAnswerTimesOutAndIsResent(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t, func(o *sender.Options) { o.RequestTimeout = 150 * time.Millisecond })
	e.append(t, 0, 50, 10)
	// The first answer comes after the timeout; the server stores the
	// batch anyway, so the resend is counted as duplicates.
	e.srv.SetFault(&server.Fault{DelayMS: 400, Count: 1})
	flush(t, s, 10*time.Second)
	time.Sleep(400 * time.Millisecond) // let the slow request finish storing
	st := e.stats(t)
	if st.Accepted != 50 || st.Duplicates != 50 || e.ob.Depth() != 0 {
		t.Fatalf("stats %+v depth %d", st, e.ob.Depth())
	}
}

func TestRejectedEventsCounted(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	s := e.sender(t, func(o *sender.Options) { o.Registerer = reg })
	bad := []byte(`{"event_id":"bad-1","timestamp":"2024-05-01T12:00:00Z","event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"r","action":"exists"}`)
	if err := e.ob.Append(context.Background(), [][]byte{event(1, 0), bad}); err != nil {
		t.Fatal(err)
	}
	flush(t, s, 5*time.Second)
	if got := testkit.Metric(t, reg, "tally_collector_rejected_events_total"); got != 1 {
		t.Fatalf("rejected %v", got)
	}
	if st := e.stats(t); st.Accepted != 1 || st.Rejected != 1 || e.ob.Depth() != 0 {
		t.Fatalf("stats %+v", st)
	}
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/api/v1/dead-letters", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dl struct {
		DeadLetters []struct {
			EventID string `json:"event_id"`
			Reason  string `json:"reason"`
		} `json:"dead_letters"`
	}
	json.NewDecoder(resp.Body).Decode(&dl)
	if len(dl.DeadLetters) != 1 || dl.DeadLetters[0].EventID != "bad-1" || !strings.Contains(dl.DeadLetters[0].Reason, "project_id") {
		t.Fatalf("dead letters %+v", dl)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	var sawToken atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			sawToken.Add(1)
		}
		w.WriteHeader(200)
		w.Write([]byte(`{"accepted":1}`))
	}))
	defer other.Close()
	redirector := httptest.NewServer(http.RedirectHandler(other.URL+"/api/v1/events", http.StatusTemporaryRedirect))
	defer redirector.Close()
	e := newEnv(t)
	s := e.sender(t, func(o *sender.Options) { o.URL = redirector.URL })
	e.append(t, 0, 3, 10)
	_ = flushFor(s, 200*time.Millisecond)
	if sawToken.Load() != 0 {
		t.Fatal("the token followed a redirect to another host")
	}
	if e.ob.Depth() != 3 {
		t.Fatalf("events deleted on a redirect: depth %d", e.ob.Depth())
	}
}

func TestURLAndTokenValidation(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://tally.example.com", false, true},
		{"https://tally.example.com:8443/base/", false, true},
		{"http://tally.example.com", true, true},
		{"http://tally.example.com", false, false},
		{"tally.example.com", false, false},
		{"/api", false, false},
		{"https://", false, false},
		{"https://user:pw@tally.example.com", false, false},
		{"ftp://tally.example.com", true, false},
		{"", false, false},
		{"https://tally.example.com/?x=1", false, false},
	} {
		_, err := sender.New(e.ob, sender.Options{URL: c.url, Insecure: c.insecure, Token: "t"})
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, sender.ErrInvalidURL)) {
			t.Errorf("%q insecure=%v: %v", c.url, c.insecure, err)
		}
	}
	s, err := sender.New(e.ob, sender.Options{URL: "https://h.example/base/", Token: "t"})
	if err != nil || s.Endpoint() != "https://h.example/base/api/v1/events" {
		t.Fatalf("endpoint %v %v", s, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, o := range []sender.Options{
		{URL: "https://h.example"},
		{URL: "https://h.example", Token: "a", TokenFile: empty},
		{URL: "https://h.example", TokenFile: empty},
		{URL: "https://h.example", TokenFile: "/nonexistent/token"},
	} {
		if _, err := sender.New(e.ob, o); !errors.Is(err, sender.ErrNoToken) {
			t.Errorf("%+v: %v, want ErrNoToken", o, err)
		}
	}
}

func TestHTTPSWithTestCA(t *testing.T) {
	srv, err := server.New(server.Options{Token: token, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// httptest's own certificate (for 127.0.0.1), trusted only through caPool.
	ts := httptest.NewTLSServer(srv)
	defer ts.Close()
	caPool := x509.NewCertPool()
	caPool.AddCert(ts.Certificate())
	e := newEnv(t)
	e.append(t, 0, 30, 10)
	// Without the CA the connection is refused and nothing is lost.
	s, err := sender.New(e.ob, sender.Options{URL: ts.URL, Token: token, BackoffBase: 5 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	_ = flushFor(s, 100*time.Millisecond)
	if e.ob.Depth() != 30 {
		t.Fatalf("depth %d with an untrusted certificate", e.ob.Depth())
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool}}}
	s, err = sender.New(e.ob, sender.Options{URL: ts.URL, Token: token, HTTPClient: client, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	flush(t, s, 5*time.Second)
	if st, _ := srv.Stats(); st.Accepted != 30 {
		t.Fatalf("over https: %+v", st)
	}
}

func TestReasonMatchesTheOutbox(t *testing.T) {
	if sender.ReasonRefused != outbox.ReasonRefusedByAPI {
		t.Fatalf("%q != %q", sender.ReasonRefused, outbox.ReasonRefusedByAPI)
	}
}

// TestURLErrorsHideThePassword: a Reporting API URL refused for any reason is
// never quoted back with its password.
func TestURLErrorsHideThePassword(t *testing.T) {
	e := newEnv(t)
	for _, u := range []string{
		"user:pw-SECRET@tally.example.com/x",
		"https://user:pw-SECRET@tally.example.com",
		"https://user:pw-SECRET@tally.example.com:bad/",
		"http://user:pw-SECRET@tally.example.com",
		"https://user:pw%zzSECRET@tally.example.com",
		"//user:pw-SECRET@tally.example.com/x",
	} {
		_, err := sender.New(e.ob, sender.Options{URL: u, Token: "t"})
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%q: %v", u, err)
		}
	}
}
