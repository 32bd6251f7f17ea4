package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The encoder reproduces oslo's bytes: decoding a captured body and encoding
// it again gives the capture back exactly.
func TestEnvelopeMatchesCaptures(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.body")
	if len(files) < 3 {
		t.Fatal("captures missing")
	}
	for _, f := range files {
		body := testkit.ReadFile(t, f)
		var outer struct {
			Message string `json:"oslo.message"`
		}
		if err := json.Unmarshal(body, &outer); err != nil {
			t.Fatal(err)
		}
		in, err := parseOrdered([]byte(outer.Message))
		if err != nil {
			t.Fatal(err)
		}
		if got := envelope(in); !bytes.Equal(got, body) {
			t.Errorf("%s: encoding differs\n got %.300s\nwant %.300s", f, got, body)
		}
	}
}

func TestInnerShape(t *testing.T) {
	note, err := parseOrdered([]byte(`{"event_type": "image.upload", "priority": "INFO", "payload": {"b": 1, "a": "\u00e9"}, "_context_project_id": "p", "message_id": "m"}`))
	if err != nil {
		t.Fatal(err)
	}
	msg := inner(note, "id-1", "images.host", "image.upload", "info")
	var names []string
	for _, m := range msg.members {
		names = append(names, m.name)
	}
	want := []string{"message_id", "publisher_id", "event_type", "priority", "payload", "timestamp", "_unique_id", "_context_project_id"}
	if len(names) != len(want) {
		t.Fatalf("members %v", names)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("members %v, want %v", names, want)
		}
	}
	body := string(envelope(msg))
	if !regexp.MustCompile(`\\"payload\\": \{\\"b\\": 1, \\"a\\": \\"\\\\u00e9\\"\}`).MatchString(body) {
		t.Errorf("payload not kept in order/escaped: %s", body)
	}
	if !regexp.MustCompile(`\\"priority\\": \\"INFO\\"`).MatchString(body) {
		t.Errorf("priority not upper case: %s", body)
	}
}

func TestOsloTimestamp(t *testing.T) {
	ts := time.Date(2026, 12, 2, 10, 46, 3, 371529000, time.UTC)
	if got := osloTimestamp(ts); got != "2026-12-02 10:46:03.371529" {
		t.Errorf("got %s", got)
	}
	if got := osloTimestamp(ts.Truncate(time.Second)); got != "2026-12-02 10:46:03" {
		t.Errorf("got %s", got)
	}
}

func TestAMQPURL(t *testing.T) {
	for in, want := range map[string]string{
		"rabbit://u:p@h1:5672,u:p@h2:5672/v1":   "amqp://u:p@h1:5672/v1",
		"rabbit://guest:guest@127.0.0.1:5672/":  "amqp://guest:guest@127.0.0.1:5672/%2F",
		"amqp://g:g@h/":                         "amqp://g:g@h:5672/%2F",
		"rabbit://u:p%2Cq@h1,h2/v?ssl=1":        "amqps://u:p,q@h1:5671/v",
		"rabbit://u:pa/ss@[::1]:5673/%2Fnested": "amqp://u:pa%2Fss@[::1]:5673/%2Fnested",
	} {
		got, err := amqpURL(in)
		if err != nil || got != want {
			t.Errorf("%s: %s %v", in, got, err)
		}
	}
}
