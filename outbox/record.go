package outbox

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// Records are small named values kept beside the events, for other parts of
// the collector whose state must survive a restart together with the outbox
// (the mapper catalogue keeps its decisions here). They live under the
// metadata prefix as 'm' + "rec/" + name, are written in one synced
// transaction each, and are never touched by the drain or the disk reclaim.

// recordPrefix keeps records apart from the outbox's own metadata keys.
const recordPrefix = "mrec/"

// Bounds of a record: a name is at most maxRecordName bytes, a value at
// most MaxRecordBytes.
const (
	maxRecordName  = 64
	MaxRecordBytes = 1 << 20
)

func recordKey(name string) ([]byte, error) {
	if name == "" || len(name) > maxRecordName {
		return nil, fmt.Errorf("%w: record name %q: 1 to %d bytes", ErrInvalidRecord, name, maxRecordName)
	}
	return []byte(recordPrefix + name), nil
}

// SaveRecord stores value under name, replacing what was there, and returns
// once it is synced to disk. It is refused like an append when the
// filesystem is short of space (ErrRefused wrapping ErrDiskFull). Safe for
// concurrent use.
func (o *Outbox) SaveRecord(name string, value []byte) error {
	key, err := recordKey(name)
	if err != nil {
		return err
	}
	if len(value) > MaxRecordBytes {
		return fmt.Errorf("%w: record %q is %d bytes, at most %d", ErrInvalidRecord, name, len(value), MaxRecordBytes)
	}
	if o.closed.Load() {
		return ErrClosed
	}
	if err := o.checkSpace(); err != nil {
		return err
	}
	v := append([]byte(nil), value...)
	return o.update(func(txn *badger.Txn) error { return txn.Set(key, v) })
}

// LoadRecord returns the value stored under name, or nil and no error when
// there is none. Safe for concurrent use.
func (o *Outbox) LoadRecord(name string) ([]byte, error) {
	key, err := recordKey(name)
	if err != nil {
		return nil, err
	}
	if o.closed.Load() {
		return nil, ErrClosed
	}
	var out []byte
	err = o.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("outbox: read record %q: %w", name, err)
	}
	return out, nil
}
