package sender

import (
	"context"
	"time"
)

// Intake is the input side as the sender sees it.
type Intake interface {
	// Backlogged reports whether the input is draining a backlog (the broker
	// keeps its prefetch window full).
	Backlogged() bool
}

// yieldPoll is how often Backlogged is asked again while the sender holds
// back, so that it resumes soon after the backlog ends.
const yieldPoll = 50 * time.Millisecond

// yieldState decides, before each step of Run, whether the sender holds back
// to leave the machine to a backlogged intake. A stretch starts when the
// intake is first seen backlogged and ends when it is first seen not
// backlogged. Within a stretch, a step may start only once interval has
// passed since the last POST began, until the stretch has lasted limit;
// from then on steps go at full speed until the stretch ends.
type yieldState struct {
	interval, limit time.Duration

	since     time.Time // start of the current stretch; zero: none
	exhausted bool      // the stretch lasted limit
}

type yieldEvent int

const (
	yieldNone      yieldEvent = iota
	yieldStarted              // a stretch began
	yieldExhausted            // the stretch lasted limit; full speed from now on
	yieldEnded                // the intake is no longer backlogged
)

// holding reports whether the sender holds back in the current stretch.
func (y *yieldState) holding() bool { return !y.since.IsZero() && !y.exhausted }

// decide answers how long to wait at now before the next step (0: go on),
// given whether the intake is backlogged and when the last POST began (zero:
// none yet), and what changed. lasted is the length of a stretch that ended.
func (y *yieldState) decide(now time.Time, backlogged bool, lastPost time.Time) (wait time.Duration, ev yieldEvent, lasted time.Duration) {
	if !backlogged {
		if y.since.IsZero() {
			return 0, yieldNone, 0
		}
		lasted = now.Sub(y.since)
		y.since, y.exhausted = time.Time{}, false
		return 0, yieldEnded, lasted
	}
	if y.since.IsZero() {
		y.since, ev = now, yieldStarted
	}
	if y.exhausted {
		return 0, ev, 0
	}
	left := y.limit - now.Sub(y.since)
	if left <= 0 {
		y.exhausted = true
		return 0, yieldExhausted, 0
	}
	if lastPost.IsZero() {
		return 0, ev, 0
	}
	wait = y.interval - now.Sub(lastPost)
	if wait <= 0 {
		return 0, ev, 0
	}
	return min(wait, left), ev, 0
}

// yield holds Run back while the intake is backlogged, within the bounds of
// the current stretch; it returns at once without an Intake, and when ctx is
// done.
func (s *Sender) yield(ctx context.Context) {
	if s.opts.Intake == nil {
		return
	}
	for {
		s.mu.Lock()
		lastPost := s.lastPost
		s.mu.Unlock()
		now := time.Now()
		wait, ev, lasted := s.y.decide(now, s.opts.Intake.Backlogged(), lastPost)
		switch ev {
		case yieldStarted:
			s.log.Info().Dur("interval", s.opts.YieldInterval).Dur("yield_for", s.opts.YieldFor).
				Msg("intake backlogged; sending at most one batch per interval to make room for it")
		case yieldExhausted:
			s.log.Warn().Dur("yield_for", s.opts.YieldFor).
				Msg("backlog lasted longer than YieldFor; sending at full speed")
		case yieldEnded:
			s.log.Info().Dur("lasted", lasted).Msg("intake backlog over; sending at full speed")
		}
		s.setYielding(s.y.holding())
		if wait <= 0 {
			return
		}
		t := time.NewTimer(min(wait, yieldPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			s.m.yieldSeconds.Add(time.Since(now).Seconds())
			return
		case <-t.C:
			s.m.yieldSeconds.Add(time.Since(now).Seconds())
		}
	}
}

func (s *Sender) setYielding(on bool) {
	if on {
		s.m.yielding.Set(1)
	} else {
		s.m.yielding.Set(0)
	}
}
