package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// An unreadable segment (damaged block, or damaged header found at Open) is
// set aside as a dead letter; the events before and after it are delivered,
// and its events are counted as lost.
func TestDamagedSegmentSetAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(v []byte) []byte
		reopen bool
	}{
		{"block", func(v []byte) []byte { v[len(v)-3] ^= 0xff; v[len(v)-9] ^= 0xff; return v[:len(v)-1] }, false},
		{"header at open", func(v []byte) []byte { v[0] = 99; return v }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			open := func() *Outbox {
				o, err := Open(Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1, Registerer: prometheus.NewRegistry()})
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			o := open()
			defer func() { o.Close() }()
			batch := func(from, n int) [][]byte {
				var evs [][]byte
				for i := range n {
					evs = append(evs, fmt.Appendf(nil, `{"event_id":"ev-%04d","pad":"abcdefghijklmnopqrstuvwxyz"}`, from+i))
				}
				return evs
			}
			for _, b := range [][2]int{{0, 10}, {10, 7}, {17, 5}} {
				if err := o.Append(ctx, batch(b[0], b[1])); err != nil {
					t.Fatal(err)
				}
			}
			// Damage the second segment (events 11..17).
			err := o.db.Update(func(txn *badger.Txn) error {
				item, err := txn.Get(seqKey(prefixEvent, 11))
				if err != nil {
					return err
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				return txn.Set(seqKey(prefixEvent, 11), tc.damage(v))
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.reopen {
				o.Close()
				o = open()
				if o.Depth() != 22 {
					t.Fatalf("depth at open %d, want 22 (the unreadable segment counted up to the next)", o.Depth())
				}
			}
			var got []string
			for {
				f, l, evs, err := o.Peek(ctx, 4)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) == 0 {
					break
				}
				for _, e := range evs {
					got = append(got, string(e[13:20]))
				}
				if err := o.Delete(ctx, f, l); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"ev-0000", "ev-0001", "ev-0002", "ev-0003", "ev-0004", "ev-0005", "ev-0006", "ev-0007", "ev-0008", "ev-0009",
				"ev-0017", "ev-0018", "ev-0019", "ev-0020", "ev-0021"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("delivered %v\nwant      %v", got, want)
			}
			if o.Depth() != 0 || o.Bytes() != 0 {
				t.Fatalf("depth %d bytes %d after the drain", o.Depth(), o.Bytes())
			}
			if n := testutil.ToFloat64(o.damaged); n != 7 {
				t.Fatalf("damaged events counted %v, want 7", n)
			}
			dls, err := o.ListDeadLetters(ctx, 0, 10)
			if err != nil || len(dls) != 1 || dls[0].Reason != ReasonDamagedSegment || len(dls[0].Body) == 0 {
				t.Fatalf("dead letters %+v, %v", dls, err)
			}
			// The cursor survives a restart past the set-aside segment.
			o.Close()
			o = open()
			if o.Depth() != 0 {
				t.Fatalf("depth %d after reopen", o.Depth())
			}
		})
	}
}

// Segments sort just below the metadata keys with no other prefix between,
// so that a memory table of appends spans only the newest segments
// (doc.go, "Key layout").
func TestSegmentPrefixJustBelowMeta(t *testing.T) {
	for _, p := range []byte{prefixDead, prefixOldEvent} {
		if p > prefixEvent && p < prefixMeta {
			t.Fatalf("prefix %q sorts between segments %q and meta %q", p, prefixEvent, prefixMeta)
		}
	}
	if prefixEvent >= prefixMeta {
		t.Fatalf("segments %q sort after meta %q", prefixEvent, prefixMeta)
	}
}

// A store marked with the current format that still holds events one per
// key (the first format, which the migration at Open removes) is refused as
// damaged, not read as if they were not there.
func TestOldFormatRefused(t *testing.T) {
	dir := t.TempDir()
	o, err := Open(Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.db.Update(func(txn *badger.Txn) error {
		return txn.Set(seqKey(prefixOldEvent, 1), []byte(`12345678{"event_id":"old"}`))
	}); err != nil {
		t.Fatal(err)
	}
	o.Close()
	_, err = Open(Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, errOldFormat) {
		t.Fatalf("open: %v", err)
	}
}
