package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// with returns validEvent with the member name set to the JSON text value
// ("" removes it).
func with(t *testing.T, name, value string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(validEvent), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, name)
	} else {
		m[name] = json.RawMessage(value)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func checkOne(t *testing.T, ev string) (map[string]any, runtime.Drops, error) {
	t.Helper()
	res, err := runtime.CheckOutput([]byte(`{"events":[`+ev+`]}`), nil, "m@1.0.0", runtime.Source{})
	if err != nil {
		return nil, res.Dropped, err
	}
	if len(res.Events) != 1 {
		t.Fatalf("%s: %d events", ev, len(res.Events))
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(res.Events[0])))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("the host wrote %s: %v", res.Events[0], err)
	}
	return m, res.Dropped, nil
}

// An event whose required member breaks the contract fails the call with
// invalid_event, naming the member; nothing of it is returned.
func TestContractRefusesRequiredMembers(t *testing.T) {
	future := time.Now().Add(49 * time.Hour).UTC().Format("2006-01-02T15:04:05Z")
	for _, c := range []struct{ member, value, want string }{
		{"project_id", "", "project_id missing"},
		{"project_id", `""`, "project_id is blank"},
		{"project_id", `"  \t"`, "project_id is not_printable"},
		{"project_id", `"   "`, "project_id is blank"},
		{"project_id", `"p\u0000"`, "project_id is not_printable"},
		{"project_id", `"p\u0085"`, "project_id is not_printable"},
		{"project_id", `"\u00a0\u3000"`, "project_id is blank"},
		{"project_id", `null`, "project_id is null"},
		{"project_id", `42`, "project_id is a JSON number, not a string"},
		{"resource_id", `"` + strings.Repeat("r", contract.MaxIDBytes+1) + `"`, "resource_id is over 255 bytes (256 as written)"},
		{"event_type", `""`, "event_type is blank"},
		{"event_id", "", "event_id missing"},
		{"action", `{}`, "action is a JSON object, not a string"},
		{"timestamp", "", "timestamp missing"},
		{"timestamp", `"yesterday at noon"`, "is not a time in"},
		{"timestamp", `"2024-05-01 12:00:00"`, "is not a time in"},
		{"timestamp", `"2024-02-30T12:00:00Z"`, "is not a time in"},
		{"timestamp", `"2024-05-01T12:00:00.1234567890Z"`, "is not a time in"},
		{"timestamp", `"0001-01-01T00:00:00Z"`, "is not a time in"},
		{"timestamp", `"1999-12-31T23:59:59.999Z"`, "is not a time in"},
		{"timestamp", `"9999-12-31T23:59:59Z"`, "is not a time in"},
		{"timestamp", `"` + future + `"`, "is not a time in"},
	} {
		ev := with(t, c.member, c.value)
		_, _, err := checkOne(t, ev)
		var me *runtime.MapError
		if !errors.As(err, &me) || me.Reason != runtime.ReasonInvalidEvent || !errors.Is(err, runtime.ErrInvalidEvent) ||
			!strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %s: %v, want invalid_event %q", c.member, c.value, err, c.want)
		}
	}
	// The edges of the window are inside it.
	for _, ts := range []string{`"2000-01-01T00:00:00Z"`, `"` + time.Now().Add(23*time.Hour).UTC().Format(time.RFC3339Nano) + `"`} {
		if _, _, err := checkOne(t, with(t, "timestamp", ts)); err != nil {
			t.Errorf("timestamp %s: %v", ts, err)
		}
	}
}

// What breaks the contract outside the required members is left out and
// counted by what it broke; the rest of the event is kept.
func TestContractDropsAttributes(t *testing.T) {
	for _, c := range []struct {
		attrs string
		want  contract.Violation
	}{
		{`{"vcpus":-1}`, contract.Negative},
		{`{"vcpus":-0}`, contract.Negative},
		{`{"vcpus":-1e999}`, contract.Negative},
		{`{"memory_mb":1e999}`, contract.NotFinite},
		{`{"memory_mb":1e18}`, contract.OutOfRange},
		{`{"vcpus":65537}`, contract.OutOfRange},
		{`{"seats":9007199254740992}`, contract.OutOfRange},
		{`{"seats":-3}`, contract.Negative},
		{`{"disk_gb":"-5"}`, contract.WrongType},
		{`{"vcpus":"4"}`, contract.WrongType},
		{`{"vcpus":true}`, contract.WrongType},
		{`{"launched_at":12}`, contract.WrongType},
		{`{"launched_at":"yesterday"}`, contract.BadTimestamp},
		{`{"host":""}`, contract.Blank},
		{`{"host":"a\u0000b"}`, contract.NotPrintable},
		{`{"host":"` + strings.Repeat("h", contract.MaxAttributeBytes+1) + `"}`, contract.TooLong},
		{`{"host":null}`, contract.Null},
		{`{"host":{"a":1}}`, contract.Nested},
		{`{"host":[1]}`, contract.Nested},
		{`{"":1}`, contract.Blank},
		{`{"a\u0001":1}`, contract.NotPrintable},
	} {
		ev := with(t, "attributes", c.attrs)
		m, drops, err := checkOne(t, ev)
		if err != nil {
			t.Errorf("%s: %v", c.attrs, err)
			continue
		}
		if a, _ := m["attributes"].(map[string]any); a == nil || len(a) != 0 {
			t.Errorf("%s: attributes %v, want {}", c.attrs, m["attributes"])
		}
		if drops[c.want] != 1 || drops.Total() != 1 {
			t.Errorf("%s: dropped %v, want one %s", c.attrs, drops, c.want)
		}
	}
	m, drops, err := checkOne(t, with(t, "attributes",
		`{"vcpus":4,"memory_mb":8192,"size_bytes":9007199254740991,"ttl":0,"ok":true,"seats":1.5,"note":"café","launched_at":"2024-04-02T08:16:10.5Z"}`))
	if err != nil || drops.Total() != 0 || len(m["attributes"].(map[string]any)) != 8 {
		t.Errorf("valid attributes: %v, dropped %v, %v", m, drops, err)
	}
	// An optional member and a member the event does not have.
	m, drops, err = checkOne(t, with(t, "user_id", `"u\u0000"`))
	if _, ok := m["user_id"]; err != nil || ok || drops[contract.NotPrintable] != 1 {
		t.Errorf("a user_id with a NUL: %v, dropped %v, %v", m, drops, err)
	}
	m, drops, err = checkOne(t, with(t, "flavor", `"x"`))
	if _, ok := m["flavor"]; err != nil || ok || drops[contract.Unknown] != 1 {
		t.Errorf("an unknown member: %v, dropped %v, %v", m, drops, err)
	}
	// Attributes that are not an object are left out; the event has {}.
	m, drops, err = checkOne(t, with(t, "attributes", `[1]`))
	if err != nil || drops[contract.Nested] != 1 || len(m["attributes"].(map[string]any)) != 0 {
		t.Errorf("attributes an array: %v, dropped %v, %v", m, drops, err)
	}
}

// Strings are written as a JSON reader decodes them; of two members of one
// name the last counts, as in Python's and Go's JSON readers.
func TestContractDecodesAndKeepsTheLast(t *testing.T) {
	ev := strings.Replace(validEvent, `"event_type":"a"`, `"event_type":"compute\u002einstance.exists"`, 1)
	res, err := runtime.CheckOutput([]byte(`{"events":[`+ev+`]}`), nil, "m@1.0.0", runtime.Source{})
	if err != nil || !strings.Contains(string(res.Events[0]), `"event_type":"compute.instance.exists"`) {
		t.Fatalf("escaped event type: %v %s", err, res.Events)
	}
	ev = strings.Replace(with(t, "attributes", `{"vcpus":1,"vcpus":2}`), `"project_id":"p1"`,
		`"project_id":"p1","project_id":"p2","\u0070roject_id":"p3"`, 1)
	m, drops, err := checkOne(t, ev)
	if err != nil {
		t.Fatal(err)
	}
	if m["project_id"] != "p3" || m["attributes"].(map[string]any)["vcpus"] != json.Number("2") || drops[contract.Duplicate] != 3 {
		t.Errorf("duplicates: %v, dropped %v, want p3, vcpus 2 and 3 duplicates", m, drops)
	}
	// Two attributes objects: the last one.
	ev = strings.Replace(validEvent, `"action":"x"`, `"attributes":{"vcpus":1},"action":"x"`, 1)
	m, drops, err = checkOne(t, ev)
	if err != nil || len(m["attributes"].(map[string]any)) != 0 || drops[contract.Duplicate] != 1 {
		t.Errorf("two attributes objects: %v, dropped %v, %v; want the last one, {}", m, drops, err)
	}
	// A value with a quote and a control escape keeps them escaped.
	m, _, err = checkOne(t, with(t, "attributes", `{"note":"a\"b\\c\u00e9"}`))
	if err != nil || m["attributes"].(map[string]any)["note"] != `a"b\cé` {
		t.Errorf("escaped attribute: %v, %v", m, err)
	}
}

// An input that names its own events (plog, the channel) gives an event
// without an id one derived from the message: the same for the same message.
func TestContractDerivesIDs(t *testing.T) {
	ev := with(t, "event_id", "")
	doc := []byte(`{"events":[` + ev + `,` + ev + `,` + with(t, "event_id", `""`) + `]}`)
	src := runtime.Source{DeriveID: []byte("the body")}
	res, err := runtime.CheckOutput(doc, nil, "m@1.0.0", src)
	if err != nil || len(res.Events) != 3 {
		t.Fatalf("%v %d", err, len(res.Events))
	}
	var ids []string
	for _, e := range res.Events {
		var m map[string]any
		_ = json.Unmarshal(e, &m)
		ids = append(ids, m["event_id"].(string))
	}
	const first = "fa8242e99f48966ca514092b4233b446" // hex of sha256("the body")[:16]
	if ids[0] != first || ids[1] != first+"-1" || ids[2] != first+"-2" {
		t.Errorf("ids %q", ids)
	}
	again, _ := runtime.CheckOutput(doc, nil, "m@1.0.0", src)
	if string(again.Events[2]) != string(res.Events[2]) {
		t.Errorf("not the same twice: %s %s", again.Events[2], res.Events[2])
	}
}

// A canonical event a plog client sends is held to the same contract.
func TestCanonicalWriter(t *testing.T) {
	var x jsonindex.Index
	var w runtime.CanonicalWriter
	if err := x.Parse([]byte(with(t, "attributes", `{"kwh":-2,"site":"a"}`))); err != nil {
		t.Fatal(err)
	}
	ev, dropped, err := w.Write(&x, runtime.Source{Exchange: "plog", RoutingKey: "udp"}, "canonical")
	if err != nil || dropped[contract.Negative] != 1 ||
		!strings.Contains(string(ev), `"attributes":{"site":"a"}`) ||
		!strings.HasSuffix(string(ev), `"source":{"exchange":"plog","routing_key":"udp","mapper":"canonical"}}`) {
		t.Errorf("%s, dropped %v, %v", ev, dropped, err)
	}
	if err := x.Parse([]byte(with(t, "timestamp", ""))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Write(&x, runtime.Source{}, "canonical"); !errors.Is(err, runtime.ErrInvalidEvent) || !strings.Contains(err.Error(), "timestamp missing") {
		t.Errorf("no timestamp: %v", err)
	}
	// With the time of receipt, an event without a timestamp is given it, in
	// the contract's form; one with a timestamp keeps its own.
	received := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.FixedZone("x", 3600))
	ev, _, err = w.Write(&x, runtime.Source{Received: received}, "canonical")
	if err != nil || !strings.Contains(string(ev), `"timestamp":"2026-03-04T04:06:07.891234Z"`) {
		t.Errorf("no timestamp, received %s: %s, %v", received, ev, err)
	}
	if err := x.Parse([]byte(validEvent)); err != nil {
		t.Fatal(err)
	}
	ev, _, err = w.Write(&x, runtime.Source{Received: received}, "canonical")
	if err != nil || strings.Contains(string(ev), "2026-03-04") || strings.Count(string(ev), `"timestamp"`) != 1 {
		t.Errorf("a timestamp of its own, received %s: %s, %v", received, ev, err)
	}
	// The next event without one, received at no known time, is invalid again.
	if err := x.Parse([]byte(with(t, "timestamp", ""))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Write(&x, runtime.Source{}, "canonical"); !errors.Is(err, runtime.ErrInvalidEvent) {
		t.Errorf("no timestamp after one received: %v", err)
	}
}

// The keys the host writes an event with read as the ledger reads the
// event's bytes, for escaped and duplicated members, a derived event_id and
// an exchange that needs escaping, through a module's output check and the
// canonical writer alike.
func TestWrittenKeysReadAsTheEvent(t *testing.T) {
	docs := []string{
		validEvent,
		with(t, "project_id", `"p\u00e9\"\\1"`),
		with(t, "event_type", `"compute\u002einstance.exists"`),
		with(t, "event_id", `""`),
		with(t, "event_id", ""),
		strings.Replace(validEvent, `{`, `{"resource_type":"first","source":{"exchange":"guest"},`, 1),
	}
	srcs := []runtime.Source{
		{Exchange: "nova", RoutingKey: "notifications.info"},
		{Exchange: "ex\"change\\\u2028é", RoutingKey: "r", DeriveID: []byte("body")},
	}
	var keyed, parsed ledger.Reader
	for _, doc := range docs {
		for _, src := range srcs {
			res, err := runtime.CheckOutput([]byte(`{"events":[`+doc+`,`+doc+`]}`), nil, "m@1.0.0", src)
			if err != nil {
				if src.DeriveID == nil {
					continue // no event_id and none derived
				}
				t.Fatalf("%s: %v", doc, err)
			}
			if len(res.Keys) != len(res.Events) {
				t.Fatalf("%d events, %d keys", len(res.Events), len(res.Keys))
			}
			var x jsonindex.Index
			if err := x.Parse([]byte(doc)); err != nil {
				t.Fatal(err)
			}
			var w runtime.CanonicalWriter
			ev, _, err := w.Write(&x, src, "canonical")
			if err != nil {
				t.Fatal(err)
			}
			evs := append(res.Events, ev)
			keys := append(res.Keys, w.Keys())
			for i, ev := range evs {
				got, want := keyed.ReadKeyed(ledger.Keyed{Bytes: ev, Keys: keys[i]}), parsed.Read(ev)
				if keys[i] == (ledger.Keys{}) || got != want {
					t.Fatalf("event %s: keys %+v read %+v, the event reads %+v", ev, keys[i], got, want)
				}
			}
		}
	}
}
