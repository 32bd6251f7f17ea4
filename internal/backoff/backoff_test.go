package backoff

import (
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"
)

func TestStepsDoubleToTheCap(t *testing.T) {
	b := New(Policy{Min: time.Second, Max: 60 * time.Second})
	var got []time.Duration
	for range 9 {
		got = append(got, b.Next())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("schedule %v", got)
		}
	}
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Fatalf("after Reset: %v", d)
	}
}

func TestStepNeverOverflows(t *testing.T) {
	p := Policy{Min: 500 * time.Millisecond, Max: 60 * time.Second}
	for _, n := range []int{0, 1, 7, 30, 62, 63, 64, 1000, math.MaxInt} {
		if d := p.Step(n); d <= 0 || d > p.Max {
			t.Errorf("Step(%d) = %v", n, d)
		}
	}
	if d := (Policy{Min: time.Hour}).Step(1000); d <= 0 {
		t.Errorf("uncapped step overflowed: %v", d)
	}
	if d := (Policy{Min: 10 * time.Second, Max: time.Second}).Step(0); d != time.Second {
		t.Errorf("Min above Max: %v", d)
	}
	if d := (Policy{}).Step(0); d != 1 {
		t.Errorf("zero policy: %v", d)
	}
}

// Full jitter: every delay lies in [0, step], and over many draws from a
// seeded source the delays cover the whole range with the mean near step/2.
func TestFullJitterIsUniformOverTheStep(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: true, Rand: rand.New(rand.NewPCG(1, 2))}
	for n := range 8 {
		step := p.Step(n)
		const draws = 4000
		var sum float64
		lo, hi := step, time.Duration(0)
		var buckets [4]int
		for range draws {
			d := p.Delay(n)
			if d < 0 || d > step {
				t.Fatalf("attempt %d: %v outside [0, %v]", n, d, step)
			}
			sum += float64(d)
			lo, hi = min(lo, d), max(hi, d)
			buckets[min(int(4*d/(step+1)), 3)]++
		}
		mean := sum / draws / float64(step)
		if mean < 0.45 || mean > 0.55 {
			t.Errorf("attempt %d: mean %.3f of the step, want about 0.5", n, mean)
		}
		if lo > step/50 || hi < step-step/50 {
			t.Errorf("attempt %d: draws span [%v, %v] of [0, %v]", n, lo, hi, step)
		}
		for i, c := range buckets {
			if c < draws/4*8/10 || c > draws/4*12/10 {
				t.Errorf("attempt %d: quarter %d holds %d of %d draws", n, i, c, draws)
			}
		}
	}
}

func TestJitterIsSeeded(t *testing.T) {
	a := New(Policy{Min: time.Second, Max: time.Minute, Jitter: true, Rand: rand.New(rand.NewPCG(7, 7))})
	b := New(Policy{Min: time.Second, Max: time.Minute, Jitter: true, Rand: rand.New(rand.NewPCG(7, 7))})
	c := New(Policy{Min: time.Second, Max: time.Minute, Jitter: true, Rand: rand.New(rand.NewPCG(8, 8))})
	same := 0
	for range 20 {
		da, db, dc := a.Next(), b.Next(), c.Next()
		if da != db {
			t.Fatalf("one seed, two schedules: %v %v", da, db)
		}
		if da == dc {
			same++
		}
	}
	if same > 2 {
		t.Fatalf("%d of 20 delays equal under two seeds", same)
	}
}

func TestAttempts(t *testing.T) {
	b := New(Policy{Min: time.Millisecond, Max: time.Second})
	for range 3 {
		b.Next()
	}
	if b.Attempts() != 3 {
		t.Fatalf("attempts %d", b.Attempts())
	}
}

func TestAcceptRetriesQuicklyThenCapsAtOneSecond(t *testing.T) {
	b := New(Accept)
	var got []time.Duration
	for range 10 {
		got = append(got, b.Next())
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("schedule %v", got)
		}
	}
}

// The accept loop waits on the Accept schedule after each failure, starts the
// schedule over after a connection, and ends when take says so or when the
// listener is closed.
func TestAccepting(t *testing.T) {
	failure := errors.New("too many open files")
	closed := &net.OpError{Op: "accept", Err: net.ErrClosed}
	for _, c := range []struct {
		name  string
		steps []string // "" a failure, "closed" the listener closed, else a connection
		taken []string
		waits []time.Duration // in ms
	}{
		{"take ends it", []string{"", "", "a", "", "stop", "b"}, []string{"a", "stop"}, []time.Duration{5, 10, 5}},
		{"closed ends it", []string{"a", "", "closed", "b"}, []string{"a"}, []time.Duration{5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var waits []time.Duration
			var taken []string
			n := 0
			Accepting(func() (string, error) {
				s := c.steps[n]
				n++
				switch s {
				case "":
					return "", failure
				case "closed":
					return "", closed
				}
				return s, nil
			}, func(err error, wait time.Duration) {
				if !errors.Is(err, failure) {
					t.Errorf("failed with %v", err)
				}
				waits = append(waits, wait)
			}, func(conn string) bool {
				taken = append(taken, conn)
				return conn != "stop"
			})
			if !slices.Equal(taken, c.taken) {
				t.Errorf("taken %v, want %v", taken, c.taken)
			}
			for i := range c.waits {
				c.waits[i] *= time.Millisecond
			}
			if !slices.Equal(waits, c.waits) {
				t.Errorf("waits %v, want %v", waits, c.waits)
			}
		})
	}
}
