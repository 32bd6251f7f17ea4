package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// goldenStores are the stores earlier releases wrote (testdata/README.md),
// oldest first. Every later build must open each of them and deliver its
// events: a store is never removed from this list, and a new format adds its
// own.
var goldenStores = []struct {
	dir     string
	records bool // the format had records
}{
	{"testdata/format-v1", false},
	{"testdata/format-v1-segments", false}, // segments under 's', written by b4c4e75         // one key per event, written by 4ce8cf3
	{"testdata/format-v2-unmarked", true},  // segments, before the format marker, written by b5d2cd3
	{"testdata/format-v2", true},           // segments with the marker, written by TestWriteGoldenStore
}

// TestGoldenStores opens a copy of each golden store with this build (which
// migrates an older format at Open), reads back its dead letters and records,
// and delivers its events with the real sender to the reference Reporting API:
// exactly the events the store held undelivered, in order, none lost and
// none of the delivered ones sent again. A reopen then finds the store in
// this build's format, empty of events, its dead letters kept.
func TestGoldenStores(t *testing.T) {
	for _, g := range goldenStores {
		t.Run(filepath.Base(g.dir), func(t *testing.T) {
			dir := testkit.CopyDir(t, g.dir) // Open writes to it
			o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
			if err != nil {
				t.Fatalf("open %s: %v", g.dir, err)
			}
			defer func() { o.Close() }()
			if d := o.Depth(); d != goldenEvents-goldenDelivered {
				t.Fatalf("depth %d, want %d", d, goldenEvents-goldenDelivered)
			}
			checkGoldenDeadLetters(t, o)
			rec, err := o.LoadRecord("catalog")
			switch {
			case err != nil:
				t.Fatal(err)
			case g.records && string(rec) != goldenRecord:
				t.Fatalf("record %q, want %q", rec, goldenRecord)
			case !g.records && rec != nil:
				t.Fatalf("record %q in a format without records", rec)
			}

			srv, err := server.New(server.Options{Token: "golden", DataDir: t.TempDir(), Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv)
			defer func() { ts.Close(); srv.Close() }()
			s, err := sender.New(o, sender.Options{URL: ts.URL, Token: "golden", Insecure: true, Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := goldenDelivered + 1; i <= goldenEvents; i++ {
				want = append(want, fmt.Sprintf("golden-%03d", i))
			}
			if got := storedIDs(t, ts.URL); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
			if st, err := srv.Stats(); err != nil || st.Duplicates != 0 || st.Rejected != 0 {
				t.Fatalf("stats %+v %v", st, err)
			}
			if o.Depth() != 0 {
				t.Fatalf("depth %d after delivery", o.Depth())
			}

			o.Close()
			o, err = outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if o.Depth() != 0 {
				t.Fatalf("depth %d after reopen", o.Depth())
			}
			checkGoldenDeadLetters(t, o)
			// New events continue the sequence of the old ones.
			if err := o.Append(ctx, [][]byte{goldenEvent(goldenEvents + 1)}); err != nil {
				t.Fatal(err)
			}
			first, _, evs, err := o.Peek(ctx, 10)
			if err != nil || first != goldenEvents+1 || len(evs) != 1 || !bytes.Equal(evs[0], goldenEvent(goldenEvents+1)) {
				t.Fatalf("after reopen: first %d, %d events, %v", first, len(evs), err)
			}
		})
	}
}

func checkGoldenDeadLetters(t *testing.T, o *outbox.Outbox) {
	t.Helper()
	dls, err := o.ListDeadLetters(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dls))
	}
	for i, d := range dls {
		want := goldenDeadLetter(i + 1)
		if d.Seq != uint64(i+1) || !bytes.Equal(d.Body, want.Body) || d.Reason != want.Reason || d.Detail != want.Detail ||
			d.Exchange != want.Exchange || d.RoutingKey != want.RoutingKey || d.EventType != want.EventType ||
			d.Module != want.Module || !d.At.Equal(want.At) {
			t.Fatalf("dead letter %d: %+v, want %+v", i+1, d, want)
		}
	}
}

// storedIDs lists the event_id of every event the reference API stored, in
// the order it stored them.
func storedIDs(t *testing.T, url string) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/api/v1/events?limit=1000", nil)
	req.Header.Set("Authorization", "Bearer golden")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var page struct {
		Events []struct {
			EventID string `json:"event_id"`
		} `json:"events"`
		More bool `json:"more"`
	}
	if err := json.Unmarshal(b, &page); err != nil || page.More {
		t.Fatalf("listing: %v, more %v: %s", err, page.More, b)
	}
	var ids []string
	for _, e := range page.Events {
		ids = append(ids, e.EventID)
	}
	return ids
}
