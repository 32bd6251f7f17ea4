package input

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errClosed = errors.New("test: server closed")

// Close before Run shuts the sockets, and Run then returns the closed error
// without serving; a second Run returns it too.
func TestServingClosedBeforeRun(t *testing.T) {
	shuts := 0
	s := NewServing("test", errClosed, func() { shuts++ })
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if shuts != 1 {
		t.Fatalf("Close before Run shut %d times, want 1", shuts)
	}
	served := false
	if err := s.Run(func() error { served = true; return nil }); !errors.Is(err, errClosed) || err.Error() != errClosed.Error() {
		t.Errorf("Run after Close = %v, want %v", err, errClosed)
	}
	if served {
		t.Error("Run after Close served")
	}
	if err := s.Run(func() error { served = true; return nil }); !errors.Is(err, errClosed) || err.Error() != "test: run twice: test: server closed" {
		t.Errorf("second Run = %v", err)
	}
	if served {
		t.Error("the second Run served")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// Close while Run serves ends Wait and returns once serve has returned; a
// Close bounded by a context that ends first says so.
func TestServingCloseWaitsForRun(t *testing.T) {
	s := NewServing("test", errClosed, func() { t.Error("shut called while Run serves") })
	waiting := make(chan struct{})
	release := make(chan struct{})
	drained := false
	ran := make(chan error, 1)
	go func() {
		ran <- s.Run(func() error {
			close(waiting)
			defer s.Wait(context.Background(), time.Hour, func() { t.Error("the drain bound passed") })()
			<-release
			drained = true
			return errors.New("from serve")
		})
	}()
	<-waiting
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) || err.Error() != "test: close: context canceled" {
		t.Errorf("Close with an ended context while Run drains = %v", err)
	}
	close(release)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !drained {
		t.Error("Close returned before Run drained")
	}
	if err := <-ran; err == nil || err.Error() != "from serve" {
		t.Errorf("Run = %v, want serve's error", err)
	}
}

// Wait also returns when the context of Run ends, and past the drain bound
// it ends the work.
func TestServingWaitEndsWithTheContext(t *testing.T) {
	s := NewServing("test", errClosed, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Run(func() error {
		work, cancelWork := context.WithCancel(context.Background())
		defer cancelWork()
		stop := s.Wait(ctx, time.Millisecond, cancelWork)
		<-work.Done() // the drain bound cancels the work
		if stop() {
			t.Error("the drain timer had not fired")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
