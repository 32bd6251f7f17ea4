package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// formatVersion is the layout of the store this build reads and writes (see
// doc.go, "Format versions"). A store of an earlier format is migrated at
// Open; a store of a later one is refused with ErrFormatTooNew.
const formatVersion = 2

// metaFormat holds the format version of the store, uint64 big-endian. A
// store without it was written before the marker existed: format 1 when it
// holds 'e' or 's' keys, format 2 otherwise (an empty new store included).
var metaFormat = []byte("mformat")

// prefixInterimSegment marked segments for a few builds between the first
// format and the second (commits b4c4e75 to 23df86c), which stored them
// above the metadata. Only an unmarked store is looked at for it: the
// prefix is free for other uses in marked stores.
const prefixInterimSegment = 's'

// migrations[v] rewrites a store of format v into format v+1. Each one
// commits in steps that leave the store readable by the same migration, so a
// migration cut short by a crash or a kill resumes at the next Open; the
// marker is moved to v+1 only once the step before it is complete.
var migrations = map[uint64]func(o *Outbox) error{
	1: (*Outbox).migrateSegments,
}

// openFormat reads the format of the store, refuses one newer than this
// build, runs the migrations from an older one, and marks the store with
// formatVersion. It runs before anything else reads the store.
func (o *Outbox) openFormat() error {
	v, marked, err := o.storedFormat()
	if err != nil {
		return fmt.Errorf("%w: %s: format marker: %w (%s)", ErrCorrupt, o.dir, err, docRecovery)
	}
	if v > formatVersion {
		return fmt.Errorf("%w: %s holds an outbox of format %d; this build reads formats up to %d: run a release of the collector that reads format %d or later (docs/outbox.md, \"Upgrading\")",
			ErrFormatTooNew, o.dir, v, formatVersion, v)
	}
	for ; v < formatVersion; v++ {
		start := time.Now()
		o.log.Info().Str("dir", o.dir).Uint64("from", v).Uint64("to", v+1).Msg("outbox: migrating the store to a newer format")
		if err := migrations[v](o); err != nil {
			return fmt.Errorf("outbox: %s: migrating format %d to %d: %w", o.dir, v, v+1, err)
		}
		if err := o.setFormat(v + 1); err != nil {
			return fmt.Errorf("outbox: %s: marking format %d: %w", o.dir, v+1, err)
		}
		marked = true
		o.log.Info().Str("dir", o.dir).Uint64("format", v+1).Dur("took", time.Since(start)).Msg("outbox: store migrated")
	}
	if !marked {
		if err := o.setFormat(formatVersion); err != nil {
			return fmt.Errorf("outbox: %s: marking format %d: %w", o.dir, formatVersion, err)
		}
	}
	return nil
}

// storedFormat answers the format of the store and whether it is marked.
func (o *Outbox) storedFormat() (v uint64, marked bool, err error) {
	err = o.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaFormat)
		if errors.Is(err, badger.ErrKeyNotFound) {
			v = 2
			for _, p := range []byte{prefixOldEvent, prefixInterimSegment} {
				old := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{p}})
				old.Rewind()
				if old.Valid() {
					v = 1
				}
				old.Close()
			}
			return nil
		}
		if err != nil {
			return err
		}
		marked = true
		return item.Value(func(b []byte) error {
			if len(b) != 8 {
				return fmt.Errorf("%d bytes", len(b))
			}
			v = binary.BigEndian.Uint64(b)
			return nil
		})
	})
	return v, marked, err
}

func (o *Outbox) setFormat(v uint64) error {
	return o.db.Update(func(txn *badger.Txn) error { return txn.Set(metaFormat, u64(v)) })
}

// migrateSegments rewrites the events of a format-1 store (one key 'e'+seq
// per event, its value the append time, 8 bytes, then the event) into
// segments of format 2, keeping every sequence number, so the drain cursor,
// the last sequence and COMMITTED stay valid. Each transaction writes one
// segment and deletes the keys it replaces: a store cut short in between
// holds segments below the remaining 'e' keys, and the next Open goes on.
// Dead letters and the metadata keys are the same in both formats.
//
// Segments of the interim builds ('s' keys) are moved to 'l' first, as they
// are: their values are already segments.
func (o *Outbox) migrateSegments() error {
	if err := o.moveInterimSegments(); err != nil {
		return err
	}
	var converted, segments int64
	// One segment and its deletes per transaction, within Badger's limits
	// for a transaction at the configured memory-table size.
	maxEvents := min(segmentMaxEvents, int(o.db.MaxBatchCount()/4))
	maxBytes := min(segmentMaxBytes, int(o.db.MaxBatchSize()/4))
	for {
		var keys [][]byte
		var evs [][]byte
		var first uint64
		var at int64
		err := o.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixOldEvent}})
			defer it.Close()
			size := 0
			for it.Rewind(); it.Valid(); it.Next() {
				item := it.Item()
				seq := binary.BigEndian.Uint64(item.Key()[1:])
				if seq == 0 { // the first format's transient reclaim sentinel
					keys = append(keys, item.KeyCopy(nil))
					continue
				}
				// A segment holds consecutive sequences: stop at a hole (which
				// load then reports as damage) and at the segment bounds.
				if len(evs) > 0 && (seq != first+uint64(len(evs)) || len(evs) >= maxEvents || size >= maxBytes) {
					break
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				if len(v) < 8 {
					return fmt.Errorf("%w: event %d of the first format has %d bytes", ErrCorrupt, seq, len(v))
				}
				if len(evs) == 0 {
					first = seq
					at = int64(binary.BigEndian.Uint64(v[:8]))
				}
				keys = append(keys, item.KeyCopy(nil))
				evs = append(evs, v[8:])
				size += len(v) - 8
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			o.log.Info().Str("dir", o.dir).Int64("events", converted).Int64("segments", segments).Msg("outbox: events of the first format rewritten as segments")
			return nil
		}
		// The free-space reserve holds as for appends: the migration stops
		// (and resumes at a later Open) rather than run the disk full.
		if err := o.checkSpace(); err != nil {
			return err
		}
		err = o.db.Update(func(txn *badger.Txn) error {
			if len(evs) > 0 {
				// The segment's time is its first (oldest) event's, so the
				// oldest age reported never understates.
				seg, _ := appendSegment(nil, at, evs, nil)
				if err := txn.Set(seqKey(prefixEvent, first), seg); err != nil {
					return err
				}
			}
			return deleteKeys(txn, keys)
		})
		if err != nil {
			return err
		}
		converted += int64(len(evs))
		if len(evs) > 0 {
			segments++
		}
	}
}

// moveInterimSegments moves every 's' key to 'l' under the same sequence,
// a bounded number per transaction, each move (set and delete) in one; the
// reclaim sentinel 's'+0 is deleted.
func (o *Outbox) moveInterimSegments() error {
	var moved int64
	for {
		var keys, vals [][]byte
		err := o.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixInterimSegment}})
			defer it.Close()
			size := int64(0)
			for it.Rewind(); it.Valid() && len(keys) < 256 && size < o.db.MaxBatchSize()/4; it.Next() {
				item := it.Item()
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				keys = append(keys, item.KeyCopy(nil))
				vals = append(vals, v)
				size += int64(len(v))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			if moved > 0 {
				o.log.Info().Str("dir", o.dir).Int64("segments", moved).Msg("outbox: segments of the interim layout moved")
			}
			return nil
		}
		if err := o.checkSpace(); err != nil {
			return err
		}
		err = o.db.Update(func(txn *badger.Txn) error {
			for i, k := range keys {
				if seq := binary.BigEndian.Uint64(k[1:]); seq != 0 {
					if err := txn.Set(seqKey(prefixEvent, seq), vals[i]); err != nil {
						return err
					}
				}
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		moved += int64(len(keys))
	}
}
