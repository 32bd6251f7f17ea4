package testkit

import (
	"context"
	"testing"
)

// Deliverer is a store that hands out its events in order and is told when
// they are delivered, as the outbox is.
type Deliverer interface {
	Peek(ctx context.Context, max int) (first, last uint64, events [][]byte, err error)
	Delivered(ctx context.Context, first, last uint64, duplicates int) error
}

// DeliverAll marks every event of s delivered, up to max at a time, each
// range with duplicates as the API's count of duplicates (-1 when it gave
// none), until s hands out no more. An error fails the test.
func DeliverAll(tb testing.TB, s Deliverer, max, duplicates int) {
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
		if err := s.Delivered(ctx, first, last, duplicates); err != nil {
			tb.Fatal(err)
		}
	}
}
