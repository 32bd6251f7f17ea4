package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// dirState is every file of dir with its size and modification time.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%s %s %d bytes", fi.ModTime(), fi.Mode(), fi.Size())
	}
	return out
}

func TestReadOnlyReadsAStoppedStoreAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	taken := time.Now()
	tally := &ledger.Delta{}
	tally.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"}).Commit()
	if err := o.AppendCounted(ctx, events(0, 5, 200), taken, tally); err != nil {
		t.Fatal(err)
	}
	if err := o.AppendDeadLetters(ctx, []outbox.DeadLetter{
		{Body: []byte(`{"a":1}`), Reason: "mapper_error", At: taken},
		{Body: []byte(`{"b":2}`), Reason: "oversized", At: taken, Undeliverable: true},
	}); err != nil {
		t.Fatal(err)
	}
	if err := o.SaveRecord("catalog", []byte(`{"format":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	before := dirState(t, dir)

	ro, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	if got := ro.Depth(); got != 5 {
		t.Errorf("depth %d, want 5", got)
	}
	ds, err := ro.ListDeadLetters(ctx, 0, 10)
	if err != nil || len(ds) != 2 || ds[0].Reason != "mapper_error" || !ds[1].Undeliverable {
		t.Errorf("dead letters %+v, %v", ds, err)
	}
	if rec, err := ro.LoadRecord("catalog"); err != nil || string(rec) != `{"format":1}` {
		t.Errorf("record %q, %v", rec, err)
	}
	if r := testkit.WholeLedger(t, ro).Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"}); r.Consumed != 1 {
		t.Errorf("the ledger read back counts %d consumed, want 1", r.Consumed)
	}
	err = ro.Append(ctx, events(5, 1, 200))
	if !errors.Is(err, outbox.ErrReadOnly) || !errors.Is(err, outbox.ErrRefused) {
		t.Errorf("append: %v, want ErrRefused wrapping ErrReadOnly", err)
	}
	if err := ro.AppendDeadLetters(ctx, []outbox.DeadLetter{{Body: []byte(`{}`), Reason: "x", At: taken}}); !errors.Is(err, outbox.ErrReadOnly) {
		t.Errorf("dead letter append: %v, want ErrReadOnly", err)
	}
	if err := ro.SaveRecord("catalog", []byte(`{}`)); !errors.Is(err, outbox.ErrReadOnly) {
		t.Errorf("save record: %v, want ErrReadOnly", err)
	}
	// Readers share the directory; a collector cannot start on it while one reads.
	ro2, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if err := ro2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1}); !errors.Is(err, outbox.ErrLocked) {
		t.Errorf("read-write open beside a reader: %v, want ErrLocked", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after := dirState(t, dir)
	if len(after) != len(before) {
		t.Errorf("files before %v, after %v", before, after)
	}
	for name, st := range before {
		if name == "LOCK" {
			continue
		}
		if after[name] != st {
			t.Errorf("%s changed: %s, now %s", name, st, after[name])
		}
	}
	// The store opens read-write after the reader, every event still there.
	o = open(t, dir)
	defer o.Close()
	if o.Depth() != 5 || o.DeadLetterCount() != 2 {
		t.Errorf("after the reader: depth %d, dead letters %d", o.Depth(), o.DeadLetterCount())
	}
}

func TestReadOnlyIsRefusedWhileACollectorHoldsTheStore(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	defer o.Close()
	_, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
	if !errors.Is(err, outbox.ErrLocked) {
		t.Fatalf("read-only open of a held store: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("the error does not name the directory: %v", err)
	}
}

func TestReadOnlyOfNoStoreCreatesNothing(t *testing.T) {
	for _, dir := range []string{filepath.Join(t.TempDir(), "missing"), t.TempDir()} {
		_, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
		if !errors.Is(err, outbox.ErrNoStore) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: %v, want ErrNoStore naming the directory", dir, err)
		}
		ents, rerr := os.ReadDir(dir)
		switch {
		case errors.Is(rerr, fs.ErrNotExist):
		case rerr != nil:
			t.Fatal(rerr)
		case len(ents) > 0:
			t.Errorf("%s: the read-only open created %d files", dir, len(ents))
		}
	}
}

const envLeftOpenDir = "TALLY_OSC_OUTBOX_LEFT_OPEN_DIR"

// leftOpenChild is the child of TestReadOnlyOfAStoreLeftOpen: it commits
// events and exits without closing the outbox, as a crash would.
func leftOpenChild(dir string) {
	o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	if err := o.Append(context.Background(), events(0, 10, 200)); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	os.Exit(0)
}

func TestReadOnlyOfAStoreLeftOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outbox")
	cmd := child(envLeftOpenDir + "=" + dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	_, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
	if !errors.Is(err, outbox.ErrLeftOpen) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "start the collector") {
		t.Fatalf("read-only open of a store left open: %v, want ErrLeftOpen naming the directory and the fix", err)
	}
	// The collector replays it, after which it reads.
	o := open(t, dir)
	if o.Depth() != 10 {
		t.Errorf("depth %d after the replay, want 10", o.Depth())
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open after a clean stop: %v", err)
	}
	defer ro.Close()
	if ro.Depth() != 10 {
		t.Errorf("read-only depth %d, want 10", ro.Depth())
	}
}
