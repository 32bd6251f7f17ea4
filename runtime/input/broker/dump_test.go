package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The dump against the broker: a copy through a server-named exclusive
// auto-delete queue, bound like the real queue, credentials redacted, and no
// queue left behind; the durable queue keeps its own copy.
func TestDumpAgainstBroker(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova", "openstack")
	// The collector's durable queue, bound on nova: it must keep receiving.
	ch := v.Channel(t)
	if _, err := ch.QueueDeclare(defaultQueue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(defaultQueue, "notifications.info", "nova", false, nil); err != nil {
		t.Fatal(err)
	}

	out := &testkit.SyncBuffer{}
	logs := &testkit.SyncBuffer{}
	opts := Options{TransportURL: v.URL(), Exchanges: []string{"nova", "openstack", "glance"},
		Logger: zerolog.New(logs), ProbeMin: 200 * time.Millisecond, ProbeMax: 400 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Dump(ctx, opts, out) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.WaitFor(t, 15*time.Second, "dump bound", func() bool { return strings.Contains(logs.String(), "dump bound") })
	if !strings.Contains(logs.String(), "amq.gen-") {
		t.Errorf("the dump queue is not server-named: %s", logs.String())
	}

	secrets := readTestdata(t, "secrets.json")
	v.Publish(t, "openstack", "notifications.info", envelope(t, secrets))
	v.Publish(t, "nova", "notifications.error", readTestdata(t, "wire/v2_gzip_002.body"))
	env := envelope(t, secrets)
	v.Publish(t, "nova", "notifications.warn", env[:len(env)-100])
	ids := v.osloNotify(t, "nova", 1, "volume.attach.end__ceilometer__1.json")
	v.Publish(t, "nova", "conductor", note(t, "rpc-1", "compute.instance.rpc")) // not bound: never printed

	testkit.WaitFor(t, 15*time.Second, "four lines", func() bool { return strings.Count(out.String(), "\n") >= 4 })
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dump returned %v", err)
	}
	done <- nil

	text := out.String()
	noSecrets(t, []byte(text))
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), text)
	}
	byKey := map[string]map[string]any{}
	for _, l := range lines {
		byKey[l["exchange"].(string)+" "+l["routing_key"].(string)] = l
	}
	if l := byKey["openstack notifications.info"]; l == nil || l["_context_auth_token"] != redact.Marker || l["event_type"] != "volume.attach.end" {
		t.Errorf("secrets line: %v", l)
	}
	if l := byKey["nova notifications.error"]; l == nil || l["not_json"] != true {
		t.Errorf("compressed line: %v", l)
	}
	if l := byKey["nova notifications.warn"]; l == nil || l["unparseable"] == nil {
		t.Errorf("cut line: %v", l)
	}
	if l := byKey["nova notifications.info"]; l == nil || l["message_id"] != ids[0] {
		t.Errorf("oslo line: %v", l)
	}
	// Nothing left behind; the durable queue kept its copy.
	m := regexp.MustCompile(`"queue":"(amq\.gen-[^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatal("dump queue name not logged")
	}
	testkit.WaitFor(t, 10*time.Second, "dump queue gone", func() bool {
		_, exists := v.QueueState(t, m[1])
		return !exists
	})
	if n, _ := v.QueueState(t, defaultQueue); n != 1 {
		t.Errorf("durable queue holds %d, want its 1 copy", n)
	}
}

func TestDumpNoExchange(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t)
	err := Dump(context.Background(), Options{TransportURL: v.URL(), Exchanges: []string{"nova"}, Logger: zerolog.Nop()}, &bytes.Buffer{})
	if !errors.Is(err, ErrNoExchanges) {
		t.Fatalf("got %v", err)
	}
}
