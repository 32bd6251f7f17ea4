package outbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// DeadLetter is a delivery the collector acknowledged without producing an
// event (a mapper failure, for instance), kept for inspection and replay.
type DeadLetter struct {
	Body       []byte    `json:"body"`
	Exchange   string    `json:"exchange,omitempty"`
	RoutingKey string    `json:"routing_key,omitempty"`
	EventType  string    `json:"event_type,omitempty"`
	Module     string    `json:"module,omitempty"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail,omitempty"`
	At         time.Time `json:"at"`
	// Compression is the codec the body is still compressed with (kombu's
	// content type), so a replay decodes it again; empty: none.
	Compression string `json:"compression,omitempty"`
	// Truncated is the size of the body as received when only its first
	// bytes are kept (a body over the body limit); zero: kept whole.
	Truncated int `json:"truncated,omitempty"`
	// Undeliverable marks a body no replay can deliver (over the size
	// limit, undecodable, refused by its decoder): kept as evidence within
	// a budget of its own (Options.MaxUndeliverable), dropped past it, and
	// never a reason to pause the input.
	Undeliverable bool `json:"undeliverable,omitempty"`
}

// ReasonDamagedSegment is the reason of a dead letter holding an outbox
// segment that could not be read back (its stored bytes, compressed, as the
// body).
const ReasonDamagedSegment = "damaged_segment"

// SkipUndeliverableDropped is the ledger's skip reason of an undeliverable
// body dropped past its dead-letter budget: acknowledged, kept nowhere.
const SkipUndeliverableDropped = "undeliverable_dropped"

// StoredDeadLetter is a dead letter with the sequence number it is stored
// under (increasing, never reused).
type StoredDeadLetter struct {
	Seq uint64 `json:"seq"`
	DeadLetter
}

// AppendDeadLetters commits letters in a synced transaction, or in several
// when together they pass Badger's largest (each durable on its own: after
// a failure, those before it stay written). They do not
// count against MaxEvents but against MaxDeadLetters and MaxDeadLetterBytes:
// past either, nothing is written and the error wraps both ErrFull and
// ErrDeadLettersFull (the consumer pauses as at the event bound), unless the
// area holds no letter a replay could deliver. Letters marked Undeliverable
// count against MaxUndeliverable and MaxUndeliverableBytes instead: those
// past that budget are left out, counted and logged (exchange, routing key,
// size), and never refuse the call. Credentials in the bodies are replaced
// by the redaction marker before they are written (internal/redact). Other
// errors as for Append (ErrRefused, ErrClosed).
func (o *Outbox) AppendDeadLetters(ctx context.Context, letters []DeadLetter) error {
	if len(letters) == 0 {
		return nil
	}
	return o.appendDeadLetters(ctx, letters, nil)
}

// appendDeadLetters is AppendDeadLetters and AppendDeadLettersCounted.
func (o *Outbox) appendDeadLetters(ctx context.Context, letters []DeadLetter, tally *ledger.Delta) error {
	if err := o.usable(ctx); err != nil {
		return err
	}
	values, _, err := encodeDeadLetters(letters, true)
	if err != nil {
		return fmt.Errorf("outbox: encode dead letters: %w", err)
	}
	if err := o.admitWrite(); err != nil {
		return err
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	var n int
	var replayable int64
	for i, l := range letters {
		if !l.Undeliverable {
			n++
			replayable += int64(len(values[i]))
		}
	}
	if err := o.deadRoom(n, replayable); err != nil {
		return err
	}
	values, undeliv, _, gone := o.undeliverableRoom(letters, values)
	if len(gone) > 0 && tally != nil {
		// The ledger files a dropped body as skipped, not as a dead letter
		// held; its counts still ride in this transaction.
		tally = tally.Clone()
		for _, l := range gone {
			tally.Redirect(l.Exchange, l.EventType, l.Reason, SkipUndeliverableDropped)
		}
	}
	if len(values) == 0 && tally.Empty() {
		return nil
	}
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	// Badger refuses a transaction past its limits (15% of a memory table,
	// about 1.2 MiB with the defaults): letters that together pass them are
	// written in several transactions, each durable on its own, the ledger's
	// counts with the first, so that counts too large for a transaction
	// leave nothing written. A failure after the first leaves those written;
	// the caller requeues the batch, and its next delivery keeps them again
	// (a replay delivers both copies under one id).
	var reserved int64 // the ledger's counts, in the first transaction
	if !tally.Empty() {
		v, err := tally.Encode()
		if err != nil {
			return fmt.Errorf("outbox: encode ledger: %w", err)
		}
		reserved = int64(len(v) + 2*txnEntryOverhead)
	}
	for lo, first := 0, true; ; first = false {
		hi := o.deadLetterPart(values, lo, reserved)
		reserved = 0
		var last uint64
		err := o.db.Update(func(txn *badger.Txn) error {
			if hi > lo {
				var err error
				if last, err = o.setDeadLetters(txn, values[lo:hi]); err != nil {
					return err
				}
				if err := o.markUndeliverable(txn, last, values[lo:hi], undeliv[lo:hi]); err != nil {
					return err
				}
			}
			if !first {
				return nil
			}
			return o.putDelta(txn, tally)
		})
		if err != nil {
			return o.refuse(err)
		}
		if first && !tally.Empty() {
			o.deltaCommitted()
		}
		if hi > lo {
			var size int64
			for _, v := range values[lo:hi] {
				size += int64(len(v))
			}
			o.deadLettersCommitted(last, size)
			o.undeliverableCommitted(values[lo:hi], undeliv[lo:hi])
		}
		if hi == len(values) {
			break
		}
		lo = hi
	}
	o.setHealth(nil)
	return nil
}

// deadLetterPart is the end of the part of values, from lo, that one
// transaction holds beside reserved bytes of other writes: as many letters
// as keep it within three quarters of Badger's limits, each counted with its
// undeliverable marker (the rest is left for the last sequence), and at
// least one when nothing is reserved.
func (o *Outbox) deadLetterPart(values [][]byte, lo int, reserved int64) int {
	maxCount, maxBytes := o.db.MaxBatchCount()*3/4, o.db.MaxBatchSize()*3/4
	n, size := int64(1), reserved
	hi := lo
	for hi < len(values) {
		entry := int64(2*9 + len(values[hi]) + 8 + 2*txnEntryOverhead)
		if (hi > lo || reserved > 0) && (n+2 >= maxCount || size+entry >= maxBytes) {
			break
		}
		n += 2
		size += entry
		hi++
	}
	return hi
}

// undeliverableRoom leaves out of values the Undeliverable letters past
// their budget, counting and logging each, and returns the values to
// write, which of them are Undeliverable, the size left out and the letters
// left out. Called with deadMu held.
func (o *Outbox) undeliverableRoom(letters []DeadLetter, values [][]byte) (kept [][]byte, undeliv []bool, dropped int64, gone []DeadLetter) {
	count, bytes := o.undelivCount.Load(), o.undelivBytes.Load()
	kept = values[:0:0]
	for i, l := range letters {
		v := values[i]
		if !l.Undeliverable {
			kept = append(kept, v)
			undeliv = append(undeliv, false)
			continue
		}
		if count+1 <= o.opts.MaxUndeliverable && bytes+int64(len(v)) <= o.opts.MaxUndeliverableBytes {
			count++
			bytes += int64(len(v))
			kept = append(kept, v)
			undeliv = append(undeliv, true)
			continue
		}
		dropped += int64(len(v))
		gone = append(gone, l)
		o.undelivDropped.Inc()
		size := len(l.Body)
		if l.Truncated > 0 {
			size = l.Truncated
		}
		o.dropLog.Warn().Str("exchange", l.Exchange).Str("routing_key", l.RoutingKey).Int("size", size).
			Str("reason", l.Reason).Int64("held", count).Int64("max", o.opts.MaxUndeliverable).
			Msg("undeliverable body over its dead-letter budget: acknowledged and dropped")
	}
	return kept, undeliv, dropped, gone
}

// markUndeliverable writes, in txn, the marker of each Undeliverable
// letter among values, stored under the sequences up to last.
func (o *Outbox) markUndeliverable(txn *badger.Txn, last uint64, values [][]byte, undeliv []bool) error {
	first := last - uint64(len(values)) + 1
	for i, v := range values {
		if !undeliv[i] {
			continue
		}
		if err := txn.Set(seqKey(prefixUndeliverable, first+uint64(i)), u64(uint64(len(v)))); err != nil {
			return err
		}
	}
	return nil
}

// undeliverableCommitted adds the Undeliverable letters among values to
// their count.
func (o *Outbox) undeliverableCommitted(values [][]byte, undeliv []bool) {
	for i, v := range values {
		if undeliv[i] {
			o.undelivCount.Add(1)
			o.undelivBytes.Add(int64(len(v)))
		}
	}
}

// countUndeliverable counts the Undeliverable letters from their markers.
func (o *Outbox) countUndeliverable(txn *badger.Txn) {
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{prefixUndeliverable}})
	defer it.Close()
	var n, size int64
	for it.Rewind(); it.Valid(); it.Next() {
		n++
		_ = it.Item().Value(func(v []byte) error {
			if len(v) == 8 {
				size += int64(binary.BigEndian.Uint64(v))
			}
			return nil
		})
	}
	o.undelivCount.Store(n)
	o.undelivBytes.Store(size)
}

// undeliverableKey is the marker key of the dead letter under key.
func undeliverableKey(key []byte) []byte {
	k := append([]byte(nil), key...)
	k[0] = prefixUndeliverable
	return k
}

// encodeDeadLetters marshals letters (stamped now when At is zero), their
// bodies redacted when asked, and returns them with their total size.
func encodeDeadLetters(letters []DeadLetter, redactBodies bool) ([][]byte, int64, error) {
	values := make([][]byte, 0, len(letters))
	var size int64
	for _, l := range letters {
		if l.At.IsZero() {
			l.At = time.Now().UTC()
		}
		if redactBodies && len(l.Body) > 0 {
			l.Body = redact.JSON(make([]byte, 0, len(l.Body)), l.Body)
		}
		v, err := json.Marshal(l)
		if err != nil {
			return nil, 0, err
		}
		values = append(values, v)
		size += int64(len(v))
	}
	return values, size, nil
}

// deadRoom answers nil when n more letters a replay could deliver, of
// size bytes, fit under the bounds (or the area holds none). Undeliverable
// letters have a budget of their own and do not count. Called with deadMu
// held.
func (o *Outbox) deadRoom(n int, size int64) error {
	count := o.deadCount.Load() - o.undelivCount.Load()
	bytes := o.deadBytes.Load() - o.undelivBytes.Load()
	if n == 0 || count <= 0 || (count+int64(n) <= o.opts.MaxDeadLetters && bytes+size <= o.opts.MaxDeadLetterBytes) {
		return nil
	}
	o.deadRefused.Inc()
	err := fmt.Errorf("%w: %w: %d dead letters of %d bytes held, %d more of %d bytes refused (bounds: %d dead letters, %d bytes)",
		ErrFull, ErrDeadLettersFull, count, bytes, n, size, o.opts.MaxDeadLetters, o.opts.MaxDeadLetterBytes)
	if !o.deadFull.Swap(true) {
		o.log.Error().Int64("dead_letters", count).Int64("bytes", bytes).Int64("max_dead_letters", o.opts.MaxDeadLetters).
			Int64("max_bytes", o.opts.MaxDeadLetterBytes).
			Msg("dead-letter area full: new dead letters are refused and the input pauses until some are replayed or purged")
	}
	return err
}

// DeadLettersFull returns nil unless the last dead letters offered were
// refused at the bound, and no dead letter was removed since; then an error
// wrapping ErrDeadLettersFull. For the readiness probe.
func (o *Outbox) DeadLettersFull() error {
	if !o.deadFull.Load() {
		return nil
	}
	return fmt.Errorf("%w: %d dead letters of %d bytes held; replay or purge some", ErrDeadLettersFull, o.deadCount.Load(), o.deadBytes.Load())
}

// setDeadLetters writes the encoded letters into txn under the sequences
// after the last one assigned, with the new last sequence, and returns it.
// The caller holds deadMu and calls deadLettersCommitted once txn committed.
func (o *Outbox) setDeadLetters(txn *badger.Txn, values [][]byte) (uint64, error) {
	seq := o.lastDead
	for _, v := range values {
		seq++
		if err := txn.Set(seqKey(prefixDead, seq), v); err != nil {
			return 0, err
		}
	}
	return seq, txn.Set(metaLastDead, u64(seq))
}

// deadLettersCommitted records the dead letters up to last, of size bytes,
// as stored.
func (o *Outbox) deadLettersCommitted(last uint64, size int64) {
	if o.deadCount.Add(int64(last-o.lastDead)) == int64(last-o.lastDead) {
		o.oldestDead.Store(0) // the area was empty: the oldest is new
	}
	o.deadBytes.Add(size)
	o.lastDead = last
	o.witnessed(0, last)
}

// deadLettersRemoved records n dead letters of size bytes as deleted.
func (o *Outbox) deadLettersRemoved(n int, size int64) {
	if n == 0 {
		return
	}
	o.deadCount.Add(-int64(n))
	if o.deadBytes.Add(-size) < 0 || o.deadCount.Load() == 0 {
		o.deadBytes.Store(0)
	}
	o.oldestDead.Store(0)
	if o.deadFull.Swap(false) {
		o.log.Info().Int64("dead_letters", o.deadCount.Load()).Int64("bytes", o.deadBytes.Load()).Msg("dead-letter area has room again")
	}
}

// DeadLetterBytes is the size of the dead letters held, as stored.
func (o *Outbox) DeadLetterBytes() int64 { return o.deadBytes.Load() }

// OldestDeadLetterAge is how long ago the dead letter stored first (the
// lowest sequence) was written; 0 when there is none.
func (o *Outbox) OldestDeadLetterAge() time.Duration {
	if o.closed.Load() || o.deadCount.Load() == 0 {
		return 0
	}
	if at := o.oldestDead.Load(); at != 0 {
		return time.Since(time.Unix(0, at))
	}
	at := o.firstWrittenAt(prefixDead, nil, func(v []byte) (int64, error) {
		var d struct {
			At time.Time `json:"at"`
		}
		if err := json.Unmarshal(v, &d); err != nil {
			return 0, err
		}
		return d.At.UnixNano(), nil
	})
	if at == 0 {
		return 0
	}
	o.oldestDead.Store(at)
	return time.Since(time.Unix(0, at))
}

// DeadLetterCount is the number of dead letters held.
func (o *Outbox) DeadLetterCount() int64 { return o.deadCount.Load() }

// ListDeadLetters returns up to max dead letters with a sequence greater
// than after, oldest first. Page with after = the last Seq returned.
func (o *Outbox) ListDeadLetters(ctx context.Context, after uint64, max int) ([]StoredDeadLetter, error) {
	if err := o.usable(ctx); err != nil {
		return nil, err
	}
	if max <= 0 {
		max = 100
	}
	if err := o.holdOpen(); err != nil {
		return nil, err
	}
	defer o.writeMu.RUnlock()
	var out []StoredDeadLetter
	err := o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: min(max, 100), Prefix: []byte{prefixDead}})
		defer it.Close()
		for it.Seek(seqKey(prefixDead, after+1)); it.Valid() && len(out) < max; it.Next() {
			d, err := decodeDead(it.Item())
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: list dead letters: %w", err)
	}
	return out, nil
}

// GetDeadLetter returns the dead letter stored under seq, or ErrNotFound.
func (o *Outbox) GetDeadLetter(ctx context.Context, seq uint64) (StoredDeadLetter, error) {
	if err := o.usable(ctx); err != nil {
		return StoredDeadLetter{}, err
	}
	if err := o.holdOpen(); err != nil {
		return StoredDeadLetter{}, err
	}
	defer o.writeMu.RUnlock()
	var d StoredDeadLetter
	err := o.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(seqKey(prefixDead, seq))
		if err != nil {
			return err
		}
		d, err = decodeDead(item)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return StoredDeadLetter{}, fmt.Errorf("%w: dead letter %d", ErrNotFound, seq)
	}
	if err != nil {
		return StoredDeadLetter{}, fmt.Errorf("outbox: get dead letter %d: %w", seq, err)
	}
	return d, nil
}

// DeleteDeadLetters removes the given dead letters in one synced
// transaction and reports how many existed. Unknown sequences are ignored.
func (o *Outbox) DeleteDeadLetters(ctx context.Context, seqs ...uint64) (int, error) {
	if err := o.usable(ctx); err != nil {
		return 0, err
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	if err := o.holdOpen(); err != nil {
		return 0, err
	}
	defer o.writeMu.RUnlock()
	n, size, err := o.deleteDead(seqs, nil)
	if err != nil {
		return 0, o.refuse(err)
	}
	o.deadLettersRemoved(n, size)
	return n, nil
}

// ReplaceDeadLetters removes the dead letters stale and stores renewed in
// one synced transaction (a letter replayed again and failing differently):
// never both, never neither. The bounds do not apply, since one replaces the
// other; bodies are redacted as by AppendDeadLetters.
func (o *Outbox) ReplaceDeadLetters(ctx context.Context, stale []uint64, renewed []DeadLetter) error {
	if err := o.usable(ctx); err != nil {
		return err
	}
	values, added, err := encodeDeadLetters(renewed, true)
	if err != nil {
		return fmt.Errorf("outbox: encode dead letters: %w", err)
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	undeliv := make([]bool, len(renewed))
	for i, l := range renewed {
		undeliv[i] = l.Undeliverable
	}
	var last uint64
	n, removed, err := o.deleteDead(stale, func(txn *badger.Txn) error {
		var err error
		if last, err = o.setDeadLetters(txn, values); err != nil {
			return err
		}
		return o.markUndeliverable(txn, last, values, undeliv)
	})
	if err != nil {
		return o.refuse(err)
	}
	o.deadLettersRemoved(n, removed)
	if len(values) > 0 {
		o.deadLettersCommitted(last, added)
		o.undeliverableCommitted(values, undeliv)
	}
	return nil
}

// deleteDead deletes the dead letters seqs (unknown ones ignored) in one
// transaction, with also run in it, and reports how many existed and their
// size; the Undeliverable ones among them leave their count. Called with
// deadMu and writeMu held.
func (o *Outbox) deleteDead(seqs []uint64, also func(*badger.Txn) error) (n int, size int64, err error) {
	var undeliv, undelivSize int64
	err = o.db.Update(func(txn *badger.Txn) error {
		for _, s := range seqs {
			k := seqKey(prefixDead, s)
			item, err := txn.Get(k)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			} else if err != nil {
				return err
			}
			size += item.ValueSize()
			if err := txn.Delete(k); err != nil {
				return err
			}
			n++
			mk := seqKey(prefixUndeliverable, s)
			if _, err := txn.Get(mk); err == nil {
				if err := txn.Delete(mk); err != nil {
					return err
				}
				undeliv++
				undelivSize += item.ValueSize()
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
		}
		if also != nil {
			return also(txn)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	o.undelivCount.Add(-undeliv)
	o.undelivBytes.Add(-undelivSize)
	return n, size, nil
}

func decodeDead(item *badger.Item) (StoredDeadLetter, error) {
	d := StoredDeadLetter{Seq: binary.BigEndian.Uint64(item.Key()[1:])}
	err := item.Value(func(v []byte) error { return json.Unmarshal(v, &d.DeadLetter) })
	if err != nil {
		return StoredDeadLetter{}, fmt.Errorf("dead letter %d: %w", d.Seq, err)
	}
	return d, nil
}

// ReasonRefusedByAPI is the reason of a dead letter holding an event the
// Reporting API refused on its own (400 or 422 for a batch of just that
// event, or 413 for it alone): the event as its body, the API's status and
// a short, redacted excerpt of its answer as the detail.
const ReasonRefusedByAPI = "refused_by_reporting_api"

// SetAside moves the oldest undelivered event, which must be the one at seq,
// to the dead-letter area (its body the event, with reason and detail), and
// the drain cursor past it, in one synced transaction: the event is never in
// neither place, and the sender goes on with the next. A seq already behind
// the cursor is ignored (a repeated call is harmless); any other seq answers
// ErrInvalidRange. Errors as for AppendDeadLetters, the bounds included: at
// them the event stays where it is.
func (o *Outbox) SetAside(ctx context.Context, seq uint64, reason, detail string) error {
	if err := o.usable(ctx); err != nil {
		return err
	}
	o.readMu.Lock()
	defer o.readMu.Unlock()
	head := o.head.Load()
	if seq < head {
		return nil
	}
	if seq != head {
		return fmt.Errorf("%w: %d is not the oldest undelivered event (%d)", ErrInvalidRange, seq, head)
	}
	first, _, events, bad, err := o.peek(1)
	if err != nil {
		return err
	}
	if bad != nil {
		return fmt.Errorf("%w: event %d: %w", ErrCorrupt, seq, bad.cause)
	}
	if len(events) != 1 || first != seq {
		return fmt.Errorf("%w: event %d is not buffered", ErrInvalidRange, seq)
	}
	if err := o.admitWrite(); err != nil {
		return err
	}
	// The event is canonical, without credentials (the mappers' leak check):
	// kept as it is, so that a replay sends exactly it.
	letter := DeadLetter{Body: events[0], EventType: eventType(events[0]), Reason: reason, Detail: detail}
	values, size, err := encodeDeadLetters([]DeadLetter{letter}, false)
	if err != nil {
		return fmt.Errorf("outbox: encode dead letter: %w", err)
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	if err := o.deadRoom(1, size); err != nil {
		return err
	}
	var last uint64
	err = o.advance(seq+1, func(txn *badger.Txn) error {
		var err error
		last, err = o.setDeadLetters(txn, values)
		return err
	}, &passing{})
	if err != nil {
		return err
	}
	o.deadLettersCommitted(last, size)
	o.setHealth(nil)
	return nil
}

// eventType reads the event_type member of a canonical event; "" when
// there is none.
func eventType(event []byte) string {
	var ev struct {
		EventType string `json:"event_type"`
	}
	if json.Unmarshal(event, &ev) != nil || len(ev.EventType) > 255 {
		return ""
	}
	return ev.EventType
}
