//go:build outbox_golden

package outbox_test

import (
	"context"
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// The generator of the golden stores is built only with the outbox_golden
// tag (testdata/README.md): it writes files, so it is no part of make test.

// goldenEnv names the directory TestWriteGoldenStore writes a golden store
// into.
const goldenEnv = "TALLY_OSC_WRITE_GOLDEN_OUTBOX"

// TestWriteGoldenStore writes the golden store of this build's format into
// $TALLY_OSC_WRITE_GOLDEN_OUTBOX (a directory that must not exist yet). It
// uses only the package's API, so that the same file builds against an
// earlier release to write that release's store.
func TestWriteGoldenStore(t *testing.T) {
	dir := os.Getenv(goldenEnv)
	if dir == "" {
		t.Fatalf("set %s to the directory to write the golden store into", goldenEnv)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists; remove it first", dir)
	}
	ctx := context.Background()
	o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{1, 4}, {5, 7}, {8, 12}} {
		if err := o.Append(ctx, goldenRange(r[0], r[1])); err != nil {
			t.Fatal(err)
		}
	}
	first, last, evs, err := o.Peek(ctx, goldenDelivered)
	if err != nil || first != 1 || last != goldenDelivered || len(evs) != goldenDelivered {
		t.Fatalf("peek: %d..%d, %d events, %v", first, last, len(evs), err)
	}
	if err := o.Delete(ctx, first, last); err != nil {
		t.Fatal(err)
	}
	if err := o.AppendDeadLetters(ctx, []outbox.DeadLetter{goldenDeadLetter(1), goldenDeadLetter(2)}); err != nil {
		t.Fatal(err)
	}
	if err := o.Append(ctx, goldenRange(13, goldenEvents)); err != nil {
		t.Fatal(err)
	}
	if err := o.SaveRecord("catalog", []byte(goldenRecord)); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
}

func goldenRange(from, to int) [][]byte {
	var evs [][]byte
	for i := from; i <= to; i++ {
		evs = append(evs, goldenEvent(i))
	}
	return evs
}
