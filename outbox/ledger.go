package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// The completeness ledger (package ledger) lives under its own prefix, 'g':
//
//	'g' 'd' + uint64 BE id     a delta: what one transaction added (ledger.Delta
//	                           encoded), written in that transaction
//	'g' 'h' + uint64 BE hour   the sum of the deltas folded in one hour (unix
//	                           seconds); its rows keep their own hours
//	'g' 'r' + uint64 BE seq    the identities (event_id, timestamp hashed, 8
//	                           bytes each) of a delivered batch starting at seq
//
// Deltas are write-once keys, so the transactions that count (appends, dead
// letters, deletions) never read the ledger and never wait for each other.
// A fold adds deltas into the sum of the hour it runs in and deletes them,
// in one transaction per chunk, at Open and in the background every
// foldEveryDeltas deltas; sums written longer than LedgerRetention ago are
// dropped then. Retention goes by when counts were written, not by the hour
// a row names: events delivered today with an old timestamp stay as long as
// any other. A reading sums every hourly key and the deltas not folded yet
// in one view, and keeps the rows of the hours asked for.
//
// Every delta is mapped through the ledger's Cap (ledger.Cap) as it is
// written: an append's counts and a dead letter's may admit new keys, a
// delivery's and a refusal's intake counts only follow the keys their
// events were counted under. The Cap is rebuilt at Open from every stored
// row, and forgets, at each fold, the hours no count was written to within
// the retention (whose counts the fold drops).
const (
	prefixLedger = 'g'
	ledgerDelta  = 'd'
	ledgerHour   = 'h'
	ledgerRecent = 'r'

	// defaultLedgerRetention is how long hours are kept in the ledger.
	defaultLedgerRetention = 90 * 24 * time.Hour

	// foldEveryDeltas deltas trigger a fold; foldChunk deltas are folded per
	// transaction.
	foldEveryDeltas = 2048
	foldChunk       = 512

	// storedAhead is how far past the delivery a timestamp may be and keep
	// its own stored row; storedEarliest (var) is the other end.
	storedAhead = 24 * time.Hour

	// recentIdentities is how many identities of delivered events are
	// remembered, to tell which events of a batch the Reporting API already
	// had (redeliveries come back within a prefetch window or two).
	recentIdentities = 1 << 16
)

// ledgerNow is the clock of the fold (tests move it).
var ledgerNow = time.Now

// storedEarliest is the first hour a stored row keeps as its own, the
// earliest timestamp the host accepts.
var storedEarliest = ledger.HourOf(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))

func ledgerKey(kind byte, n uint64) []byte {
	k := make([]byte, 10)
	k[0], k[1] = prefixLedger, kind
	binary.BigEndian.PutUint64(k[2:], n)
	return k
}

// recentBatch is one 'g' 'r' key held in memory.
type recentBatch struct {
	seq uint64
	ids []uint64
}

// recentSet is the identities of the events delivered last, guarded by
// readMu (written only by advance).
type recentSet struct {
	count   map[uint64]int32
	batches []recentBatch
	total   int
}

func (r *recentSet) add(b recentBatch) {
	if r.count == nil {
		r.count = make(map[uint64]int32)
	}
	for _, id := range b.ids {
		r.count[id]++
	}
	r.batches = append(r.batches, b)
	r.total += len(b.ids)
}

// expiring returns how many of the oldest batches to drop once a batch of
// n more identities is added, so that at most recentIdentities stay (the
// new batch always stays), and their keys.
func (r *recentSet) expiring(n int) (int, [][]byte) {
	var keys [][]byte
	total, k := r.total+n, 0
	for k < len(r.batches) && total-len(r.batches[k].ids) >= recentIdentities {
		total -= len(r.batches[k].ids)
		keys = append(keys, ledgerKey(ledgerRecent, r.batches[k].seq))
		k++
	}
	return k, keys
}

// drop forgets the k oldest batches.
func (r *recentSet) drop(k int) {
	for _, b := range r.batches[:k] {
		for _, id := range b.ids {
			if r.count[id]--; r.count[id] <= 0 {
				delete(r.count, id)
			}
		}
		r.total -= len(b.ids)
	}
	r.batches = r.batches[k:]
}

// capped maps the rows of d through the ledger's Cap (admitIntake: its
// intake counts may admit new keys), and counts and logs what it folded into
// Other rows.
func (o *Outbox) capped(d *ledger.Delta, admitIntake bool) *ledger.Delta {
	d, f := o.rowCap.Apply(d, admitIntake, ledger.HourOf(ledgerNow()))
	if f.Intake+f.Stored == 0 {
		return d
	}
	if o.ledgerFolded != nil {
		o.ledgerFolded.WithLabelValues("intake").Add(float64(f.Intake))
		o.ledgerFolded.WithLabelValues("stored").Add(float64(f.Stored))
	}
	o.dropLog.Warn().Int("intake_rows", f.Intake).Int("stored_rows", f.Stored).Int("max_rows_per_hour", ledger.MaxRowsPerHour).
		Msg("ledger: rows of an hour past its distinct keys are counted under (other)")
	return d
}

// putDelta writes d as a new delta in txn, its rows mapped through the Cap
// (admitting keys). Called with writeMu held shared.
func (o *Outbox) putDelta(txn *badger.Txn, d *ledger.Delta) error {
	d = o.capped(d, true)
	if d.Empty() {
		return nil
	}
	v, err := d.Encode()
	if err != nil {
		return fmt.Errorf("outbox: encode ledger: %w", err)
	}
	return txn.Set(ledgerKey(ledgerDelta, o.ledgerSeq.Add(1)), v)
}

// deltaCommitted notes a committed delta and starts a fold every
// foldEveryDeltas.
func (o *Outbox) deltaCommitted() {
	if o.sinceFold.Add(1)%foldEveryDeltas == 0 {
		select {
		case o.foldCh <- struct{}{}:
		default:
		}
	}
}

// AppendCounted is Append with the ledger: events are counted under the
// hour of taken (when the collector took the notifications they come from;
// zero: now), which is also their append time, and tally is added in the
// transaction that commits the last of them. With no events, tally alone
// is committed (a batch of notifications that were all skipped).
func (o *Outbox) AppendCounted(ctx context.Context, events [][]byte, taken time.Time, tally *ledger.Delta) error {
	return o.BeginAppendCounted(ctx, events, taken, tally).Err()
}

// AppendKeyed is AppendCounted with each event's ledger keys
// (BeginAppendKeyed).
func (o *Outbox) AppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) error {
	return o.BeginAppendKeyed(ctx, events, taken, tally).Err()
}

// commitTally commits tally on its own, in one synced transaction.
func (o *Outbox) commitTally(ctx context.Context, tally *ledger.Delta) error {
	if tally.Empty() {
		return nil
	}
	if err := o.usable(ctx); err != nil {
		return err
	}
	if err := o.admitWrite(); err != nil {
		return err
	}
	if err := o.update(func(txn *badger.Txn) error { return o.putDelta(txn, tally) }); err != nil {
		return err
	}
	o.deltaCommitted()
	return nil
}

// AppendDeadLettersCounted is AppendDeadLetters with tally added to the
// ledger in the same transaction.
func (o *Outbox) AppendDeadLettersCounted(ctx context.Context, letters []DeadLetter, tally *ledger.Delta) error {
	if len(letters) == 0 {
		return o.commitTally(ctx, tally)
	}
	return o.appendDeadLetters(ctx, letters, tally)
}

// Delivered records the events first..last as delivered (the Reporting API
// answered 200 with duplicates among them, or -1 when unknown), as Delete
// does, and counts them in the ledger in the same transaction: delivered
// under their intake rows and their stored rows.
//
// A duplicate is one of two things. A copy: another event of the outbox
// with the same (event_id, timestamp) was delivered before or is in the
// same range (a notification redelivered by the broker and committed
// twice); the identities of the last 65,536 events delivered are kept to
// recognise it. The API stores a copy once, so copies are counted as
// duplicates in the stored rows too. Or a resend: the same events sent
// again after a crash between a 200 and their deletion, which start the
// range; those were delivered once, as far as the ledger counts. The
// duplicates the API answered beyond the copies are taken to be resends,
// and counted only in the intake rows.
func (o *Outbox) Delivered(ctx context.Context, first, last uint64, duplicates int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if first == 0 || first > last {
		return fmt.Errorf("%w: %d..%d", ErrInvalidRange, first, last)
	}
	if o.closed.Load() {
		return ErrClosed
	}
	o.readMu.Lock()
	defer o.readMu.Unlock()
	if last < o.head.Load() {
		return nil // already delivered
	}
	return o.advance(last+1, nil, &passing{delivered: true, duplicates: duplicates})
}

// passing says how advance counts the events the cursor passes.
type passing struct {
	delivered  bool // else refused (set aside)
	duplicates int  // of the delivered, as the API answered; -1: unknown
}

// passed is an event the cursor passes, with the hour of its segment.
type passed struct {
	hour int64
	ev   ledger.Event
}

// countPassed builds the ledger delta of the events the cursor passed, and
// for a delivery the recent batch to remember. Called with readMu held.
func (o *Outbox) countPassed(p *passing, evs []passed, first uint64) (*ledger.Delta, *recentBatch) {
	d := &ledger.Delta{}
	if !p.delivered {
		for _, e := range evs {
			d.Row(ledger.Key{Hour: e.hour, Source: e.ev.Source, Type: e.ev.Type}).Refused++
		}
		return o.capped(d, false), nil
	}
	copied := make([]bool, len(evs)) // a copy of an event delivered before or earlier in the range
	resent := make([]bool, len(evs)) // sent before, its deletion lost
	seen := make(map[uint64]bool, len(evs))
	budget := p.duplicates
	unknown := budget < 0
	for i, e := range evs {
		if (seen[e.ev.Identity] || o.recent.count[e.ev.Identity] > 0) && (unknown || budget > 0) {
			copied[i] = true
			budget--
		}
		seen[e.ev.Identity] = true
	}
	for i := 0; !unknown && i < len(evs) && budget > 0; i++ {
		if !copied[i] {
			resent[i] = true
			budget--
		}
	}
	b := &recentBatch{seq: first, ids: make([]uint64, 0, len(evs))}
	now := ledgerNow()
	latest := ledger.HourOf(now.Add(storedAhead))
	outOfRange := 0
	for i, e := range evs {
		row := d.Row(ledger.Key{Hour: e.hour, Source: e.ev.Source, Type: e.ev.Type})
		row.Delivered++
		st := e.ev.Stored
		if st.Hour == ledger.NoHour || st.Hour < storedEarliest || st.Hour > latest {
			// Unreadable, or a timestamp no event should carry (the host
			// refuses them): counted, under the hour of the delivery, in
			// the row that says so.
			st = ledger.StoredKey{Hour: ledger.HourOf(now), Project: ledger.Other, ResourceType: ledger.OutOfRange}
			outOfRange++
		}
		s := d.StoredRow(st)
		s.Delivered++
		if copied[i] || resent[i] {
			row.Duplicates++
		}
		if copied[i] {
			s.Copies++
		}
		b.ids = append(b.ids, e.ev.Identity)
	}
	if outOfRange > 0 && o.ledgerFolded != nil {
		o.ledgerFolded.WithLabelValues("stored").Add(float64(outOfRange))
	}
	return o.capped(d, false), b
}

// fold folds the ledger (foldLedger) and logs a failure, unless Close
// caused it: the deltas then stay and are read as they are.
func (o *Outbox) fold() {
	if err := o.foldLedger(); err != nil && !o.closed.Load() {
		o.log.Warn().Err(err).Msg("folding the ledger failed; its deltas stay and are read as they are")
	}
}

// foldLedger adds the deltas into the hourly sums and drops the hours past
// the retention.
func (o *Outbox) foldLedger() error {
	o.foldMu.Lock()
	defer o.foldMu.Unlock()
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	cutoff := ledger.HourOf(ledgerNow().Add(-o.opts.LedgerRetention))
	o.rowCap.Forget(cutoff) // the hours whose counts were all written before the retention
	for {
		n, err := o.foldChunk(cutoff)
		if err != nil {
			return err
		}
		if n < foldChunk {
			break
		}
	}
	// Drop the hours past the retention.
	for {
		var keys [][]byte
		err := o.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixLedger, ledgerHour}})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < foldChunk; it.Next() {
				if int64(binary.BigEndian.Uint64(it.Item().Key()[2:])) >= cutoff {
					break
				}
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		err = o.db.Update(func(txn *badger.Txn) error {
			return deleteKeys(txn, keys)
		})
		if err != nil {
			return err
		}
	}
}

// foldChunk folds up to foldChunk deltas in one transaction and returns how
// many it folded.
func (o *Outbox) foldChunk(cutoff int64) (int, error) {
	txn := o.db.NewTransaction(true)
	defer txn.Discard()
	sum := &ledger.Delta{}
	var keys [][]byte
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: []byte{prefixLedger, ledgerDelta}})
	for it.Rewind(); it.Valid() && len(keys) < foldChunk; it.Next() {
		item := it.Item()
		keys = append(keys, item.KeyCopy(nil))
		if err := item.Value(sum.Decode); err != nil {
			o.log.Warn().Err(err).Uint64("delta", binary.BigEndian.Uint64(item.Key()[2:])).Msg("an unreadable ledger delta is dropped")
		}
	}
	it.Close()
	if len(keys) == 0 {
		return 0, nil
	}
	hour := max(ledger.HourOf(ledgerNow()), cutoff)
	k := ledgerKey(ledgerHour, uint64(hour))
	item, err := txn.Get(k)
	switch {
	case err == nil:
		if err := item.Value(sum.Decode); err != nil {
			return 0, fmt.Errorf("outbox: ledger hour %d: %w", hour, err)
		}
	case !errors.Is(err, badger.ErrKeyNotFound):
		return 0, err
	}
	v, err := sum.Encode()
	if err != nil {
		return 0, err
	}
	if err := txn.Set(k, v); err != nil {
		return 0, err
	}
	if err := deleteKeys(txn, keys); err != nil {
		return 0, err
	}
	if err := txn.Commit(); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// readRows passes every value of the ledger, its hourly sums and the deltas
// not folded yet, to decode. With lenient, a value that cannot be decoded
// is passed over (the fold drops an unreadable delta, and a reading reports
// it).
func readRows(txn *badger.Txn, decode func([]byte) error, lenient bool) error {
	for _, kind := range []byte{ledgerHour, ledgerDelta} {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{prefixLedger, kind}})
		for it.Rewind(); it.Valid(); it.Next() {
			if err := it.Item().Value(decode); err != nil && !(lenient && errors.Is(err, ledger.ErrMalformed)) {
				it.Close()
				return err
			}
		}
		it.Close()
	}
	return nil
}

// loadLedger finds the last delta id and the recent delivered identities,
// and admits the keys of the rows stored in the Cap. Called by Open.
func (o *Outbox) loadLedger() error {
	return o.db.View(func(txn *badger.Txn) error {
		rows := &ledger.Delta{}
		if err := readRows(txn, rows.Decode, true); err != nil {
			return err
		}
		o.rowCap.Learn(rows, ledger.HourOf(ledgerNow()))
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixLedger, ledgerDelta}})
		var last uint64
		for it.Rewind(); it.Valid(); it.Next() {
			last = binary.BigEndian.Uint64(it.Item().Key()[2:])
		}
		it.Close()
		o.ledgerSeq.Store(last)
		it = txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{prefixLedger, ledgerRecent}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			b := recentBatch{seq: binary.BigEndian.Uint64(item.Key()[2:])}
			err := item.Value(func(v []byte) error {
				for p := v; len(p) >= 8; p = p[8:] {
					b.ids = append(b.ids, binary.BigEndian.Uint64(p))
				}
				return nil
			})
			if err != nil {
				return err
			}
			o.recent.add(b)
		}
		return nil
	})
}

// Ledger returns the ledger rows of the hours in [from, to) (zero: no
// bound), with Pending filled in from the events still in the outbox. It
// holds the rows of those hours only (and one stored value at a time): a
// reader that pages through the hours (LedgerHours) holds one page.
func (o *Outbox) Ledger(ctx context.Context, from, to time.Time) (*ledger.Delta, error) {
	all := &ledger.Delta{}
	var r ledger.Reader
	err := o.readLedger(ctx, func(b []byte) error { return all.DecodeWindow(b, from, to) },
		func(hour int64) bool { return inWindow(hour, from, to) },
		func(hour int64, ev []byte) {
			e := r.Read(ev)
			all.Row(o.rowCap.Intake(ledger.Key{Hour: hour, Source: ledger.Name(e.Source), Type: ledger.Name(e.Type)})).Pending++
		})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// LedgerHours returns every hour the ledger has a row for, and the hours of
// the events still in the outbox, in order.
func (o *Outbox) LedgerHours(ctx context.Context) ([]int64, error) {
	hours := map[int64]bool{}
	err := o.readLedger(ctx, func(b []byte) error { return ledger.DecodeHours(b, hours) },
		func(hour int64) bool { hours[hour] = true; return false }, nil)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(hours)), nil
}

func inWindow(hour int64, from, to time.Time) bool {
	return (from.IsZero() || hour >= ledger.HourOf(from)) && (to.IsZero() || hour < to.Unix())
}

// readLedger passes every stored value of the ledger to decode, then, for
// each segment still holding events in the outbox, its hour to segment and,
// when that answers true, each of its undelivered events to pending.
func (o *Outbox) readLedger(ctx context.Context, decode func([]byte) error, segment func(hour int64) bool, pending func(hour int64, ev []byte)) error {
	if err := o.usable(ctx); err != nil {
		return err
	}
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	err := o.db.View(func(txn *badger.Txn) error {
		if err := readRows(txn, decode, false); err != nil {
			return err
		}
		// The events still in the outbox, under the hour of their segment.
		head := o.head.Load()
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
		defer it.Close()
		var lens []int
		for it.Seek(seqKey(prefixEvent, o.headSeg.Load())); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			item := it.Item()
			segFirst := binary.BigEndian.Uint64(item.Key()[1:])
			err := item.Value(func(v []byte) error {
				seg, err := parseSegment(segFirst, v, lens)
				lens = seg.lens
				if err != nil {
					return nil //nolint:nilerr // unreadable: set aside (and counted as damaged) when the sender reaches it
				}
				if seg.last() < head {
					return nil
				}
				hour := ledger.HourOf(time.Unix(0, seg.at))
				if !segment(hour) {
					return nil
				}
				evs, err := seg.events(head, len(seg.lens), nil)
				if err != nil {
					return nil //nolint:nilerr // unreadable: the same, the sender sets it aside
				}
				for _, ev := range evs {
					pending(hour, ev)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: read ledger: %w", err)
	}
	return nil
}
