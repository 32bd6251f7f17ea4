package input

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Serving is the start and stop a server of an input (channel, plog) shares
// with the others: Run serves once; Close may come before, during or after
// Run, and while Run serves it waits for Run to drain.
type Serving struct {
	name   string // the input, the first word of the errors
	closed error  // what Run answers once Close came first
	// shut closes the server's sockets; Serving calls it when Close comes
	// before Run serves. It must be safe to call more than once.
	shut func()

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	ran      atomic.Bool
}

// NewServing returns the start and stop of the input name, whose Run answers
// closed once Close came first, and whose sockets shut closes.
func NewServing(name string, closed error, shut func()) *Serving {
	return &Serving{name: name, closed: closed, shut: shut, stop: make(chan struct{}), done: make(chan struct{})}
}

// Run calls serve and returns what it returns. A second Run returns an
// error wrapping closed at once; a Run after Close shuts the sockets and
// returns closed.
func (s *Serving) Run(serve func() error) error {
	if !s.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("%s: run twice: %w", s.name, s.closed)
	}
	defer close(s.done)
	select {
	case <-s.stop:
		s.shut()
		return s.closed
	default:
	}
	return serve()
}

// Wait returns when ctx is done or Close was called: serve then drains,
// bounded by drain: past it, Wait's timer calls cancel (the context of the
// work serve started). serve defers the returned stop of that timer.
func (s *Serving) Wait(ctx context.Context, drain time.Duration, cancel context.CancelFunc) (stop func() bool) {
	select {
	case <-ctx.Done():
	case <-s.stop:
	}
	return time.AfterFunc(drain, cancel).Stop
}

// Close stops the server. While Run serves, Close waits for it to return,
// bounded by ctx; without Run it shuts the sockets. It is safe to call more
// than once.
func (s *Serving) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	if !s.ran.Load() {
		s.shut()
		return nil
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: close: %w", s.name, ctx.Err())
	}
}
