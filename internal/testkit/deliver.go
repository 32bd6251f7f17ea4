package testkit

import (
	"context"
	"testing"
)

// Peeker is a store that hands out its events in order, as the outbox does.
type Peeker interface {
	Peek(ctx context.Context, max int) (first, last uint64, events [][]byte, err error)
}

// Deliverer is a Peeker that is told when its events are delivered, as the
// outbox is.
type Deliverer interface {
	Peeker
	Delivered(ctx context.Context, first, last uint64, duplicates int) error
}

// DeliverAll marks every event of s delivered, up to max at a time, each
// range with duplicates as the API's count of duplicates (-1 when it gave
// none), until s hands out no more. An error fails the test.
func DeliverAll(tb testing.TB, s Deliverer, max, duplicates int) {
	tb.Helper()
	EachRange(tb, s, max, func(ctx context.Context, first, last uint64) error {
		return s.Delivered(ctx, first, last, duplicates)
	})
}

// EachRange hands done every range of up to max events s hands out, until it
// hands out no more; done must take the range out of s (mark it delivered,
// delete it). An error fails the test.
func EachRange(tb testing.TB, s Peeker, max int, done func(ctx context.Context, first, last uint64) error) {
	tb.Helper()
	ctx := context.Background()
	for {
		first, last, evs, err := s.Peek(ctx, max)
		if err != nil {
			tb.Fatal(err)
		}
		if len(evs) == 0 {
			return
		}
		if err := done(ctx, first, last); err != nil {
			tb.Fatal(err)
		}
	}
}
