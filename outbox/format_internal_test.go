package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/rs/zerolog"
)

func openFormatTest(t *testing.T, dir string) (*Outbox, error) {
	t.Helper()
	return Open(Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
}

// A new store is marked with this build's format at its first Open.
func TestNewStoreMarkedWithFormat(t *testing.T) {
	o, err := openFormatTest(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	v, marked, err := o.storedFormat()
	if err != nil || !marked || v != formatVersion {
		t.Fatalf("format %d, marked %v, %v; want %d marked", v, marked, err, formatVersion)
	}
}

// A store marked with a format later than this build's is refused at Open
// with ErrFormatTooNew naming the format it needs, and left as it was: the
// marker stays, and its events are there for the release that reads them.
func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	o, err := openFormatTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Append(context.Background(), [][]byte{[]byte(`{"event_id":"a"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := o.setFormat(formatVersion + 1); err != nil {
		t.Fatal(err)
	}
	o.Close()
	for range 2 {
		_, err = openFormatTest(t, dir)
		want := fmt.Sprintf("format %d", formatVersion+1)
		if !errors.Is(err, ErrFormatTooNew) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Upgrading") {
			t.Fatalf("open: %v; want ErrFormatTooNew naming %q", err, want)
		}
	}
	db, err := badger.Open(badgerOptions(Options{Dir: dir, MemTableBytes: defaultMemTableBytes}).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaFormat)
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error {
			if binary.BigEndian.Uint64(b) != formatVersion+1 {
				return fmt.Errorf("marker rewritten to %d", binary.BigEndian.Uint64(b))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A first-format store whose migration was cut short (segments written for
// the oldest events, 'e' keys left for the rest, no marker: what a kill
// between two of its transactions leaves) is migrated to the end at the next
// Open: every event once, in order, across several segments; the reclaim
// sentinel 'e'+0 removed.
func TestMigrationResumesAfterInterruption(t *testing.T) {
	const n, done = 3000, 1024
	dir := t.TempDir()
	o, err := openFormatTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(i int) []byte { return []byte(fmt.Sprintf(`{"event_id":"m-%05d","pad":"%0200d"}`, i, i)) }
	err = o.db.Update(func(txn *badger.Txn) error {
		if err := txn.Delete(metaFormat); err != nil {
			return err
		}
		var evs [][]byte
		for i := 1; i <= done; i++ {
			evs = append(evs, ev(i))
		}
		seg, _ := appendSegment(nil, 1, evs, nil)
		if err := txn.Set(seqKey(prefixEvent, 1), seg); err != nil {
			return err
		}
		if err := txn.Set(seqKey(prefixOldEvent, 0), make([]byte, 8)); err != nil {
			return err
		}
		return txn.Set(metaLastSeq, u64(n))
	})
	if err != nil {
		t.Fatal(err)
	}
	wb := o.db.NewWriteBatch()
	for i := done + 1; i <= n; i++ {
		v := append(u64(uint64(i)), ev(i)...)
		if err := wb.Set(seqKey(prefixOldEvent, uint64(i)), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	o.Close()

	o, err = openFormatTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Depth() != n {
		t.Fatalf("depth %d, want %d", o.Depth(), n)
	}
	segs, old := 0, 0
	err = o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			switch it.Item().Key()[0] {
			case prefixEvent:
				segs++
			case prefixOldEvent:
				old++
			}
		}
		return nil
	})
	if err != nil || old != 0 || segs < 3 {
		t.Fatalf("%d segments, %d old keys left, %v", segs, old, err)
	}
	ctx := context.Background()
	next := 1
	for o.Depth() > 0 {
		first, last, evs, err := o.Peek(ctx, 700)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if string(e) != string(ev(next+i)) {
				t.Fatalf("event %d: %q", next+i, e)
			}
		}
		if first != uint64(next) {
			t.Fatalf("first %d, want %d", first, next)
		}
		next += len(evs)
		if err := o.Delete(ctx, first, last); err != nil {
			t.Fatal(err)
		}
	}
	if next != n+1 {
		t.Fatalf("read %d events, want %d", next-1, n)
	}
	if v, marked, err := o.storedFormat(); err != nil || !marked || v != formatVersion {
		t.Fatalf("format %d marked %v %v", v, marked, err)
	}
}
