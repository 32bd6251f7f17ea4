//go:build !wasip1

package openstack_test

import (
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

func TestAction(t *testing.T) {
	for _, c := range []struct{ et, prefix, want string }{
		{"compute.instance.create.start", "compute.instance.", "create"},
		{"compute.instance.create.end", "compute.instance.", "create"},
		{"compute.instance.exists", "compute.instance.", "exists"},
		{"volume.create.error", "volume.", "create.error"},
		{"volume.end", "volume.", "end"},       // nothing is left to remove ".end" from
		{"volume.", "volume.", ""},             // nothing after the prefix
		{"snapshot.create.end", "volume.", ""}, // another prefix
		{"", "volume.", ""},
	} {
		if got := openstack.Action(c.et, c.prefix); got != c.want {
			t.Errorf("Action(%q, %q) = %q, want %q", c.et, c.prefix, got, c.want)
		}
	}
}

func TestUsable(t *testing.T) {
	m := func(msg *sdk.Message, out *sdk.Output) {
		e := out.Event()
		for _, k := range []string{"s", "empty", "n", "null", "b", "o", "a", "missing"} {
			if openstack.Usable(msg.Get(k)) {
				e.Str(k, "yes")
			}
		}
	}
	got, err := sdk.MapJSON(m, []byte(`{"s":"x","empty":"","n":0,"null":null,"b":true,"o":{},"a":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"events":[{"s":"yes","n":"yes"}]}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// A bulk event's id is "<message_id>:<index>", the message id unescaped.
func TestWriteHeaderSuffix(t *testing.T) {
	m := func(msg *sdk.Message, out *sdk.Output) {
		et, _ := openstack.EventType(msg)
		for i := range 2 {
			openstack.WriteHeader(msg, out.Event(), et, "neutron", "port", i)
		}
	}
	got, err := sdk.MapJSON(m, []byte(`{"message_id":"m\u002d1","event_type":"port.create.end"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"events":[` +
		`{"event_id":"m-1:0","event_type":"port.create.end","service":"neutron","resource_type":"port"},` +
		`{"event_id":"m-1:1","event_type":"port.create.end","service":"neutron","resource_type":"port"}]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestEventTypeRefusesNonString(t *testing.T) {
	for _, in := range []string{`{}`, `{"event_type":""}`, `{"event_type":42}`, `{"event_type":null}`} {
		var ok bool
		if _, err := sdk.MapJSON(func(msg *sdk.Message, _ *sdk.Output) { _, ok = openstack.EventType(msg) }, []byte(in)); err != nil {
			t.Fatal(err)
		}
		if ok {
			t.Errorf("%s: EventType ok", in)
		}
	}
}

func TestPathBuf(t *testing.T) {
	var p openstack.PathBuf
	p.SetBase("payload.networks", 3)
	if got := p.At("id"); got != "payload.networks.3.id" {
		t.Errorf("At = %q", got)
	}
	if got := p.Base(); got != "payload.networks.3" {
		t.Errorf("Base = %q", got)
	}
	p.SetBase("payload.network", -1)
	if got := p.At("tenant_id"); got != "payload.network.tenant_id" {
		t.Errorf("At = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { p.SetBase("payload.ports", 12); _ = p.At("id") }); n != 0 {
		t.Errorf("PathBuf allocates %v times per use", n)
	}
}

// The audit period is written for a periodic audit notification only, by
// WriteAuditPeriod from values looked up by the caller and by
// WritePayloadAuditPeriod from the payload.
func TestIsExistsAndAuditPeriod(t *testing.T) {
	values := func(msg *sdk.Message, out *sdk.Output) {
		et, _ := openstack.EventType(msg)
		openstack.WriteAuditPeriod(out.Event(), et, msg.Get("payload.audit_period_beginning"), msg.Get("payload.audit_period_ending"))
	}
	payload := func(msg *sdk.Message, out *sdk.Output) {
		et, _ := openstack.EventType(msg)
		openstack.WritePayloadAuditPeriod(msg, out.Event(), et)
	}
	checkMappings(t, map[string]mapping{"WriteAuditPeriod": values, "WritePayloadAuditPeriod": payload}, map[string]string{
		`{"event_type":"volume.exists","payload":{"audit_period_beginning":"2024-05-01 00:00:00","audit_period_ending":"2024-05-02T00:00:00+00:00"}}`: `{"events":[{"audit_period_beginning":"2024-05-01T00:00:00Z","audit_period_ending":"2024-05-02T00:00:00Z"}]}`,
		`{"event_type":"instance.exists","payload":{"audit_period_beginning":null,"audit_period_ending":"not a time"}}`:                               `{"events":[{}]}`,
		`{"event_type":"volume.update.end","payload":{"audit_period_beginning":"2024-05-01 00:00:00"}}`:                                               `{"events":[{}]}`,
		`{"event_type":"exists_count","payload":{"audit_period_beginning":"2024-05-01 00:00:00"}}`:                                                    `{"events":[{}]}`,
	})
}

// Start and Begin add an event with its header only for an event type that
// is a non-empty string; WriteSubject follows the header with resource_id,
// the project and user (falling back to the request context) and the action.
// Both begin the same event of the same message.
func TestStartAndWriteSubject(t *testing.T) {
	paths := openstack.Paths("payload.id", "payload.project_id", "payload.user_id")
	const pID = openstack.HeaderLen
	many := func(msg *sdk.Message, out *sdk.Output) {
		var v [openstack.HeaderLen + 3]sdk.Value
		msg.GetMany(paths, v[:])
		e, et, ok := openstack.Start(out, v[:], "cinder", "volume")
		if !ok {
			return
		}
		openstack.WriteSubject(msg, e, et, v[pID], v[pID+1], v[pID+2], "volume.")
		e.End()
	}
	oneByOne := func(msg *sdk.Message, out *sdk.Output) {
		e, et, ok := openstack.Begin(msg, out, "cinder", "volume")
		if !ok {
			return
		}
		openstack.WriteSubject(msg, e, et, msg.Get("payload.id"), msg.Get("payload.project_id"), msg.Get("payload.user_id"), "volume.")
		e.End()
	}
	checkMappings(t, map[string]mapping{"Start": many, "Begin": oneByOne}, map[string]string{
		`{"event_type":"volume.create.end","message_id":"m-1","timestamp":"2024-05-01 12:00:00","payload":{"id":"v-1","project_id":"p-1","user_id":"u-1"}}`: `{"events":[{"event_id":"m-1","timestamp":"2024-05-01T12:00:00Z","event_type":"volume.create.end","service":"cinder","resource_type":"volume","resource_id":"v-1","project_id":"p-1","user_id":"u-1","action":"create"}]}`,
		`{"event_type":"volume.delete.start","_context_project_id":"p-ctx","_context_user":"u-ctx","payload":{"id":""}}`:                                    `{"events":[{"event_type":"volume.delete.start","service":"cinder","resource_type":"volume","project_id":"p-ctx","user_id":"u-ctx","action":"delete"}]}`,
		`{"event_type":"","message_id":"m-1","payload":{"id":"v-1"}}`:                                                                                       `{"events":[]}`,
		`{"event_type":7,"message_id":"m-1","payload":{"id":"v-1"}}`:                                                                                        `{"events":[]}`,
		`{"message_id":"m-1","payload":{"id":"v-1"}}`:                                                                                                       `{"events":[]}`,
	})
}

// mapping is a mapper's function, as sdk.MapJSON runs it.
type mapping = func(*sdk.Message, *sdk.Output)

// checkMappings fails unless each of mappings (by name) maps every input of
// cases to its document.
func checkMappings(t *testing.T, mappings map[string]mapping, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		for name, m := range mappings {
			got, err := sdk.MapJSON(m, []byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("%s %s:\n got %s\nwant %s", name, in, got, want)
			}
		}
	}
}
