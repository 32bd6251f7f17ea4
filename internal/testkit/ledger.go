package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// Ledgerer is a store that keeps the completeness ledger, as the outbox
// does.
type Ledgerer interface {
	Ledger(ctx context.Context, from, to time.Time) (*ledger.Delta, error)
}

// WholeLedger answers every row s's ledger holds, of every hour. An error
// fails the test.
func WholeLedger(tb testing.TB, s Ledgerer) *ledger.Delta {
	tb.Helper()
	d, err := s.Ledger(context.Background(), time.Time{}, time.Time{})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}
