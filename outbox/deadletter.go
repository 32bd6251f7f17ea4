package outbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
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
}

// ReasonDamagedSegment is the reason of a dead letter holding an outbox
// segment that could not be read back (its stored bytes, compressed, as the
// body).
const ReasonDamagedSegment = "damaged_segment"

// StoredDeadLetter is a dead letter with the sequence number it is stored
// under (increasing, never reused).
type StoredDeadLetter struct {
	Seq uint64 `json:"seq"`
	DeadLetter
}

// AppendDeadLetters commits letters in one synced transaction. They do not
// count against MaxEvents. Errors as for Append (ErrRefused, ErrClosed).
func (o *Outbox) AppendDeadLetters(ctx context.Context, letters []DeadLetter) error {
	if len(letters) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.closed.Load() {
		return ErrClosed
	}
	if err := o.checkSpace(); err != nil {
		o.refusedIO.Inc()
		o.setHealth(err)
		return err
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return ErrClosed
	}
	var last uint64
	err := o.db.Update(func(txn *badger.Txn) error {
		var err error
		last, err = o.setDeadLetters(txn, letters)
		return err
	})
	if err != nil {
		return o.refuse(err)
	}
	o.deadLettersCommitted(last)
	o.setHealth(nil)
	return nil
}

// setDeadLetters writes letters into txn under the sequences after the last
// one assigned, with the new last sequence, and returns it. The caller holds
// deadMu and calls deadLettersCommitted once txn committed.
func (o *Outbox) setDeadLetters(txn *badger.Txn, letters []DeadLetter) (uint64, error) {
	seq := o.lastDead
	for _, l := range letters {
		if l.At.IsZero() {
			l.At = time.Now().UTC()
		}
		v, err := json.Marshal(l)
		if err != nil {
			return 0, err
		}
		seq++
		if err := txn.Set(seqKey(prefixDead, seq), v); err != nil {
			return 0, err
		}
	}
	return seq, txn.Set(metaLastDead, u64(seq))
}

// deadLettersCommitted records the dead letters up to last as stored.
func (o *Outbox) deadLettersCommitted(last uint64) {
	o.deadCount.Add(int64(last - o.lastDead))
	o.lastDead = last
	o.witnessed(0, last)
}

// DeadLetterCount is the number of dead letters held.
func (o *Outbox) DeadLetterCount() int64 { return o.deadCount.Load() }

// ListDeadLetters returns up to max dead letters with a sequence greater
// than after, oldest first. Page with after = the last Seq returned.
func (o *Outbox) ListDeadLetters(ctx context.Context, after uint64, max int) ([]StoredDeadLetter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.closed.Load() {
		return nil, ErrClosed
	}
	if max <= 0 {
		max = 100
	}
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return nil, ErrClosed
	}
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
	if err := ctx.Err(); err != nil {
		return StoredDeadLetter{}, err
	}
	if o.closed.Load() {
		return StoredDeadLetter{}, ErrClosed
	}
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return StoredDeadLetter{}, ErrClosed
	}
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
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if o.closed.Load() {
		return 0, ErrClosed
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return 0, ErrClosed
	}
	n := 0
	err := o.db.Update(func(txn *badger.Txn) error {
		for _, s := range seqs {
			k := seqKey(prefixDead, s)
			if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
				continue
			} else if err != nil {
				return err
			}
			if err := txn.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, o.refuse(err)
	}
	o.deadCount.Add(-int64(n))
	return n, nil
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
// ErrInvalidRange. Errors as for AppendDeadLetters.
func (o *Outbox) SetAside(ctx context.Context, seq uint64, reason, detail string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.closed.Load() {
		return ErrClosed
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
	if err := o.checkSpace(); err != nil {
		o.refusedIO.Inc()
		o.setHealth(err)
		return err
	}
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	letter := DeadLetter{Body: events[0], EventType: eventType(events[0]), Reason: reason, Detail: detail}
	var last uint64
	err = o.advance(seq+1, func(txn *badger.Txn) error {
		var err error
		last, err = o.setDeadLetters(txn, []DeadLetter{letter})
		return err
	})
	if err != nil {
		return err
	}
	o.deadLettersCommitted(last)
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
