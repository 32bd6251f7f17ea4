package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// TestCloseBoundedByItsContext: Close waits for a replaced module to finish
// its calls in flight only until its context ends (a stop's deadline), and
// then says why it did not free everything.
func TestCloseBoundedByItsContext(t *testing.T) {
	_, c, _ := catalogOn(t, catalog.Options{}, "echo.wasm", "echo_v1")
	release := c.HoldRetiring()
	defer release()

	const bound = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Close(ctx) }()
	// Far beyond the bound: a Close that waits for the retired module
	// returns only once it is released.
	const margin = 15 * time.Second
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close past its context: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(bound + margin):
		release()
		<-done
		t.Fatalf("Close did not return within %s of a context of %s while a retired module was busy", bound+margin, bound)
	}
}
