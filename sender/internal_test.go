package sender

import (
	"net/http"
	"testing"
	"time"
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

func TestBackoffGrowsWithJitterToCap(t *testing.T) {
	s := &Sender{opts: Options{BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second}}
	var prevMax time.Duration
	for i := range 40 {
		d := s.backoff()
		ceil := min(100*time.Millisecond<<i, 2*time.Second)
		if i > 30 {
			ceil = 2 * time.Second
		}
		if d < ceil/2 || d > ceil {
			t.Fatalf("attempt %d: %v outside [%v, %v]", i, d, ceil/2, ceil)
		}
		prevMax = max(prevMax, d)
	}
	if prevMax > 2*time.Second {
		t.Fatalf("backoff passed the cap: %v", prevMax)
	}
	// Jitter: two senders at the same attempt do not wait the same.
	a, b := &Sender{opts: s.opts}, &Sender{opts: s.opts}
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
