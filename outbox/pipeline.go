package outbox

import (
	"context"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// Pending is an append handed to the store and not yet settled. Done is
// closed once it is durable, together with every append begun before it, or
// once it failed; Err then says which.
type Pending struct {
	done chan struct{}
	err  error
}

// Done is closed when the append has settled.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Err waits until the append has settled. It returns nil only when its
// events (and every event appended before them) are synced to disk; the
// errors are Append's.
func (p *Pending) Err() error {
	<-p.done
	return p.err
}

func settledPending(err error) *Pending {
	p := &Pending{done: make(chan struct{}), err: err}
	close(p.done)
	return p
}

// unit is one transaction of the pipeline: one part of an append (or the
// counts of an append without events).
type unit struct {
	first, last uint64   // the sequences of its events; last < first: none
	size        int64    // bytes of its events
	delta       bool     // it writes a ledger delta
	keys        [][]byte // the keys it writes besides metaLastSeq, deleted again by a repair
	pending     *Pending // set on the last unit of an append
	buf         *[]byte  // the append's segment buffer, given back with its last unit
	settled     bool     // Badger answered
	err         error    // Badger's answer
}

func (u *unit) events() int64 {
	if u.last < u.first {
		return 0
	}
	return int64(u.last - u.first + 1)
}

// Append commits events in one synced transaction, in order, after every
// event already appended. It returns nil only once the events are on disk.
// ErrFull: the bound is reached and nothing was written. ErrRefused: the
// write could not be made durable (wrapping the cause). Safe for concurrent
// use; concurrent appends are serialised.
//
// The bound admits a batch while depth+len(events) <= MaxEvents, and any
// batch into an empty outbox, so a batch larger than the bound cannot
// block the caller forever. Events handed to the store and not yet settled
// count against the bound.
func (o *Outbox) Append(ctx context.Context, events [][]byte) error {
	if len(events) == 0 {
		return nil
	}
	return o.beginAppend(ctx, unkeyed(events), time.Time{}, nil).Err()
}

// unkeyed is events without their ledger keys: the ledger reads each.
func unkeyed(events [][]byte) []ledger.Keyed {
	if len(events) == 0 {
		return nil
	}
	out := make([]ledger.Keyed, len(events))
	for i, ev := range events {
		out[i].Bytes = ev
	}
	return out
}

// BeginAppendCounted is AppendCounted without the wait: it sequences the
// events, hands their transaction to the store and returns while the store
// syncs it, so that the caller can prepare (and begin) the next append in
// the meantime. The Pending settles in the order the appends were begun: an
// append is reported durable only after every append begun before it, and
// once one fails, every append begun after it that has not settled fails
// too (see "Pipelined appends" in the package documentation). Errors found
// before the hand-off (ErrFull, ErrRefused for want of space, ErrClosed, the
// context's) come back as an already settled Pending.
func (o *Outbox) BeginAppendCounted(ctx context.Context, events [][]byte, taken time.Time, tally *ledger.Delta) *Pending {
	return o.BeginAppendKeyed(ctx, unkeyed(events), taken, tally)
}

// BeginAppendKeyed is BeginAppendCounted with each event's ledger keys
// (ledger.Keyed): the ledger takes an event's row from its keys when it has
// them, and parses the event when it has not. Either way the rows are the
// same.
func (o *Outbox) BeginAppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) *Pending {
	if len(events) == 0 && tally.Empty() {
		return settledPending(nil)
	}
	return o.beginAppend(ctx, events, taken, tally)
}

// beginAppend sequences events (possibly none, with tally) and hands them
// to the store in one or more units. The ledger counts the events of each
// unit in that unit, and tally in the last.
func (o *Outbox) beginAppend(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) *Pending {
	if err := o.usable(ctx); err != nil {
		return settledPending(err)
	}
	o.appendMu.Lock()
	defer o.appendMu.Unlock()
	if err := o.repair(ctx, false); err != nil {
		return settledPending(err)
	}
	if len(events) > 0 {
		if d := o.depth.Load() + o.pendingEv.Load(); d > 0 && d+int64(len(events)) > o.opts.MaxEvents {
			o.refusedFull.Inc()
			return settledPending(fmt.Errorf("%w: %d events buffered, bound %d", ErrFull, d, o.opts.MaxEvents))
		}
	}
	if err := o.admitWrite(); err != nil {
		return settledPending(err)
	}
	w := o.newAppendWriter(taken)
	if err := w.open(); err != nil {
		o.segPool.Put(w.bufp)
		return settledPending(err)
	}
	for rest := events; len(rest) > 0; {
		n, ok := w.add(rest)
		if !ok {
			return w.p
		}
		rest = rest[n:]
	}
	w.finish(tally)
	return w.p
}

// appendWriter is one append on its way to the store, under appendMu: the
// segments it has encoded, the unit it is filling and the transaction it
// fills it in. An append larger than one of Badger's transactions becomes
// several units, each sent when the next segment would not fit.
type appendWriter struct {
	o    *Outbox
	p    *Pending // settled with the append's last unit
	now  int64    // the write time of its segments, unix ns
	hour int64    // the ledger hour its events are counted in
	// bufp is the segment buffer from segPool: segments are encoded one
	// after the other into segBuf, the transactions hold slices of it until
	// they settle (a growth leaves the earlier ones in the old array), and
	// it returns to the pool with the append's last unit.
	bufp   *[]byte
	segBuf []byte

	txn *badger.Txn // the transaction of u
	u   *unit       // the unit being filled
	// The ledger's counts of a unit are written in its transaction and
	// count against Badger's limits like its segments: ud holds the counts
	// of the unit's events, udBytes bounds their stored size (deltaCost).
	ud      *ledger.Delta
	udBytes int64
	// entries and txnBytes are what the unit's segments take of the
	// transaction's limits (Badger's MaxBatchCount and MaxBatchSize).
	entries, txnBytes  int64
	maxCount, maxBytes int64
}

func (o *Outbox) newAppendWriter(taken time.Time) *appendWriter {
	if taken.IsZero() {
		taken = time.Now()
	}
	bufp, _ := o.segPool.Get().(*[]byte)
	if bufp == nil {
		bufp = new([]byte)
	}
	return &appendWriter{
		o: o, p: &Pending{done: make(chan struct{})},
		now: taken.UnixNano(), hour: ledger.HourOf(taken),
		bufp: bufp, segBuf: (*bufp)[:0],
		ud:       &ledger.Delta{},
		maxCount: o.db.MaxBatchCount(), maxBytes: o.db.MaxBatchSize(),
	}
}

// open starts a new unit: it takes the write lock's shared side, which the
// unit gives back when it settles (settle), so that a reclaim or Close never
// runs under a write still in flight, and a transaction made ahead.
func (w *appendWriter) open() error {
	o := w.o
	if err := o.holdOpen(); err != nil {
		return err
	}
	select {
	case w.txn = <-o.spareTxn:
	case <-o.done:
		o.writeMu.RUnlock()
		return ErrClosed
	}
	w.u = &unit{first: o.lastSeq + 1, last: o.lastSeq}
	w.ud, w.udBytes, w.entries, w.txnBytes = &ledger.Delta{}, 0, 0, 0
	return nil
}

// add cuts the next segment from the front of rest, encodes it and sets it
// in the unit's transaction, sending the unit first (and opening the next)
// when the segment would not fit in it. It returns how many events it took.
// When ok is false the append has failed and p is, or will be, settled with
// the error: the caller stops.
func (w *appendWriter) add(rest []ledger.Keyed) (n int, ok bool) {
	o := w.o
	// Cut the next segment, its counts in sd: at most a quarter of the
	// transaction's bytes for each.
	raw := 0
	sd := &ledger.Delta{}
	var sdBytes int64
	for n < len(rest) && n < segmentMaxEvents && (n == 0 || raw+len(rest[n].Bytes) <= segmentMaxBytes) {
		e := o.appReader.ReadKeyed(rest[n])
		k := ledger.Key{Hour: w.hour, Source: ledger.Name(e.Source), Type: ledger.Name(e.Type)}
		cost := int64(0)
		if sd.Intake[k] == nil {
			cost = rowCost(k)
		}
		if n > 0 && sdBytes+cost > w.maxBytes/4 {
			break
		}
		sd.Row(k).Events++
		sdBytes += cost
		raw += len(rest[n].Bytes)
		n++
	}
	// What the segment's counts add to the unit's.
	add := int64(0)
	for k := range sd.Intake {
		if w.ud.Intake[k] == nil {
			add += rowCost(k)
		}
	}
	start := len(w.segBuf)
	o.segEvents = o.segEvents[:0]
	for _, e := range rest[:n] {
		o.segEvents = append(o.segEvents, e.Bytes)
	}
	w.segBuf, o.scratch = appendSegment(w.segBuf, w.now, o.segEvents, o.scratch)
	clear(o.segEvents)
	val := w.segBuf[start:len(w.segBuf):len(w.segBuf)]
	k := seqKey(prefixEvent, w.u.last+1)
	// Split before Badger's transaction limits (leaving room for the
	// sequence key the unit adds), not only when Set refuses: each part is
	// durable on its own; a caller that sees an error later resends the
	// whole batch, which the Reporting API counts as duplicates.
	entry := int64(len(k) + len(val) + txnEntryOverhead)
	if w.entries > 0 && (w.entries+3 >= w.maxCount || w.txnBytes+entry+w.udBytes+add+txnEntryOverhead*3 >= w.maxBytes) {
		w.send(false, w.ud, nil)
		if err := w.open(); err != nil {
			// The units sent settle on their own; this append failed.
			o.failAfter(w.p, err)
			return n, false
		}
		add = sdBytes
	}
	if err := w.txn.Set(k, val); err != nil {
		w.u.last += uint64(n) // counted as this unit's: a repair rolls them back
		w.u.size += int64(raw)
		*w.bufp = w.segBuf
		w.send(true, nil, err)
		return n, false
	}
	w.u.keys = append(w.u.keys, k)
	w.entries++
	w.txnBytes += entry
	w.ud.Add(sd)
	w.udBytes += add
	w.u.last += uint64(n)
	w.u.size += int64(raw)
	return n, true
}

// finish sends the last unit with the append's tally. The tally goes with
// the last unit when it fits there, else in a unit of its own (a value
// under Badger's value threshold counts whole in the transaction, one above
// it is a pointer to the value log).
func (w *appendWriter) finish(tally *ledger.Delta) {
	o := w.o
	*w.bufp = w.segBuf
	if !tally.Empty() && w.u.events() > 0 {
		tv, err := tally.Encode()
		if err != nil {
			w.send(true, nil, fmt.Errorf("outbox: encode ledger: %w", err))
			return
		}
		if w.txnBytes+w.udBytes+o.deltaCost(int64(len(tv)))+txnEntryOverhead*3 >= w.maxBytes {
			w.send(false, w.ud, nil)
			if err := w.open(); err != nil {
				o.failAfter(w.p, err)
				return
			}
		}
	}
	w.ud.Add(tally)
	w.send(true, w.ud, nil)
	if cap(o.scratch) > 4*segmentMaxBytes {
		o.scratch = nil
	}
}

// send hands the unit to the store with the counts d. Any error before the
// hand-off (failed) settles the unit as failed, with the same consequences
// as a failed write. The final unit carries the append's Pending and
// segment buffer.
func (w *appendWriter) send(final bool, d *ledger.Delta, failed error) {
	o, u, txn := w.o, w.u, w.txn
	err := func() error {
		if failed != nil {
			return failed
		}
		if !d.Empty() {
			k, err := o.putDeltaKey(txn, d)
			if err != nil {
				return err
			}
			u.keys = append(u.keys, k)
			u.delta = true
		}
		if u.events() > 0 {
			if err := txn.Set(metaLastSeq, u64(u.last)); err != nil {
				return err
			}
		}
		return nil
	}()
	if final {
		u.pending, u.buf = w.p, w.bufp
	}
	o.lastSeq = max(o.lastSeq, u.last)
	o.pendingEv.Add(u.events())
	o.pipeMu.Lock()
	o.inflight = append(o.inflight, u)
	o.pipeMu.Unlock()
	if err != nil {
		txn.Discard()
		o.settle(u, err)
		return
	}
	txn.CommitWith(func(err error) {
		if h := o.commitAnswer; h != nil {
			err = h(u.first, u.last, err)
		}
		o.settle(u, err)
	})
}

// failAfter settles p with err once every unit begun before it has settled
// (an append cut short after some of its units were sent).
func (o *Outbox) failAfter(p *Pending, err error) {
	u := &unit{first: 1, last: 0, pending: p, err: err}
	o.writeMu.RLock() // settle gives it back
	o.pipeMu.Lock()
	o.inflight = append(o.inflight, u)
	o.pipeMu.Unlock()
	o.settle(u, err)
}

// settle records Badger's answer for u and completes, in sequence order,
// every unit at the head of the pipeline that has its answer. Called from
// Badger's callback goroutines, in any order.
func (o *Outbox) settle(u *unit, err error) {
	o.pipeMu.Lock()
	u.settled, u.err = true, err
	for len(o.inflight) > 0 && o.inflight[0].settled {
		h := o.inflight[0]
		o.inflight[0] = nil
		o.inflight = o.inflight[1:]
		o.complete(h)
	}
	if len(o.inflight) == 0 {
		o.inflight = nil
		if o.idle != nil {
			close(o.idle)
			o.idle = nil
		}
	}
	o.pipeMu.Unlock()
	o.writeMu.RUnlock()
}

// complete is the durability of h, or its failure: called with pipeMu held,
// in sequence order. A unit is durable when Badger answered nil and no unit
// before it failed since the last repair; only then do readers see its
// events (durable), and are they counted in depth, bytes, the witness and
// the fold's count of deltas.
func (o *Outbox) complete(h *unit) {
	n := h.events()
	o.pendingEv.Add(-n)
	if o.broken == nil && h.err == nil {
		if n > 0 {
			o.depth.Add(n)
			o.bytes.Add(h.size)
			o.durable.Store(h.last)
			o.witnessed(h.last, 0)
		}
		if h.delta {
			o.deltaCommitted()
		}
		if h.pending != nil {
			o.setHealth(nil)
			o.finish(h, nil)
		}
		return
	}
	if o.broken == nil {
		cause := h.err
		if cause == nil { // defensive: a failure is always recorded with its cause
			cause = fmt.Errorf("outbox: commit failed")
		}
		o.broken = o.refuse(cause)
	}
	o.failed = append(o.failed, h)
	if h.pending != nil {
		o.finish(h, o.broken)
	}
}

func (o *Outbox) finish(h *unit, err error) {
	h.pending.err = err
	close(h.pending.done)
	if h.buf != nil && cap(*h.buf) <= 4*segmentMaxBytes {
		o.segPool.Put(h.buf)
	}
}

// repair withdraws what followed a failed commit, once nothing is in
// flight: the keys of every unit from the first failure on are deleted (a
// later unit may have reached the disk although it is reported failed) and
// the highest sequence is set back to the last durable one, in one synced
// transaction, so that the store holds no hole between its cursor and its
// last sequence. Those sequences were never visible to readers nor recorded
// in the witness; the appends that held them were answered with an error,
// and their callers send them again. Called with appendMu held; closing:
// from Close, which has already marked the outbox closed.
func (o *Outbox) repair(ctx context.Context, closing bool) error {
	o.pipeMu.Lock()
	for o.broken != nil && len(o.inflight) > 0 {
		if o.idle == nil {
			o.idle = make(chan struct{})
		}
		ch := o.idle
		o.pipeMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.pipeMu.Lock()
	}
	broken, failed := o.broken, o.failed
	o.pipeMu.Unlock()
	if broken == nil {
		return nil
	}
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if !closing && o.closed.Load() {
		return ErrClosed
	}
	rollback := o.lastSeq
	txn := o.db.NewTransaction(true)
	defer txn.Discard()
	for _, u := range failed {
		if err := deleteKeys(txn, u.keys); err != nil {
			return o.refuse(err)
		}
		if u.events() > 0 {
			rollback = min(rollback, u.first-1)
		}
	}
	if rollback != o.lastSeq {
		if err := txn.Set(metaLastSeq, u64(rollback)); err != nil {
			return o.refuse(err)
		}
	}
	if err := txn.Commit(); err != nil {
		return o.refuse(err)
	}
	o.log.Warn().Uint64("from", rollback+1).Uint64("to", o.lastSeq).Int("commits", len(failed)).
		Msg("outbox: the appends in flight behind a failed commit were withdrawn; their deliveries are redelivered")
	o.lastSeq = rollback
	o.pipeMu.Lock()
	o.broken, o.failed = nil, nil
	o.pipeMu.Unlock()
	return nil
}

// rowCost bounds what the stored form of an events row of k takes: its
// names, each byte escaped at most to two, and its counts.
func rowCost(k ledger.Key) int64 { return int64(2*(len(k.Source)+len(k.Type))) + 256 }

// deltaCost is what a delta value of n bytes counts in a transaction: all of
// it under Badger's value threshold, a pointer into the value log above.
func (o *Outbox) deltaCost(n int64) int64 {
	if n < o.db.Opts().ValueThreshold {
		return n + txnEntryOverhead
	}
	return 2 * txnEntryOverhead
}

// putDeltaKey is putDelta returning the key written (d is not empty).
func (o *Outbox) putDeltaKey(txn *badger.Txn, d *ledger.Delta) ([]byte, error) {
	v, err := o.capped(d, true).Encode()
	if err != nil {
		return nil, fmt.Errorf("outbox: encode ledger: %w", err)
	}
	k := ledgerKey(ledgerDelta, o.ledgerSeq.Add(1))
	return k, txn.Set(k, v)
}

// spareTxnAge bounds how long a spare transaction waits for an append: it
// holds Badger's read mark, and with it the versions a compaction may drop.
const spareTxnAge = time.Second

// txnMaker keeps one write transaction ready for the next unit. Badger makes
// a new transaction wait until every commit handed over before it has
// settled (its read timestamp covers them), which would hold a unit's
// hand-over until the unit before it is durable. A transaction made while
// that unit was still being prepared waits only for the units before it,
// and no unit reads in its transaction (conflict detection is off), so
// the earlier read timestamp changes nothing that is written. A spare not
// taken within spareTxnAge is discarded and made again.
func (o *Outbox) txnMaker() {
	defer o.wg.Done()
	t := time.NewTimer(spareTxnAge)
	defer t.Stop()
	for {
		txn := o.db.NewTransaction(true)
		t.Reset(spareTxnAge)
		select {
		case o.spareTxn <- txn:
		case <-t.C:
			txn.Discard()
		case <-o.done:
			txn.Discard()
			return
		}
	}
}
