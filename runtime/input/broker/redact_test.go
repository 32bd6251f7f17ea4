package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// secretValues are the values planted in testdata/secrets.json; none may
// survive a dump line.
var secretValues = []string{"SECRET-UUID-1", "PASSWORD-2", "TOKEN-3", "SECRET-4", "TOKEN-5", "PASSWORD-6"}

// envelope wraps an inner message the way oslo's messagingv2 driver does.
func envelope(t testing.TB, inner []byte) []byte {
	t.Helper()
	s, err := json.Marshal(string(inner))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`{"oslo.version": "2.0", "oslo.message": ` + string(s) + `}`)
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noSecrets fails the test for each of secretValues found in out.
func noSecrets(t testing.TB, out []byte) {
	t.Helper()
	for _, s := range secretValues {
		if bytes.Contains(out, []byte(s)) {
			t.Errorf("%s leaked: %s", s, out)
		}
	}
}

func decodeLine(t testing.TB, line []byte) map[string]any {
	t.Helper()
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("not one line: %q", line)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("line is not JSON: %v: %s", err, line)
	}
	return m
}

func TestDumpLineRedactsAtDepthAnyCase(t *testing.T) {
	inner := readTestdata(t, "secrets.json")
	for name, body := range map[string][]byte{"envelope": envelope(t, inner), "bare": inner} {
		t.Run(name, func(t *testing.T) {
			line := DumpLine(nil, "openstack", "notifications.info", body)
			noSecrets(t, line)
			m := decodeLine(t, line)
			if m["exchange"] != "openstack" || m["routing_key"] != "notifications.info" {
				t.Errorf("exchange/routing key: %v %v", m["exchange"], m["routing_key"])
			}
			if m["event_type"] != "volume.attach.end" || m["message_id"] != "0f7c4b9e-6a53-4c1c-9a8e-2d3b7f1e5a10" ||
				m["timestamp"] != "2026-12-02 10:46:03.371529" {
				t.Errorf("members lost: %s", line)
			}
			p := m["payload"].(map[string]any)
			if p["connection_info"] != redact.Marker || p["ClientSecret"] != redact.Marker {
				t.Errorf("payload members not redacted: %v", p)
			}
			if p["note"] != "keep me" || p["size"] != float64(10) {
				t.Errorf("other members changed: %v", p)
			}
			att := p["attachments"].([]any)[0].(map[string]any)
			if att["Auth_Password"] != redact.Marker || att["instance_uuid"] != "i-1" {
				t.Errorf("array member: %v", att)
			}
			deep := att["nested"].(map[string]any)["deeper"].([]any)[0].(map[string]any)
			if deep["X-Subject-TOKEN"] != redact.Marker {
				t.Errorf("deep member: %v", deep)
			}
			if m["_context_auth_token"] != redact.Marker || m["_context_project_id"] != "proj-1" {
				t.Errorf("context members: %v %v", m["_context_auth_token"], m["_context_project_id"])
			}
			// Leading members in the documented order.
			order := []string{`"exchange"`, `"routing_key"`, `"message_id"`, `"event_type"`, `"timestamp"`, `"publisher_id"`, `"priority"`, `"payload"`}
			last := -1
			for _, k := range order {
				i := bytes.Index(line, []byte(k))
				if i <= last {
					t.Fatalf("member %s out of order in %s", k, line)
				}
				last = i
			}
		})
	}
}

func TestDumpLineRealCaptures(t *testing.T) {
	// A real cinder notification with a Keystone token in its context.
	attach := readTestdata(t, "notifications/volume.attach.end__ceilometer__1.json")
	var orig map[string]any
	if err := json.Unmarshal(attach, &orig); err != nil {
		t.Fatal(err)
	}
	tok, _ := orig["_context_auth_token"].(string)
	if tok == "" {
		t.Fatal("fixture lost its token")
	}
	line := DumpLine(nil, "openstack", "notifications.info", envelope(t, attach))
	if bytes.Contains(line, []byte(tok)) {
		t.Fatalf("token leaked: %s", line)
	}
	if m := decodeLine(t, line); m["_context_auth_token"] != redact.Marker || m["event_type"] != "volume.attach.end" {
		t.Fatalf("line: %s", line)
	}

	for _, f := range []string{"wire/v2_nova_001.body", "wire/v1_nova_001.body", "wire/v2_unicode_001.body", "wire/v2_cinder_001.body"} {
		m := decodeLine(t, DumpLine(nil, "nova", "notifications.info", readTestdata(t, f)))
		if m["event_type"] == nil || m["message_id"] == nil || m["payload"] == nil || m["unparseable"] != nil {
			t.Errorf("%s: %v", f, m)
		}
	}
	// zlib-compressed body (kombu_compression=gzip): size only.
	gz := readTestdata(t, "wire/v2_gzip_002.body")
	m := decodeLine(t, DumpLine(nil, "nova", "notifications.info", gz))
	if m["size"] != float64(len(gz)) || m["not_json"] != true || len(m) != 4 {
		t.Fatalf("compressed body: %v", m)
	}
}

func TestDumpLineUnparseable(t *testing.T) {
	inner := readTestdata(t, "secrets.json")
	env := envelope(t, inner)

	cases := map[string][]byte{
		"cut envelope":   env[:len(env)-200],
		"cut bare":       inner[:len(inner)-150],
		"bad bare":       bytes.Replace(inner, []byte(`"size": 10`), []byte(`"size": 10,,`), 1),
		"cut early":      env[:300],
		"inner not JSON": []byte(`{"oslo.version": "2.0", "oslo.message": "\u0082\u00a7msgpack"}`),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			line := DumpLine(nil, "nova", "notifications.info", body)
			noSecrets(t, line)
			m := decodeLine(t, line)
			if m["size"] != float64(len(body)) {
				t.Errorf("size: %v", m["size"])
			}
			if name == "inner not JSON" {
				if m["not_json"] != true || m["unparseable"] != nil {
					t.Errorf("want size alone: %v", m)
				}
				return
			}
			u, ok := m["unparseable"].(string)
			if !ok {
				t.Fatalf("no unparseable member: %s", line)
			}
			if len(u) > unparseableCut {
				t.Errorf("unparseable is %d bytes", len(u))
			}
		})
	}

	// The cut comes after the redaction: a token beyond 512 bytes is not
	// printed, and one within is replaced.
	long := []byte(`{"a": "` + strings.Repeat("x", 600) + `", "auth_token": "TOKEN-LATE"`)
	line := DumpLine(nil, "nova", "k", long)
	if bytes.Contains(line, []byte("TOKEN-LATE")) {
		t.Fatal("late token leaked")
	}
	early := []byte(`{"Password": {"nested": "PW-EARLY", "x": [1,2]}, "b": 1, "c": `)
	line = DumpLine(nil, "nova", "k", early)
	m := decodeLine(t, line)
	if u := m["unparseable"].(string); strings.Contains(u, "PW-EARLY") || !strings.Contains(u, redact.Marker) || !strings.Contains(u, `"b": 1`) {
		t.Fatalf("early: %q", u)
	}
}

func TestDumpLineNotJSON(t *testing.T) {
	for name, body := range map[string][]byte{
		"msgpack":  {0x85, 0xaa, 'm', 'e', 's', 's', 'a', 'g', 'e', '_', 'i', 'd'},
		"zlib":     {0x78, 0x9c, 0x95, 0x54, 0x4d, 0x8f},
		"gzip":     {0x1f, 0x8b, 0x08, 0x00},
		"text":     []byte("password=hunter2"),
		"empty":    {},
		"a string": []byte(`"auth_token"`),
	} {
		m := decodeLine(t, DumpLine(nil, "nova", "notifications.info", body))
		if m["not_json"] != true || m["size"] != float64(len(body)) || len(m) != 4 {
			t.Errorf("%s: %v", name, m)
		}
	}
}

func FuzzDumpLine(f *testing.F) {
	f.Add([]byte(`{"auth_token": "T", "payload": {"x": 1}}`))
	f.Add([]byte(`{"oslo.version": "2.0", "oslo.message": "{\"password\": \"P\"}"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		line := DumpLine(nil, "e", "k", body)
		if !json.Valid(bytes.TrimSuffix(line, []byte("\n"))) {
			t.Fatalf("invalid line for %q: %s", body, line)
		}
	})
}

// A dump line reads back as a bare messaging-v1 body: the pipeline maps it to
// the same event as the delivery it was printed from (what `map` relies on).
func TestDumpLineMapsLikeTheDelivery(t *testing.T) {
	proc := newTestProcessor(t)
	body := readTestdata(t, "wire/v2_nova_001.body")
	line := DumpLine(nil, "nova", "notifications.info", body)
	direct := proc.Process(context.Background(), pipeline.Message{Body: body, Exchange: "nova", RoutingKey: "notifications.info"})
	again := proc.Process(context.Background(), pipeline.Message{Body: bytes.TrimSpace(line), Exchange: "nova", RoutingKey: "notifications.info"})
	if direct.Outcome != pipeline.Mapped || again.Outcome != pipeline.Mapped {
		t.Fatalf("outcomes %v %v", direct.Outcome, again.Outcome)
	}
	if !bytes.Equal(direct.Events[0], again.Events[0]) {
		t.Fatalf("events differ:\n%s\n%s", direct.Events[0], again.Events[0])
	}
}
