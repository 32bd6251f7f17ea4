package outbox

import "time"

// SetLedgerClock makes the ledger's fold read the time from now until the
// returned function restores the clock.
func SetLedgerClock(now func() time.Time) (restore func()) {
	prev := ledgerNow
	ledgerNow = now
	return func() { ledgerNow = prev }
}
