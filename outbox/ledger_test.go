package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// canonical returns n canonical events ev-<from>..: of two projects, with a
// timestamp in the hour of ts.
func canonical(from, n int, ts time.Time) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		k := from + i
		out[i] = fmt.Appendf(nil, `{"event_id":"ev-%08d","timestamp":%q,"event_type":"compute.instance.exists","resource_type":"instance","project_id":"p%d","source":{"exchange":"nova"}}`,
			k, ts.UTC().Format(time.RFC3339Nano), k%2)
	}
	return out
}

// tally counts n notifications of nova/compute.instance.exists as consumed
// and committed, plus skipped ones.
func tally(taken time.Time, committed, skipped int) *ledger.Delta {
	d := &ledger.Delta{}
	r := d.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"})
	r.Consumed = int64(committed + skipped)
	r.Committed = int64(committed)
	if skipped > 0 {
		r.Skipped = map[string]int64{"unclaimed": int64(skipped)}
	}
	return d
}

func readLedger(t *testing.T, o *outbox.Outbox) *ledger.Report {
	t.Helper()
	rep, err := ledger.NewReport(testkit.WholeLedger(t, o), time.Time{}, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func totals(rep *ledger.Report) ledger.Counts {
	var c ledger.Counts
	for _, r := range rep.Intake {
		c.Add(&r.Counts)
	}
	return c
}

// The ledger counts what each counted write carries in its own transaction:
// consumed with its outcome, events committed, delivered, refused and
// pending, and the stored rows per hour of timestamp; it survives a reopen
// and the fold into hourly sums.
func TestLedgerCountsWithTheWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	taken := time.Now()
	ts := time.Now().UTC().Truncate(time.Hour).Add(-2*time.Hour + 17*time.Minute)
	if err := o.AppendCounted(ctx, canonical(0, 10, ts), taken, tally(taken, 10, 0)); err != nil {
		t.Fatal(err)
	}
	if err := o.AppendCounted(ctx, nil, taken, tally(taken, 0, 3)); err != nil { // skipped only
		t.Fatal(err)
	}
	dead := &ledger.Delta{}
	r := dead.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"})
	r.Consumed, r.DeadLettered = 2, map[string]int64{"trap": 2}
	if err := o.AppendDeadLettersCounted(ctx, []outbox.DeadLetter{{Body: []byte(`{}`), Reason: "trap"}, {Body: []byte(`{}`), Reason: "trap"}}, dead); err != nil {
		t.Fatal(err)
	}
	first, _, evs, err := o.Peek(ctx, 4)
	if err != nil || len(evs) != 4 {
		t.Fatalf("peek: %v %d", err, len(evs))
	}
	if err := o.Delivered(ctx, first, first+3, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.SetAside(ctx, first+4, outbox.ReasonRefusedByAPI, "HTTP 422"); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		rep := readLedger(t, o)
		c := totals(rep)
		if c.Consumed != 15 || c.Committed != 10 || c.SkippedTotal() != 3 || c.DeadTotal() != 2 || c.Events != 10 ||
			c.Delivered != 4 || c.Refused != 1 || c.Pending != 5 {
			t.Fatalf("%s: totals %+v", when, c)
		}
		if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Detail, "5 events still in the outbox") {
			t.Fatalf("%s: problems %+v", when, rep.Problems)
		}
		if len(rep.Stored) != 2 || rep.Stored[0].Hour != ts.Truncate(time.Hour) || rep.Stored[0].Delivered+rep.Stored[1].Delivered != 4 {
			t.Fatalf("%s: stored rows %+v", when, rep.Stored)
		}
		for _, row := range rep.Intake {
			if !row.Balanced {
				t.Fatalf("%s: row %+v does not balance", when, row)
			}
		}
	}
	check("open")
	o = reopen(t, o, dir) // folds the deltas into hourly sums
	check("reopened")
}

// The duplicates the API answers are told apart: a copy (an event delivered
// before under the same identity, also across a restart) is subtracted from
// what the API must hold; a resend (the first events of a batch sent again
// after a crash between a 200 and the deletion) is not, being delivered
// once as far as the ledger counts. Both are duplicates in the intake rows.
func TestLedgerAttributesDuplicates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	early := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	late := early.Add(2 * time.Hour)
	stored := func() map[time.Time]ledger.StoredCounts {
		m := map[time.Time]ledger.StoredCounts{}
		for _, r := range readLedger(t, o).Stored {
			c := m[r.Hour]
			c.Delivered += r.Delivered
			c.Copies += r.Copies
			m[r.Hour] = c
		}
		return m
	}
	deliver := func(n, dups int) {
		t.Helper()
		first, last, evs, err := o.Peek(ctx, n)
		if err != nil || len(evs) != n {
			t.Fatalf("peek %d: %v %d", n, err, len(evs))
		}
		if err := o.Delivered(ctx, first, last, dups); err != nil {
			t.Fatal(err)
		}
	}
	// ev-0..3 early; delivered, no duplicates.
	if err := o.Append(ctx, canonical(0, 4, early)); err != nil {
		t.Fatal(err)
	}
	deliver(4, 0)
	// ev-1 again (a redelivered notification), across a restart, in a
	// batch of late events: the API answers 1 duplicate, which is ev-1's.
	o = reopen(t, o, dir)
	if err := o.Append(ctx, append(canonical(10, 2, late), canonical(1, 1, early)...)); err != nil {
		t.Fatal(err)
	}
	deliver(3, 1)
	got := stored()
	if got[early] != (ledger.StoredCounts{Delivered: 5, Copies: 1}) || got[late] != (ledger.StoredCounts{Delivered: 2}) {
		t.Fatalf("after a known duplicate: %+v", got)
	}
	// Crash between the 200 and the deletion: the batch of 2 late events
	// is sent again with 2 new early ones behind it; the API answers 2
	// duplicates, the first two.
	if err := o.Append(ctx, append(canonical(20, 2, late), canonical(30, 2, early)...)); err != nil {
		t.Fatal(err)
	}
	deliver(4, 2)
	got = stored()
	if got[early] != (ledger.StoredCounts{Delivered: 7, Copies: 1}) || got[late] != (ledger.StoredCounts{Delivered: 4}) {
		t.Fatalf("after a resent batch: %+v", got)
	}
	if c := totals(readLedger(t, o)); c.Delivered != 11 || c.Duplicates != 3 {
		t.Fatalf("intake: %d delivered, %d duplicates; want 11 and 3", c.Delivered, c.Duplicates)
	}
	o.Close()
}

// Counts written longer ago than the retention are dropped when the ledger
// is folded; younger ones stay, whatever hour they name.
func TestLedgerRetention(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1, LedgerRetention: 48 * time.Hour}
	reopen := func(o *outbox.Outbox, at time.Time) *outbox.Outbox {
		t.Helper()
		if o != nil {
			o.Close()
		}
		restore := outbox.SetLedgerClock(func() time.Time { return at })
		defer restore()
		o, err := outbox.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	now := time.Now()
	old := now.Add(-72 * time.Hour)
	o := reopen(nil, old)
	if err := o.AppendCounted(ctx, nil, old, tally(old, 0, 1)); err != nil {
		t.Fatal(err)
	}
	o = reopen(o, old) // folded 72 hours ago
	// Written now, about an hour long past: kept.
	if err := o.AppendCounted(ctx, nil, old, tally(old, 0, 2)); err != nil {
		t.Fatal(err)
	}
	if c := totals(readLedger(t, o)); c.Consumed != 3 {
		t.Fatalf("before the retention passed: %d consumed", c.Consumed)
	}
	o = reopen(o, now)
	defer o.Close()
	rep := readLedger(t, o)
	if c := totals(rep); c.Consumed != 2 || len(rep.Intake) != 1 {
		t.Fatalf("after the fold: %+v", rep.Intake)
	}
}

const envLedgerKillDir = "TALLY_OSC_OUTBOX_LEDGER_KILL9_DIR"

// ledgerKillChild commits counted batches (events, dead letters, skips) and
// drains, until it is killed; it reports what returned nil.
func ledgerKillChild(dir string) {
	ctx := context.Background()
	o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		fmt.Printf("L9 error %v\n", err)
		os.Exit(2)
	}
	go func() {
		for i := 0; ; i++ {
			f, l, evs, err := o.Peek(ctx, 50)
			if err != nil || len(evs) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			if i%7 == 3 {
				_ = o.SetAside(ctx, f, outbox.ReasonRefusedByAPI, "HTTP 422")
				continue
			}
			_ = o.Delivered(ctx, f, l, 0)
		}
	}()
	start, _ := strconv.Atoi(os.Getenv(envKillStart))
	for n := start; ; n++ {
		taken := time.Now()
		size := 1 + n%37
		t := tally(taken, size, n%3)
		if err := o.AppendCounted(ctx, canonical(n*100, size, taken), taken, t); err != nil {
			fmt.Printf("L9 error %v\n", err)
			os.Exit(2)
		}
		dead := &ledger.Delta{}
		r := dead.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"})
		r.Consumed, r.DeadLettered = 1, map[string]int64{"trap": 1}
		if err := o.AppendDeadLettersCounted(ctx, []outbox.DeadLetter{{Body: []byte(`{}`), Reason: "trap"}}, dead); err != nil {
			fmt.Printf("L9 error %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("L9 committed %d\n", n)
	}
}

// A process killed with SIGKILL in the middle of its commits leaves a
// ledger that balances: every notification counted is settled once, every
// event counted is delivered, refused or still in the outbox, and nothing
// that returned nil is missing from it.
func TestLedgerBalancesAfterKill9MidCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	next := 0
	for round := range 4 {
		cmd := child(envLedgerKillDir+"="+dir, envKillStart+"="+strconv.Itoa(next))
		sc := bufio.NewScanner(startChild(t, cmd))
		committed, killAt := -1, next+40+round*30
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 || f[0] != "L9" {
				continue
			}
			if f[1] == "error" {
				cmd.Process.Kill()
				t.Fatalf("child: %s", sc.Text())
			}
			committed, _ = strconv.Atoi(f[2])
			if committed >= killAt {
				cmd.Process.Signal(syscall.SIGKILL)
				break
			}
		}
		wantKilled(t, cmd)
		next = committed + 1000 // event ids of the next run stay apart

		o := open(t, dir)
		rep := readLedger(t, o)
		c := totals(rep)
		for _, p := range rep.Problems {
			if strings.Contains(p.Detail, "does not balance") {
				t.Fatalf("round %d: %s", round, p.Detail)
			}
		}
		if c.Consumed != c.Settled() || c.Events != c.Accounted() || c.Pending != o.Depth() {
			t.Fatalf("round %d: totals %+v, depth %d", round, c, o.Depth())
		}
		if c.DeadTotal() != o.DeadLetterCount()-c.Refused {
			t.Fatalf("round %d: %d dead-lettered in the ledger, %d dead letters held (%d refused events)", round, c.DeadTotal(), o.DeadLetterCount(), c.Refused)
		}
		t.Logf("round %d: killed after batch %d; consumed %d, events %d, delivered %d, refused %d, pending %d",
			round, committed, c.Consumed, c.Events, c.Delivered, c.Refused, c.Pending)
		o.Close()
	}
}
