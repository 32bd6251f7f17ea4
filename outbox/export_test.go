package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SetLedgerClock makes the ledger's fold read the time from now until the
// returned function restores the clock.
func SetLedgerClock(now func() time.Time) (restore func()) {
	prev := ledgerNow
	ledgerNow = now
	return func() { ledgerNow = prev }
}

// OpenOutboxes is the number of outboxes of this process holding the
// tightened umask (open, not yet closed).
func OpenOutboxes() int {
	umask.Lock()
	defer umask.Unlock()
	return umask.users
}

// SetCommitAnswer makes f see, and possibly replace, the store's answer for
// each transaction of an append (its sequences first..last; last < first
// for counts alone), on the store's callback goroutine. Set it before the
// first append.
func SetCommitAnswer(o *Outbox, f func(first, last uint64, err error) error) {
	o.commitAnswer = f
}

// FoldedCounter is the counter of the ledger rows folded into (other), of
// table "intake" or "stored".
func FoldedCounter(o *Outbox, table string) prometheus.Counter {
	return o.ledgerFolded.WithLabelValues(table)
}
