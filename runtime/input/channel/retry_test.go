package channel

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// refusingOutbox answers outbox.ErrFull to the first refuse calls of
// AppendKeyed, then passes them on, and records when each call came.
type refusingOutbox struct {
	input.Outbox
	mu     sync.Mutex
	refuse int
	calls  []time.Time
}

func (r *refusingOutbox) AppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) error {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	refuse := len(r.calls) <= r.refuse
	r.mu.Unlock()
	if refuse {
		return fmt.Errorf("test outbox: %w", outbox.ErrFull)
	}
	return r.Outbox.AppendKeyed(ctx, events, taken, tally)
}

// TestRefusedBatchRetried: a batch the outbox refuses is held and tried
// again, RetryMin doubling to RetryMax between the attempts, until it is
// taken; only then is the message answered Committed, once.
func TestRefusedBatchRetried(t *testing.T) {
	const (
		refuse   = 4
		retryMin = 20 * time.Millisecond
		retryMax = 50 * time.Millisecond
	)
	h := newHarness(t, Options{RetryMin: retryMin, RetryMax: retryMax})
	box := &refusingOutbox{refuse: refuse}
	h.wrap = func(o input.Outbox) input.Outbox { box.Outbox = o; return box }
	h.start()
	settled := make(chan client.Settlement, 2)
	c := h.client(client.Options{OnSettled: func(s client.Settlement) { settled <- s }})
	ctx := testCtx(t)
	if _, err := c.PublishWait(ctx, client.Message{Tag: "usage.license", Type: client.JSON, Data: usage("r-1")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(settled) != 1 {
		t.Fatalf("%d settlements, want 1", len(settled))
	}
	if s := <-settled; s.Status != wire.Committed {
		t.Fatalf("settled %v %s, want Committed", s.Status, s.Reason)
	}
	if got := h.counter("outbox_retries_total"); got != refuse {
		t.Fatalf("outbox_retries_total %v, want %d", got, refuse)
	}
	if n := len(h.events()); n != 1 {
		t.Fatalf("outbox holds %d events, want 1", n)
	}
	box.mu.Lock()
	defer box.mu.Unlock()
	if len(box.calls) != refuse+1 {
		t.Fatalf("%d attempts, want %d", len(box.calls), refuse+1)
	}
	// The waits: 20, 40, then 50 ms (the cap) twice. A wait is never
	// shorter than its step (no jitter); a loaded machine may make it longer.
	want := []time.Duration{retryMin, 2 * retryMin, retryMax, retryMax}
	for i, w := range want {
		if gap := box.calls[i+1].Sub(box.calls[i]); gap < w {
			t.Errorf("wait %d was %v, want at least %v", i+1, gap, w)
		}
	}
}
