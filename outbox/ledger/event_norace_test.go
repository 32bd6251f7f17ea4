//go:build !race

package ledger_test

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// An allocation count: the race detector's instrumentation allocates where
// the code does not, so this runs without it (make test-go).
//
// The ledger reads every event it counts on the commit path; the members
// that key its rows repeat, so a warm Reader allocates only the timestamp.
func TestReaderAllocatesOnlyTheTimestamp(t *testing.T) {
	var r ledger.Reader
	ev := []byte(readCases[0].ev)
	r.Read(ev)
	if n := testing.AllocsPerRun(200, func() { r.Read(ev) }); n > 1 {
		t.Fatalf("Read allocates %.0f objects per event, want at most 1 (the timestamp)", n)
	}
}
