package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// stop cancels Run's context and returns once Run has returned; a second
// stop returns at once.
func TestBackgroundStops(t *testing.T) {
	returned := false
	stop := Background(t, time.Minute, func(ctx context.Context) error {
		<-ctx.Done()
		returned = true
		return nil
	})
	stop()
	if !returned {
		t.Fatal("stop returned before Run")
	}
	stop()
}

// errorsTB records what a helper reports instead of failing the test, and
// drops the cleanups it is given.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Helper() {}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func (e *errorsTB) Cleanup(func()) {}

// A Run that does not return within the limit fails the test.
func TestBackgroundReportsARunThatHangs(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	tb := &errorsTB{TB: t}
	stop := Background(tb, time.Millisecond, func(context.Context) error {
		<-release
		return nil
	})
	stop()
	if len(tb.errs) != 1 || tb.errs[0] != "Run did not return within 1ms of its context's end" {
		t.Errorf("failures %q", tb.errs)
	}
}
