package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// The counts of a commit count in the store's transaction like its events:
// a batch of incompressible events, each of a distinct event type whose
// name escapes to twice its length, is committed (in as many transactions
// as it takes) rather than refused.
func TestLedgerCountsFitTheTransaction(t *testing.T) {
	ctx := context.Background()
	o := open(t, t.TempDir())
	defer o.Close()
	taken := time.Now()
	ts := taken.UTC().Add(-time.Minute)
	rnd := rand.New(rand.NewPCG(1, 2))
	var events [][]byte
	tally := &ledger.Delta{}
	for i := range 4000 {
		typ := strings.Repeat(`"`, ledger.MaxNameBytes-5) + fmt.Sprintf("%05d", i)
		pad := make([]byte, 600)
		for j := range pad {
			pad[j] = "abcdefghijklmnopqrstuvwxyz0123456789"[rnd.IntN(36)]
		}
		ev := fmt.Appendf(nil, `{"event_id":"ev-%d","timestamp":%q,"event_type":%q,"resource_type":"instance","project_id":"p","source":{"exchange":"nova"},"attributes":{"pad":%q}}`,
			i, ts.Format(time.RFC3339Nano), typ, pad)
		events = append(events, ev)
		tally.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: typ}).Commit()
	}
	if err := o.AppendCounted(ctx, events, taken, tally); err != nil {
		t.Fatalf("the commit was refused: %.300v", err)
	}
	drain(t, o, 500)
	rep := readLedger(t, o)
	checkBalanced(t, "delivered", rep)
	if c := totals(rep); c.Consumed != 4000 || c.Delivered != 4000 {
		t.Fatalf("totals %+v", c)
	}
}
