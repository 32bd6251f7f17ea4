package sender

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":    0,
		"0":   0,
		"7":   7 * time.Second,
		"-3":  0,
		"abc": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat):  90 * time.Second,
		now.Add(-90 * time.Second).Format(http.TimeFormat): 0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

// The backoff is full jitter: every wait lies in [0, step], the step doubling
// from BackoffBase to BackoffMax; over many draws the waits fill the step.
func TestBackoffGrowsWithJitterToCap(t *testing.T) {
	opts := Options{BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second}
	s := &Sender{opts: opts, jitter: rand.New(rand.NewPCG(3, 4))}
	for i := range 40 {
		ceil := 2 * time.Second
		if i < 5 {
			ceil = 100 * time.Millisecond << i
		}
		var lo, hi time.Duration = ceil, 0
		for range 400 {
			s.failures = i
			d := s.backoff()
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: %v outside [0, %v]", i, d, ceil)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > ceil/10 || hi < ceil*9/10 {
			t.Errorf("attempt %d: waits span [%v, %v] of [0, %v]", i, lo, hi, ceil)
		}
	}
	// Jitter: two senders at the same attempt do not wait the same.
	a, b := &Sender{opts: opts}, &Sender{opts: opts}
	same := 0
	for range 20 {
		if a.backoff() == b.backoff() {
			same++
		}
	}
	if same > 5 {
		t.Fatalf("%d of 20 backoffs identical: no jitter", same)
	}
}

// The yielding rule on a clock of its own: one POST per interval while the
// intake is backlogged, for at most limit at a stretch; a stretch ends when
// the intake is seen not backlogged, and the next backlog starts a new one.
func TestYieldDecide(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	y := yieldState{interval: time.Second, limit: 30 * time.Second}
	for i, c := range []struct {
		now        time.Duration
		backlogged bool
		lastPost   time.Time
		wait       time.Duration
		ev         yieldEvent
		lasted     time.Duration
		holding    bool
	}{
		{now: 0, backlogged: false, wait: 0, ev: yieldNone},
		{now: 0, backlogged: true, wait: 0, ev: yieldStarted, holding: true}, // nothing sent yet: go
		{now: 100 * time.Millisecond, backlogged: true, lastPost: at(0), wait: 900 * time.Millisecond, holding: true},
		{now: 1100 * time.Millisecond, backlogged: true, lastPost: at(0), wait: 0, holding: true},
		{now: 1200 * time.Millisecond, backlogged: true, lastPost: at(1100 * time.Millisecond), wait: 900 * time.Millisecond, holding: true},
		// The wait never runs past the bound of the stretch.
		{now: 29800 * time.Millisecond, backlogged: true, lastPost: at(29500 * time.Millisecond), wait: 200 * time.Millisecond, holding: true},
		{now: 30 * time.Second, backlogged: true, lastPost: at(29500 * time.Millisecond), wait: 0, ev: yieldExhausted},
		// Full speed until the backlog is seen over.
		{now: 31 * time.Second, backlogged: true, lastPost: at(31 * time.Second), wait: 0},
		{now: 90 * time.Second, backlogged: true, lastPost: at(90 * time.Second), wait: 0},
		{now: 100 * time.Second, backlogged: false, lastPost: at(99 * time.Second), wait: 0, ev: yieldEnded, lasted: 100 * time.Second},
		{now: 101 * time.Second, backlogged: false, lastPost: at(101 * time.Second), wait: 0},
		// A new backlog, a new stretch with its own bound.
		{now: 102 * time.Second, backlogged: true, lastPost: at(101500 * time.Millisecond), wait: 500 * time.Millisecond, ev: yieldStarted, holding: true},
		{now: 120 * time.Second, backlogged: true, lastPost: at(119900 * time.Millisecond), wait: 900 * time.Millisecond, holding: true},
		{now: 130 * time.Second, backlogged: false, lastPost: at(129 * time.Second), wait: 0, ev: yieldEnded, lasted: 28 * time.Second},
	} {
		wait, ev, lasted := y.decide(at(c.now), c.backlogged, c.lastPost)
		if wait != c.wait || ev != c.ev || lasted != c.lasted || y.holding() != c.holding {
			t.Fatalf("step %d at %v: wait %v ev %d lasted %v holding %v; want %v %d %v %v",
				i, c.now, wait, ev, lasted, y.holding(), c.wait, c.ev, c.lasted, c.holding)
		}
	}
}

// The excerpt of a refusal kept with a dead letter and logged: bounded,
// without credentials (named members, or the bearer token echoed back), on
// one line.
func TestRefusalExcerpt(t *testing.T) {
	const tok = "bearer-token-value-0123"
	body := []byte(`{"error":"bad event","echo":{"headers":{"Authorization":"Bearer x"},"auth_token":"abc","note":"sent with ` + tok + `"},` +
		`"list":[{"password":"hunter2"}]}`)
	got := excerpt(body, tok)
	for _, leak := range []string{"abc", "hunter2", tok, "Bearer x"} {
		if strings.Contains(got, leak) {
			t.Fatalf("excerpt %q holds %q", got, leak)
		}
	}
	if !strings.Contains(got, "bad event") || strings.Count(got, "[redacted]") != 4 {
		t.Fatalf("excerpt %q", got)
	}
	long := excerpt([]byte("line one\nline\ttwo "+strings.Repeat("é", 1000)), tok)
	if len(long) > maxExcerpt || strings.ContainsAny(long, "\n\t") || !utf8.ValidString(long) || !strings.HasSuffix(long, "...") {
		t.Fatalf("long excerpt %d bytes: %q", len(long), long[:40])
	}
	if excerpt(nil, tok) != "" {
		t.Fatal("empty body")
	}
}
