package outbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// goldenEnv names the directory TestWriteGoldenStore writes a golden store
// into; without it the test does nothing. See testdata/README.md.
const goldenEnv = "TALLY_OSC_WRITE_GOLDEN_OUTBOX"

// The content of every golden store (testdata/format-v*), written by the
// build of its format and read back by TestGoldenStores:
//
//	events 1..4, 5..7 and 8..12 appended in three commits;
//	events 1..5 delivered (the cursor inside the second commit);
//	two dead letters;
//	events 13..14 appended;
//	the record "catalog" (formats that have records).
const (
	goldenEvents    = 14
	goldenDelivered = 5
	goldenRecord    = `{"golden":true}`
)

func goldenEvent(i int) []byte {
	return []byte(fmt.Sprintf(`{"event_id":"golden-%03d","timestamp":"2026-01-02T03:04:05.000000Z","event_type":"compute.instance.exists",`+
		`"service":"nova","resource_type":"instance","resource_id":"r-%03d","project_id":"p1","action":"exists",`+
		`"attributes":{"vcpus":2},"source":{"exchange":"nova","routing_key":"notifications.info"}}`, i, i))
}

func goldenDeadLetter(i int) outbox.DeadLetter {
	return outbox.DeadLetter{
		Body:       []byte(fmt.Sprintf(`{"event_type":"compute.instance.exists","payload":{"n":%d}}`, i)),
		Exchange:   "nova",
		RoutingKey: "notifications.info",
		EventType:  "compute.instance.exists",
		Module:     "nova",
		Reason:     "trap",
		Detail:     fmt.Sprintf("golden dead letter %d", i),
		At:         time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func goldenRange(from, to int) [][]byte {
	var evs [][]byte
	for i := from; i <= to; i++ {
		evs = append(evs, goldenEvent(i))
	}
	return evs
}

// TestWriteGoldenStore writes the golden store of this build's format into
// $TALLY_OSC_WRITE_GOLDEN_OUTBOX (a directory that must not exist yet). It
// uses only the package's API, so that the same file builds against an
// earlier release to write that release's store.
func TestWriteGoldenStore(t *testing.T) {
	dir := os.Getenv(goldenEnv)
	if dir == "" {
		t.Skip(goldenEnv + " not set: no golden store to write")
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
