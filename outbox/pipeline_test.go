package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// Appends begun one after the other without waiting settle in the order
// they were begun, each only once it and every earlier one is durable, and
// the drain reads them in that order.
func TestPipelinedAppendsSettleInOrder(t *testing.T) {
	o := open(t, t.TempDir())
	defer o.Close()
	ctx := context.Background()
	taken := time.Now()
	var ps []*outbox.Pending
	n := 0
	for i := range 40 {
		size := 1 + i%7
		ps = append(ps, o.BeginAppendCounted(ctx, canonical(n, size, taken), taken, tally(taken, size, 0)))
		n += size
	}
	for i, p := range ps {
		if err := p.Err(); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		for j := range ps[:i] {
			select {
			case <-ps[j].Done():
			default:
				t.Fatalf("append %d settled before append %d", i, j)
			}
		}
	}
	if o.Depth() != int64(n) {
		t.Fatalf("depth %d, want %d", o.Depth(), n)
	}
	i := 0
	if err := drainAll(o, func(seq uint64, ev []byte) {
		if want := fmt.Sprintf(`{"event_id":"ev-%08d"`, i); string(ev[:len(want)]) != want {
			t.Fatalf("event %d (seq %d) is %.30s", i, seq, ev)
		}
		i++
	}); err != nil {
		t.Fatal(err)
	}
	if i != n {
		t.Fatalf("read %d events, want %d", i, n)
	}
	if c := totals(readLedger(t, o)); c.Events != int64(n) || c.Committed != int64(n) {
		t.Fatalf("ledger: %d events, %d committed; want %d", c.Events, c.Committed, n)
	}
}

// When the store fails an append, that append and every later one still in
// flight fail, even one that reached the disk; the drain never sees past
// the failure. The next append withdraws what followed it, so the store has
// no hole: its sequences follow the last durable append's, the ledger counts
// only what was answered nil, and a reopen finds no damage.
func TestPipelinedFailureFailsEveryLaterAppend(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	ctx := context.Background()
	taken := time.Now()
	var failFirst uint64 // the first sequence of the append whose answer fails
	var mu sync.Mutex
	third := make(chan struct{}) // the failing answer waits until the third append is in flight
	outbox.SetCommitAnswer(o, func(first, last uint64, err error) error {
		mu.Lock()
		fail := first == failFirst
		mu.Unlock()
		if !fail {
			return err
		}
		<-third
		return errors.New("injected write failure")
	})
	p1 := o.BeginAppendCounted(ctx, canonical(0, 5, taken), taken, tally(taken, 5, 0))
	if err := p1.Err(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	failFirst = 6
	mu.Unlock()
	p2 := o.BeginAppendCounted(ctx, canonical(5, 4, taken), taken, tally(taken, 4, 0))
	p3 := o.BeginAppendCounted(ctx, canonical(9, 3, taken), taken, tally(taken, 3, 0))
	p4 := o.BeginAppendCounted(ctx, nil, taken, tally(taken, 0, 2)) // counts alone
	close(third)
	for i, p := range []*outbox.Pending{p2, p3, p4} {
		if err := p.Err(); !errors.Is(err, outbox.ErrRefused) {
			t.Fatalf("append %d after the failure: %v, want ErrRefused", i+2, err)
		}
	}
	if o.Healthy() == nil {
		t.Fatal("healthy after a failed append")
	}
	if o.Depth() != 5 {
		t.Fatalf("depth %d after the failure, want 5", o.Depth())
	}
	f, l, evs, err := o.Peek(ctx, 100)
	if err != nil || f != 1 || l != 5 || len(evs) != 5 {
		t.Fatalf("peek after the failure: %d..%d, %d events, %v; want 1..5", f, l, len(evs), err)
	}

	mu.Lock()
	failFirst = 0
	mu.Unlock()
	// The next append repairs first and takes the sequences after 5.
	if err := o.AppendCounted(ctx, canonical(12, 2, taken), taken, tally(taken, 2, 0)); err != nil {
		t.Fatal(err)
	}
	if o.Healthy() != nil {
		t.Fatalf("not healthy after a successful append: %v", o.Healthy())
	}
	f, l, evs, err = o.Peek(ctx, 100)
	if err != nil || f != 1 || l != 7 || len(evs) != 7 || indexOf(evs[5]) != 12 {
		t.Fatalf("peek after the repair: %d..%d, %d events, %v; want 1..7 ending with ev 12, 13", f, l, len(evs), err)
	}
	if c := totals(readLedger(t, o)); c.Events != 7 || c.Committed != 7 || c.Consumed != 7 {
		t.Fatalf("ledger: %+v; want 7 events committed and consumed", c)
	}
	o = reopen(t, o, dir)
	if o.Depth() != 7 {
		t.Fatalf("depth %d after reopening, want 7", o.Depth())
	}
	appendThenPeek(t, o, canonical(14, 1, taken), 1, 8)
}

// A failure that no append follows is withdrawn by Close: the store opens
// again without damage.
func TestPipelinedFailureWithdrawnAtClose(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	ctx := context.Background()
	hold := make(chan struct{})
	outbox.SetCommitAnswer(o, func(first, last uint64, err error) error {
		if first == 4 {
			<-hold
			return errors.New("injected write failure")
		}
		return err
	})
	if err := o.Append(ctx, events(0, 3, 100)); err != nil {
		t.Fatal(err)
	}
	p2 := o.BeginAppendCounted(ctx, events(3, 3, 100), time.Time{}, nil)
	p3 := o.BeginAppendCounted(ctx, events(6, 3, 100), time.Time{}, nil) // reaches the disk, answered failed
	close(hold)
	if !errors.Is(p2.Err(), outbox.ErrRefused) || !errors.Is(p3.Err(), outbox.ErrRefused) {
		t.Fatalf("answers %v, %v; want ErrRefused", p2.Err(), p3.Err())
	}
	o = reopen(t, o, dir)
	if o.Depth() != 3 {
		t.Fatalf("depth %d after reopening, want 3", o.Depth())
	}
	appendThenPeek(t, o, events(9, 1, 100), 1, 4)
}

// Events handed to the store and not yet settled count against the bound.
func TestPipelinedBoundCountsWhatIsInFlight(t *testing.T) {
	o := open(t, t.TempDir(), func(opts *outbox.Options) { opts.MaxEvents = 10 })
	defer o.Close()
	ctx := context.Background()
	hold := make(chan struct{})
	outbox.SetCommitAnswer(o, func(first, last uint64, err error) error {
		<-hold
		return err
	})
	p1 := o.BeginAppendCounted(ctx, events(0, 8, 100), time.Time{}, nil)
	p2 := o.BeginAppendCounted(ctx, events(8, 3, 100), time.Time{}, nil)
	if err := p2.Err(); !errors.Is(err, outbox.ErrFull) {
		t.Fatalf("second append: %v, want ErrFull while the first is in flight", err)
	}
	close(hold)
	if err := p1.Err(); err != nil {
		t.Fatal(err)
	}
	if o.Depth() != 8 {
		t.Fatalf("depth %d, want 8", o.Depth())
	}
}
