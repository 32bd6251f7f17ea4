package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func openOutbox(t *testing.T) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.Open(outbox.Options{Dir: t.TempDir(), Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ob.Close() })
	return ob
}

// deadLetter does what the consumer does with a failed message.
func deadLetter(t *testing.T, ob *outbox.Outbox, p *pipeline.Pipeline, eventType, id string) {
	t.Helper()
	b := body(eventType, id)
	r := p.Process(context.Background(), pipeline.Message{Body: b, Exchange: "test", RoutingKey: "notifications.info"})
	if r.Outcome != pipeline.Failed {
		t.Fatalf("%s: want a failure, got %+v", id, r)
	}
	err := ob.AppendDeadLetters(context.Background(), []outbox.DeadLetter{{
		Body: b, Exchange: "test", RoutingKey: "notifications.info", EventType: r.EventType,
		Module: r.Module, Reason: r.Reason, Detail: r.Err.Error(),
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeadLetterThenReplayAfterAFix(t *testing.T) {
	dir := t.TempDir()
	drop(t, dir, "echo.wasm", "echo_v1")
	_, c, p := catalogOn(t, catalog.Options{Dir: dir}, "flaky.wasm", "flaky_v1")
	ob := openOutbox(t)
	ctx := context.Background()
	for i := range 5 {
		deadLetter(t, ob, p, "flaky.create.end", fmt.Sprintf("f%d", i))
	}

	list, err := catalog.ListDeadLetters(ctx, ob, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 5 || list[0].Reason != "trap" || list[0].Module != "flaky@1.0.0" || list[0].EventType != "flaky.create.end" {
		t.Fatalf("list %+v", list)
	}
	d, err := catalog.ShowDeadLetter(ctx, ob, list[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Message), `"message_id":"f0"`) || strings.Contains(string(d.Message), "secretsecret") ||
		!strings.Contains(string(d.Message), `"_context_auth_token":"[redacted]"`) {
		t.Errorf("shown message (must be unwrapped and redacted): %s", d.Message)
	}
	if _, err := catalog.ShowDeadLetter(ctx, ob, 999); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("unknown letter: %v", err)
	}

	// Replay before the fix: nothing changes, nothing is committed.
	rep, err := catalog.Replay(ctx, ob, p, catalog.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != 5 || rep.Replayed != 0 || rep.Remaining != 5 || ob.Depth() != 0 || ob.DeadLetterCount() != 5 {
		t.Fatalf("replay before the fix: %+v, depth %d, letters %d", rep, ob.Depth(), ob.DeadLetterCount())
	}

	// The operator drops the fixed module in; it shadows, then is promoted.
	drop(t, dir, "flaky.wasm", "flaky_v2")
	reload(t, c)
	if _, err := c.Promote(ctx, "flaky"); err != nil {
		t.Fatal(err)
	}
	// One letter first, by sequence, in a batch of its own.
	rep, err = catalog.Replay(ctx, ob, p, catalog.ReplayOptions{Seqs: []uint64{list[0].Seq}})
	if err != nil || rep.Replayed != 1 || rep.Events != 1 || ob.Depth() != 1 || ob.DeadLetterCount() != 4 {
		t.Fatalf("replay one: %+v %v, depth %d, letters %d", rep, err, ob.Depth(), ob.DeadLetterCount())
	}
	rep, err = catalog.Replay(ctx, ob, p, catalog.ReplayOptions{BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != 4 || rep.Replayed != 4 || rep.Events != 4 || rep.Remaining != 0 {
		t.Errorf("replay after the fix: %+v", rep)
	}
	if ob.Depth() != 5 || ob.DeadLetterCount() != 0 {
		t.Errorf("outbox depth %d (want 5), dead letters %d (want 0)", ob.Depth(), ob.DeadLetterCount())
	}
	_, _, events, err := ob.Peek(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, e := range events {
		ev := decodeEvent(t, e)
		if ev.Variant != "fixed" || ev.Source.Mapper != "flaky@1.0.1" || ev.Source.Exchange != "test" {
			t.Errorf("replayed event %+v", ev)
		}
		ids[ev.EventID] = true
	}
	if len(ids) != 5 {
		t.Errorf("replayed event ids %v", ids)
	}
	// The ledger counts the five letters replayed, and their events pending.
	led := testkit.WholeLedger(t, ob)
	var replayed, pending int64
	for _, c := range led.Intake {
		replayed += c.Replayed
		pending += c.Pending
	}
	if replayed != 5 || pending != 5 {
		t.Errorf("ledger: %d replayed, %d pending; want 5 and 5", replayed, pending)
	}
}

func TestReplayKeepsLettersThatFailDifferently(t *testing.T) {
	dir, c, p := catalogOn(t, catalog.Options{}, "flaky.wasm", "flaky_v1")
	ob := openOutbox(t)
	ctx := context.Background()
	deadLetter(t, ob, p, "flaky.x", "f0")
	deadLetter(t, ob, p, "flaky.x", "f1")

	// The module is removed: the letters now fail as unclaimed.
	remove(t, dir, "flaky.wasm")
	reload(t, c)
	rep, err := catalog.Replay(ctx, ob, p, catalog.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != 2 || rep.Remaining != 2 || rep.Replayed != 0 || len(rep.Failures) != 2 || rep.Failures[0].Reason != pipeline.ReasonUnclaimed {
		t.Fatalf("report %+v", rep)
	}
	list, err := catalog.ListDeadLetters(ctx, ob, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Reason != pipeline.ReasonUnclaimed || list[1].Reason != pipeline.ReasonUnclaimed {
		t.Errorf("letters must stay with the new reason: %+v", list)
	}
	// Replaying again examines them once each and leaves them as they are.
	rep, err = catalog.Replay(ctx, ob, p, catalog.ReplayOptions{})
	if err != nil || rep.Examined != 2 || ob.DeadLetterCount() != 2 {
		t.Errorf("second replay %+v %v, letters %d", rep, err, ob.DeadLetterCount())
	}
}

func TestHTTPRoutes(t *testing.T) {
	dir, c, p := catalogOn(t, catalog.Options{}, "flaky.wasm", "flaky_v1")
	ob := openOutbox(t)
	ctx := context.Background()
	deadLetter(t, ob, p, "flaky.x", "f0")
	drop(t, dir, "flaky.wasm", "flaky_v2")
	reload(t, c)

	// The handler authenticates no one (the daemon puts its check in front);
	// a 401 or 403 of that check is ErrUnauthorized to the client.
	srv := httptest.NewServer(catalog.NewHandler(c, catalog.HandlerOptions{Outbox: ob, Pipeline: p}))
	defer srv.Close()
	cl := &catalog.Client{BaseURL: srv.URL}

	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := module(st, "flaky"); !ok || m.State != catalog.StateMigrating {
		t.Fatalf("status over HTTP: %+v", st.Modules)
	}
	list, err := cl.ListDeadLetters(ctx, 0, 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	d, err := cl.ShowDeadLetter(ctx, list[0].Seq)
	if err != nil || d.Reason != "trap" || strings.Contains(string(d.Message), "secretsecret") {
		t.Fatalf("show: %+v %v", d, err)
	}
	if _, err := cl.ShowDeadLetter(ctx, 12345); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("show unknown: %v", err)
	} else if n := strings.Count(err.Error(), outbox.ErrNotFound.Error()); n != 1 || !strings.Contains(err.Error(), "dead letter 12345") {
		t.Errorf("show unknown: the cause said %d times, or the letter not named: %v", n, err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mappers/flaky/promote", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("raw promote: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("raw promote: %s", resp.Status)
	}
	if _, err := cl.Promote(ctx, "flaky"); !errors.Is(err, catalog.ErrNoMigration) {
		t.Errorf("promote without migration: %v", err)
	}
	if _, err := cl.Abort(ctx, "nothing"); !errors.Is(err, catalog.ErrUnknownModule) {
		t.Errorf("abort unknown: %v", err)
	}
	rep, err := cl.Replay(ctx, catalog.ReplayOptions{})
	if err != nil || rep.Replayed != 1 || ob.Depth() != 1 || ob.DeadLetterCount() != 0 {
		t.Fatalf("replay over HTTP: %+v %v", rep, err)
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer right" {
			http.Error(w, `{"error":"wrong control token"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"dead_letters":[]}`))
	}))
	defer refusing.Close()
	if _, err := (&catalog.Client{BaseURL: refusing.URL, Token: "nope"}).ListDeadLetters(ctx, 0, 1); !errors.Is(err, catalog.ErrUnauthorized) {
		t.Errorf("a refused read: %v", err)
	}
	if _, err := (&catalog.Client{BaseURL: refusing.URL, Token: "right"}).ListDeadLetters(ctx, 0, 1); err != nil {
		t.Errorf("the token is sent on reads: %v", err)
	}
}

func TestReplayMessageHook(t *testing.T) {
	_, _, p := catalogOn(t, catalog.Options{}, "flaky.wasm", "flaky_v2")
	ob := openOutbox(t)
	ctx := context.Background()
	// A plog letter: a bare message without message_id, so without event_id.
	err := ob.AppendDeadLetters(ctx, []outbox.DeadLetter{{
		Body: []byte(`{"event_type":"flaky.x","payload":{}}`), Exchange: "plog", RoutingKey: "udp", Reason: "timeout",
	}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := catalog.Replay(ctx, ob, p, catalog.ReplayOptions{Message: func(d outbox.StoredDeadLetter) pipeline.Message {
		return pipeline.Message{Body: d.Body, Exchange: d.Exchange, RoutingKey: d.RoutingKey, DeriveID: d.Exchange == "plog"}
	}})
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	_, _, events, err := ob.Peek(ctx, 10)
	if err != nil || len(events) != 1 {
		t.Fatalf("peek: %d %v", len(events), err)
	}
	if ev := decodeEvent(t, events[0]); len(ev.EventID) != 32 || ev.Source.Exchange != "plog" {
		t.Errorf("the hook's DeriveID was not applied: %+v", ev)
	}
}

// An event the Reporting API refused goes back to the outbox as it is; the
// bytes of a damaged segment are left where they are, with their reason.
func TestReplayOfRefusedEventsAndDamagedSegments(t *testing.T) {
	_, _, p := catalogOn(t, catalog.Options{}, "flaky.wasm", "flaky_v2")
	ob := openOutbox(t)
	ctx := context.Background()
	ev := []byte(`{"event_id":"e1","event_type":"volume.create.end"}`)
	if err := ob.Append(ctx, [][]byte{ev}); err != nil {
		t.Fatal(err)
	}
	if err := ob.SetAside(ctx, 1, outbox.ReasonRefusedByAPI, "HTTP 422"); err != nil {
		t.Fatal(err)
	}
	err := ob.AppendDeadLetters(ctx, []outbox.DeadLetter{{Body: []byte{1, 2, 3}, Reason: outbox.ReasonDamagedSegment, Detail: "events 5..9"}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := catalog.Replay(ctx, ob, p, catalog.ReplayOptions{})
	if err != nil || rep.Examined != 2 || rep.Replayed != 1 || rep.Events != 1 || rep.Remaining != 1 ||
		len(rep.Failures) != 1 || rep.Failures[0].Reason != outbox.ReasonDamagedSegment {
		t.Fatalf("replay %+v %v", rep, err)
	}
	_, _, events, err := ob.Peek(ctx, 10)
	if err != nil || len(events) != 1 || string(events[0]) != string(ev) {
		t.Fatalf("outbox after replay: %q %v", events, err)
	}
	list, _ := catalog.ListDeadLetters(ctx, ob, 0, 10)
	if len(list) != 1 || list[0].Reason != outbox.ReasonDamagedSegment || list[0].Detail != "events 5..9" {
		t.Fatalf("letters left %+v", list)
	}
}

// TestShowDeadLetterRedactsJSONInStrings: credentials inside JSON held in a
// string (an envelope whose oslo.message does not parse, a payload member
// holding serialized JSON) are redacted as the dump redacts them.
func TestShowDeadLetterRedactsJSONInStrings(t *testing.T) {
	ob := openOutbox(t)
	ctx := context.Background()
	bodies := [][]byte{
		// The inner message is cut: it does not parse, the envelope does.
		[]byte(`{"oslo.version":"2.0","oslo.message":"{\"_context_auth_token\":\"tok-SECRET-1\",\"event_type\":\"compute.instance.create.end\",\"payload\":{\"a\":"}`),
		// A payload member holds JSON text with a credential in it.
		[]byte(`{"oslo.version":"2.0","oslo.message":"{\"event_type\":\"x.y\",\"payload\":{\"extra\":\"{\\\"password\\\":\\\"pw-SECRET-2\\\",\\\"n\\\":1}\"}}"}`),
		// The same without an envelope.
		[]byte(`{"event_type":"x.y","payload":{"conf":"{\"connection_info\":{\"secret_uuid\":\"SECRET-3\"}}","id":"i-1"}}`),
	}
	var dls []outbox.DeadLetter
	for _, b := range bodies {
		dls = append(dls, outbox.DeadLetter{Body: b, Exchange: "nova", RoutingKey: "notifications.info", Reason: "unparseable"})
	}
	if err := ob.AppendDeadLetters(ctx, dls); err != nil {
		t.Fatal(err)
	}
	list, err := catalog.ListDeadLetters(ctx, ob, 0, 10)
	if err != nil || len(list) != len(bodies) {
		t.Fatalf("list %v %v", list, err)
	}
	for i, l := range list {
		d, err := catalog.ShowDeadLetter(ctx, ob, l.Seq)
		if err != nil {
			t.Fatal(err)
		}
		msg := string(d.Message)
		if msg == "" || strings.Contains(msg, "SECRET") || !strings.Contains(msg, "[redacted]") {
			t.Errorf("letter %d shown as %s", i, msg)
		}
	}
}

// Purge removes dead letters by sequence range, mapper and age, together or
// alone, over HTTP too; it refuses options that select nothing explicitly.
func TestPurgeDeadLetters(t *testing.T) {
	ob := openOutbox(t)
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour).UTC()
	var letters []outbox.DeadLetter
	for i := range 10 {
		l := outbox.DeadLetter{Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Reason: "trap", Module: "nova@1.2.0"}
		if i%2 == 1 {
			l.Module = "cinder@0.3.0"
		}
		if i < 4 {
			l.At = old
		}
		letters = append(letters, l)
	}
	if err := ob.AppendDeadLetters(ctx, letters); err != nil {
		t.Fatal(err)
	}
	seqs := func() []uint64 {
		list, err := catalog.ListDeadLetters(ctx, ob, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, d := range list {
			out = append(out, d.Seq)
		}
		return out
	}
	for _, bad := range []catalog.PurgeOptions{{}, {OlderThan: "yesterday"}, {From: 5, To: 2}} {
		if _, err := catalog.PurgeDeadLetters(ctx, ob, bad); !errors.Is(err, catalog.ErrInvalidPurge) {
			t.Fatalf("purge %+v: %v", bad, err)
		}
	}
	// Older than a day and from nova: letters 1 and 3 (sequences start at 1).
	rep, err := catalog.PurgeDeadLetters(ctx, ob, catalog.PurgeOptions{Mapper: "nova", OlderThan: "24h"})
	if err != nil || rep.Purged != 2 || rep.Examined != 10 {
		t.Fatalf("purge by mapper and age: %+v %v", rep, err)
	}
	if got := fmt.Sprint(seqs()); got != "[2 4 5 6 7 8 9 10]" {
		t.Fatalf("left %s", got)
	}
	srv := httptest.NewServer(catalog.NewHandler(nil, catalog.HandlerOptions{Outbox: ob}))
	defer srv.Close()
	cl := &catalog.Client{BaseURL: srv.URL}
	rep, err = cl.Purge(ctx, catalog.PurgeOptions{From: 5, To: 8, Mapper: "cinder@0.3.0"})
	if err != nil || rep.Purged != 2 || rep.Examined != 4 {
		t.Fatalf("purge over HTTP: %+v %v", rep, err)
	}
	if got := fmt.Sprint(seqs()); got != "[2 4 5 7 9 10]" {
		t.Fatalf("left %s", got)
	}
	if _, err := cl.Purge(ctx, catalog.PurgeOptions{}); !errors.Is(err, catalog.ErrInvalidPurge) {
		t.Fatalf("empty purge over HTTP: %v", err)
	} else if n := strings.Count(err.Error(), catalog.ErrInvalidPurge.Error()); n != 1 || !strings.Contains(err.Error(), "give a sequence range") {
		t.Errorf("empty purge over HTTP: the cause said %d times, or the fix left out: %v", n, err)
	}
	if rep, err := cl.Purge(ctx, catalog.PurgeOptions{All: true}); err != nil || rep.Purged != 6 || ob.DeadLetterCount() != 0 {
		t.Fatalf("purge all: %+v %v", rep, err)
	}
}
