package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// The outbox is what the sender drains.
var _ sender.Store = (*outbox.Outbox)(nil)

func open(t testing.TB, dir string, mod ...func(*outbox.Options)) *outbox.Outbox {
	t.Helper()
	opts := outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1}
	for _, m := range mod {
		m(&opts)
	}
	o, err := outbox.Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return o
}

// reopen closes o, failing the test on an error, and opens dir again; the
// outbox it answers is closed when the test ends.
func reopen(t testing.TB, o *outbox.Outbox, dir string) *outbox.Outbox {
	t.Helper()
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o = open(t, dir)
	t.Cleanup(func() { o.Close() })
	return o
}

// appendThenPeek appends evs and fails the test unless the undelivered
// events are then first..last: the sequences go on where they were.
func appendThenPeek(t testing.TB, o *outbox.Outbox, evs [][]byte, first, last uint64) {
	t.Helper()
	ctx := context.Background()
	if err := o.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	// One more than expected, so that an event past last shows.
	if f, l, _, err := o.Peek(ctx, int(last-first)+2); err != nil || f != first || l != last {
		t.Fatalf("after appending %d events the undelivered ones are %d..%d (%v), want %d..%d", len(evs), f, l, err, first, last)
	}
}

// deleteAll deletes the outbox's events, up to max at a time, until it is
// empty, failing the test on an error.
func deleteAll(t testing.TB, o *outbox.Outbox, max int) {
	t.Helper()
	testkit.EachRange(t, o, max, o.Delete)
}

// events makes n events of about size bytes, the same for the same from+i.
// The padding is pseudo-random over 64 characters, so that the outbox's
// compression leaves the disk measurements meaningful (about 1.3:1).
func events(from, n, size int) [][]byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := make([][]byte, n)
	for i := range out {
		e := fmt.Sprintf(`{"event_id":"ev-%08d","pad":"`, from+i)
		pad := make([]byte, max(0, size-len(e)-2))
		r := rand.New(rand.NewPCG(uint64(from+i), 7))
		for j := range pad {
			pad[j] = alphabet[r.IntN(len(alphabet))]
		}
		out[i] = []byte(e + string(pad) + `"}`)
	}
	return out
}

func TestAppendPeekDeleteInOrderAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	if err := o.Append(ctx, events(0, 10, 100)); err != nil {
		t.Fatal(err)
	}
	if err := o.Append(ctx, events(10, 5, 100)); err != nil {
		t.Fatal(err)
	}
	if o.Depth() != 15 || o.Bytes() != 1500 {
		t.Fatalf("depth %d bytes %d, want 15 and 1500", o.Depth(), o.Bytes())
	}
	first, last, evs, err := o.Peek(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 || last != 4 || len(evs) != 4 || !bytes.Equal(evs[0], events(0, 1, 100)[0]) {
		t.Fatalf("peek: %d..%d %d events (%q)", first, last, len(evs), evs[0][:20])
	}
	if err := o.Delete(ctx, first, last); err != nil {
		t.Fatal(err)
	}

	o = reopen(t, o, dir)
	if o.Depth() != 11 || o.Bytes() != 1100 {
		t.Fatalf("after reopen depth %d bytes %d, want 11 and 1100", o.Depth(), o.Bytes())
	}
	first, last, evs, err = o.Peek(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if first != 5 || last != 15 || len(evs) != 11 {
		t.Fatalf("peek after reopen: %d..%d %d events", first, last, len(evs))
	}
	for i, e := range evs {
		if want := fmt.Sprintf(`{"event_id":"ev-%08d"`, 4+i); !bytes.HasPrefix(e, []byte(want)) {
			t.Fatalf("event %d = %.30s, want prefix %s", i, e, want)
		}
	}
	if err := o.Delete(ctx, first, last); err != nil {
		t.Fatal(err)
	}
	if f, l, evs, err := o.Peek(ctx, 10); err != nil || f != 0 || l != 0 || evs != nil {
		t.Fatalf("empty peek = %d %d %v %v", f, l, evs, err)
	}
	if o.OldestAge() != 0 {
		t.Fatalf("oldest age of an empty outbox = %v", o.OldestAge())
	}
	// Deleting again is harmless.
	if err := o.Delete(ctx, 1, 15); err != nil {
		t.Fatal(err)
	}
	if o.Depth() != 0 {
		t.Fatalf("depth %d after repeated delete", o.Depth())
	}
	if err := o.Delete(ctx, 5, 4); !errors.Is(err, outbox.ErrInvalidRange) {
		t.Fatalf("inverted range: %v", err)
	}
}

func TestSequenceNeverReusedAfterDrainAndRestart(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	appendThenPeek(t, o, events(0, 3, 50), 1, 3)
	deleteAll(t, o, 10)
	o = reopen(t, o, dir)
	appendThenPeek(t, o, events(3, 1, 50), 4, 4)
}

func TestBoundAnswersErrFullAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := open(t, t.TempDir(), func(op *outbox.Options) { op.MaxEvents = 10; op.Registerer = reg })
	defer o.Close()
	if err := o.Append(ctx, events(0, 8, 10)); err != nil {
		t.Fatal(err)
	}
	err := o.Append(ctx, events(8, 3, 10))
	if !errors.Is(err, outbox.ErrFull) || errors.Is(err, outbox.ErrRefused) {
		t.Fatalf("append past the bound: %v, want ErrFull only", err)
	}
	if o.Depth() != 8 {
		t.Fatalf("depth %d after a refused append", o.Depth())
	}
	if err := o.Append(ctx, events(8, 2, 10)); err != nil {
		t.Fatalf("append up to the bound: %v", err)
	}
	if err := o.Append(ctx, events(10, 1, 10)); !errors.Is(err, outbox.ErrFull) {
		t.Fatalf("append at the bound: %v", err)
	}
	if o.Healthy() != nil {
		t.Fatalf("a full outbox is still healthy: %v", o.Healthy())
	}
	f, l, _, _ := o.Peek(ctx, 5)
	if err := o.Delete(ctx, f, l); err != nil {
		t.Fatal(err)
	}
	if err := o.Append(ctx, events(10, 5, 10)); err != nil {
		t.Fatalf("append after a drain: %v", err)
	}
	if got := testkit.Metric(t, reg, "tally_collector_outbox_depth"); got != 10 {
		t.Fatalf("depth gauge %v", got)
	}
	// A batch larger than the bound still goes into an empty outbox.
	o2 := open(t, t.TempDir(), func(op *outbox.Options) { op.MaxEvents = 2 })
	defer o2.Close()
	if err := o2.Append(ctx, events(0, 5, 10)); err != nil {
		t.Fatalf("oversized batch into an empty outbox: %v", err)
	}
}

func TestSecondOpenIsRefusedWithErrLocked(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	defer o.Close()
	_, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop()})
	if !errors.Is(err, outbox.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another collector") {
		t.Fatalf("message does not name the directory and the cause: %v", err)
	}
}

func TestDeadLetters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir, func(op *outbox.Options) { op.MaxEvents = 1 })
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	var letters []outbox.DeadLetter
	for i := range 5 {
		letters = append(letters, outbox.DeadLetter{Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Exchange: "nova",
			RoutingKey: "notifications.info", EventType: "compute.instance.exists", Module: "nova@1.0.0",
			Reason: "trap", Detail: "unreachable", At: at})
	}
	if err := o.AppendDeadLetters(ctx, letters); err != nil {
		t.Fatal(err)
	}
	if o.Depth() != 0 || o.DeadLetterCount() != 5 {
		t.Fatalf("depth %d dead %d", o.Depth(), o.DeadLetterCount())
	}
	// Dead letters do not count against the event bound.
	if err := o.Append(ctx, events(0, 1, 10)); err != nil {
		t.Fatal(err)
	}
	o = reopen(t, o, dir)
	page, err := o.ListDeadLetters(ctx, 0, 2)
	if err != nil || len(page) != 2 || page[0].Seq != 1 || page[1].Seq != 2 {
		t.Fatalf("first page %+v %v", page, err)
	}
	if page[0].Reason != "trap" || string(page[0].Body) != `{"n":0}` || !page[0].At.Equal(at) || page[0].Module != "nova@1.0.0" {
		t.Fatalf("dead letter round trip: %+v", page[0])
	}
	page, _ = o.ListDeadLetters(ctx, 2, 10)
	if len(page) != 3 || page[2].Seq != 5 {
		t.Fatalf("second page %+v", page)
	}
	d, err := o.GetDeadLetter(ctx, 3)
	if err != nil || string(d.Body) != `{"n":2}` {
		t.Fatalf("get 3: %+v %v", d, err)
	}
	if _, err := o.GetDeadLetter(ctx, 99); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get 99: %v", err)
	}
	n, err := o.DeleteDeadLetters(ctx, 1, 3, 99)
	if err != nil || n != 2 || o.DeadLetterCount() != 3 {
		t.Fatalf("delete: %d %v count %d", n, err, o.DeadLetterCount())
	}
	page, _ = o.ListDeadLetters(ctx, 0, 10)
	if len(page) != 3 || page[0].Seq != 2 || page[1].Seq != 4 {
		t.Fatalf("after delete %+v", page)
	}
	if err := o.AppendDeadLetters(ctx, letters[:1]); err != nil {
		t.Fatal(err)
	}
	page, _ = o.ListDeadLetters(ctx, 5, 10)
	if len(page) != 1 || page[0].Seq != 6 {
		t.Fatalf("dead-letter sequence reused: %+v", page)
	}
}

// SetAside moves the oldest event to the dead-letter area and the cursor past
// it in one transaction: only the head is accepted, a repeat is harmless, and
// both survive a restart.
func TestSetAsideMovesTheHeadToTheDeadLetters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	evs := events(0, 5, 80)
	evs[0] = []byte(`{"event_id":"ev-0","event_type":"volume.create.end","pad":"x"}`)
	if err := o.Append(ctx, evs[:3]); err != nil {
		t.Fatal(err)
	}
	if err := o.Append(ctx, evs[3:]); err != nil {
		t.Fatal(err)
	}
	if err := o.SetAside(ctx, 2, outbox.ReasonRefusedByAPI, "HTTP 400"); !errors.Is(err, outbox.ErrInvalidRange) {
		t.Fatalf("set aside behind the head: %v", err)
	}
	if err := o.SetAside(ctx, 1, outbox.ReasonRefusedByAPI, "HTTP 400: bad"); err != nil {
		t.Fatal(err)
	}
	if err := o.SetAside(ctx, 1, outbox.ReasonRefusedByAPI, "HTTP 400: bad"); err != nil || o.DeadLetterCount() != 1 {
		t.Fatalf("repeat: %v, %d dead letters", err, o.DeadLetterCount())
	}
	// The last event of the first segment: the segment is deleted with it.
	if err := o.Delete(ctx, 2, 2); err != nil {
		t.Fatal(err)
	}
	if err := o.SetAside(ctx, 3, outbox.ReasonRefusedByAPI, "HTTP 422"); err != nil {
		t.Fatal(err)
	}
	o = reopen(t, o, dir)
	if o.Depth() != 2 || o.DeadLetterCount() != 2 {
		t.Fatalf("after restart: depth %d dead letters %d", o.Depth(), o.DeadLetterCount())
	}
	first, _, got, err := o.Peek(ctx, 10)
	if err != nil || first != 4 || len(got) != 2 || !bytes.Equal(got[0], evs[3]) {
		t.Fatalf("peek after set-aside: first %d, %d events, %v", first, len(got), err)
	}
	dls, _ := o.ListDeadLetters(ctx, 0, 10)
	if len(dls) != 2 || !bytes.Equal(dls[0].Body, evs[0]) || dls[0].EventType != "volume.create.end" ||
		dls[0].Reason != outbox.ReasonRefusedByAPI || dls[0].Detail != "HTTP 400: bad" || !bytes.Equal(dls[1].Body, evs[2]) {
		t.Fatalf("dead letters %+v", dls)
	}
}

// Concurrent appenders and one drainer: every event arrives exactly once
// and in append order per appender.
func TestConcurrentAppendAndDrain(t *testing.T) {
	ctx := context.Background()
	o := open(t, t.TempDir())
	defer o.Close()
	const writers, batches, per = 4, 50, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([][]byte, per)
				for i := range evs {
					evs[i] = []byte(fmt.Sprintf(`{"w":%d,"n":%d}`, w, b*per+i))
				}
				if err := o.Append(ctx, evs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[string]bool{}
	next := make([]int, writers)
	var prevLast uint64
	for {
		f, l, evs, err := o.Peek(ctx, 37)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			select {
			case <-done:
				if o.Depth() == 0 {
					goto check
				}
			default:
			}
			continue
		}
		if f != prevLast+1 {
			t.Fatalf("gap: peek starts at %d after %d", f, prevLast)
		}
		prevLast = l
		for _, e := range evs {
			var w, n int
			fmt.Sscanf(string(e), `{"w":%d,"n":%d}`, &w, &n)
			if n != next[w] {
				t.Fatalf("writer %d: got %d, want %d", w, n, next[w])
			}
			next[w]++
			seen[string(e)] = true
		}
		if err := o.Delete(ctx, f, l); err != nil {
			t.Fatal(err)
		}
	}
check:
	if len(seen) != writers*batches*per {
		t.Fatalf("drained %d distinct events, want %d", len(seen), writers*batches*per)
	}
}

func TestDiskReclaimedAfterDrain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir, func(op *outbox.Options) { op.MaxEvents = 40_000 })
	defer o.Close()
	empty := o.DiskBytes()
	for i := 0; i < 40_000; i += 1000 {
		if err := o.Append(ctx, events(i, 1000, 600)); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Append(ctx, events(0, 1, 600)); !errors.Is(err, outbox.ErrFull) {
		t.Fatalf("filled outbox accepted more: %v", err)
	}
	full := o.DiskBytes()
	deleteAll(t, o, 500)
	if full < 14<<20 { // 24 MB of events, compressed about 1.3:1
		t.Fatalf("40k events of 600 bytes took only %d bytes: measurement broken", full)
	}
	// Badger reclaims the space in the background: wait for it.
	var after int64
	testkit.WaitUntil(t, 15*time.Second, "the disk of the drained outbox to be reclaimed (within 2 MiB of the empty one's)", func() (bool, string) {
		after = o.DiskBytes()
		return after < empty+2<<20, fmt.Sprintf("%d KiB after the drain, %d KiB empty", after>>10, empty>>10)
	})
	t.Logf("disk: empty %d KiB, full %d KiB, drained %d KiB", empty>>10, full>>10, after>>10)
	// Still fully usable, and sequences continue.
	appendThenPeek(t, o, events(0, 2, 600), 40_001, 40_002)
}

func TestCorruptedTableGivesClearError(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	for i := 0; i < 3000; i += 1000 {
		if err := o.Append(ctx, events(i, 1000, 600)); err != nil {
			t.Fatal(err)
		}
	}
	o.Close() // flushes the memory table into .sst files
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no table written")
	}
	b, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 4; i < len(b)/4+64; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(ssts[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	o2, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err == nil {
		// Opening may succeed when the damage is in a block the open did
		// not read; reading it must then fail loudly.
		defer o2.Close()
		for {
			f, l, evs, perr := o2.Peek(ctx, 500)
			if perr != nil {
				err = perr
				break
			}
			if len(evs) == 0 {
				t.Fatal("a corrupted table was read without an error")
			}
			o2.Delete(ctx, f, l)
		}
		if o2.Healthy() == nil {
			t.Fatal("outbox still healthy after a read failed")
		}
	}
	if !errors.Is(err, outbox.ErrCorrupt) || !strings.Contains(err.Error(), "docs/outbox.md") {
		t.Fatalf("corruption error %v: want ErrCorrupt pointing at the recovery steps", err)
	}
	t.Logf("error shown: %v", err)
}

func TestClosedAndMetrics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := open(t, t.TempDir(), func(op *outbox.Options) { op.Registerer = reg })
	if err := o.Append(ctx, events(0, 3, 100)); err != nil {
		t.Fatal(err)
	}
	if err := o.AppendDeadLetters(ctx, []outbox.DeadLetter{{Body: []byte("x"), Reason: "trap"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	if got["tally_collector_outbox_depth"] != 3 || got["tally_collector_outbox_bytes"] != 300 || got["tally_collector_deadletters"] != 1 ||
		got["tally_collector_outbox_oldest_age_seconds"] <= 0 || got["tally_collector_outbox_disk_bytes"] <= 0 {
		t.Fatalf("metrics %v", got)
	}
	if o.Healthy() != nil {
		t.Fatal(o.Healthy())
	}
	o.Close()
	for name, err := range map[string]error{
		"append":  o.Append(ctx, events(0, 1, 10)),
		"dead":    o.AppendDeadLetters(ctx, []outbox.DeadLetter{{}}),
		"delete":  o.Delete(ctx, 1, 1),
		"healthy": o.Healthy(),
		"close":   o.Close(),
	} {
		if !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s after close: %v", name, err)
		}
	}
	if _, _, _, err := o.Peek(ctx, 1); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("peek after close: %v", err)
	}
	if _, err := o.ListDeadLetters(ctx, 0, 1); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("list after close: %v", err)
	}
}

// A batch larger than one Badger transaction can hold is split into several
// synced transactions, never refused: a consumer would otherwise requeue it
// forever.
func TestAppendSplitsBatchesPastTheTransactionLimit(t *testing.T) {
	o, err := outbox.Open(outbox.Options{Dir: t.TempDir(), Logger: zerolog.Nop(), MinFreeBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ev := bytes.Repeat([]byte("x"), 400)
	events := make([][]byte, 20000)
	for i := range events {
		events[i] = ev
	}
	if err := o.Append(context.Background(), events); err != nil {
		t.Fatalf("append of %d events: %v", len(events), err)
	}
	big := bytes.Repeat([]byte("y"), 60<<10)
	large := make([][]byte, 100)
	for i := range large {
		large[i] = big
	}
	if err := o.Append(context.Background(), large); err != nil {
		t.Fatalf("append of 100 events of 60 KiB: %v", err)
	}
	if got := o.Depth(); got != 20100 {
		t.Fatalf("depth %d, want 20100", got)
	}
}

// A model check: random appends (small and larger than a segment), random
// peeks and deletes, and reopening, against a plain slice of what must be
// buffered. Depth, bytes, order and content must agree at every step.
func TestSegmentsAgainstModel(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	defer func() { o.Close() }()
	r := rand.New(rand.NewPCG(42, 1))
	var model [][]byte // undelivered, oldest first
	next := 0
	check := func(step int) {
		t.Helper()
		var bytes int64
		for _, e := range model {
			bytes += int64(len(e))
		}
		if o.Depth() != int64(len(model)) || o.Bytes() != bytes {
			t.Fatalf("step %d: depth %d bytes %d, model %d and %d", step, o.Depth(), o.Bytes(), len(model), bytes)
		}
	}
	for step := range 300 {
		switch k := r.IntN(10); {
		case k < 4: // append
			n := 1 + r.IntN(60)
			if r.IntN(20) == 0 {
				n = 1500 + r.IntN(600) // more than one segment
			}
			evs := events(next, n, 50+r.IntN(700))
			next += n
			if err := o.Append(ctx, evs); err != nil {
				t.Fatal(err)
			}
			model = append(model, evs...)
		case k < 9: // peek and deliver
			f, l, evs, err := o.Peek(ctx, 1+r.IntN(700))
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				if len(model) != 0 {
					t.Fatalf("step %d: empty peek with %d buffered", step, len(model))
				}
				continue
			}
			if int(l-f+1) != len(evs) {
				t.Fatalf("step %d: peek %d..%d with %d events", step, f, l, len(evs))
			}
			for i, e := range evs {
				if !bytes.Equal(e, model[i]) {
					t.Fatalf("step %d: event %d (seq %d) differs: %.40s vs %.40s", step, i, f+uint64(i), e, model[i])
				}
			}
			deliver := len(evs)
			if r.IntN(3) == 0 {
				deliver = 1 + r.IntN(len(evs)) // only part of what was peeked
			}
			if err := o.Delete(ctx, f, f+uint64(deliver)-1); err != nil {
				t.Fatal(err)
			}
			model = model[deliver:]
		default: // restart
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
			o = open(t, dir)
		}
		check(step)
	}
}
