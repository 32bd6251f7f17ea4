package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

func TestRecordsSurviveReopenAndStayApartFromEvents(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	if v, err := o.LoadRecord("catalog"); err != nil || v != nil {
		t.Fatalf("absent record: %q %v", v, err)
	}
	if err := o.SaveRecord("catalog", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := o.SaveRecord("catalog", []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := o.SaveRecord("other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Events go in and drain out around the records without touching them.
	ctx := context.Background()
	if err := o.Append(ctx, events(0, 10, 300)); err != nil {
		t.Fatal(err)
	}
	if first, last, evs, err := o.Peek(ctx, 100); err != nil || len(evs) != 10 || o.Delete(ctx, first, last) != nil {
		t.Fatalf("peek and delete: %d events, %v", len(evs), err)
	}
	o = reopen(t, o, dir)
	if v, err := o.LoadRecord("catalog"); err != nil || !bytes.Equal(v, []byte(`{"a":2}`)) {
		t.Fatalf("after reopen: %q %v", v, err)
	}
	if v, _ := o.LoadRecord("other"); string(v) != "x" {
		t.Fatalf("other record: %q", v)
	}
	if o.Depth() != 0 {
		t.Errorf("records counted as events: depth %d", o.Depth())
	}
	for _, name := range []string{"", strings.Repeat("n", 65)} {
		if err := o.SaveRecord(name, nil); !errors.Is(err, outbox.ErrInvalidRecord) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if err := o.SaveRecord("big", make([]byte, outbox.MaxRecordBytes+1)); !errors.Is(err, outbox.ErrInvalidRecord) {
		t.Errorf("oversized value: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.SaveRecord("catalog", nil); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}
