package broker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseTransportURL(t *testing.T) {
	cases := []struct {
		in    string
		hosts []string
		vhost string
		tls   bool
		user  string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []string{"127.0.0.1:5672"}, "/", false, "guest"},
		{"amqps://u:p@rabbit.example:5671/openstack", []string{"rabbit.example:5671"}, "openstack", true, "u"},
		{"amqps://u:p@rabbit.example/", []string{"rabbit.example:5671"}, "/", true, "u"},
		{"rabbit://u:p@h1:5672,u:p@h2:5673/nova", []string{"h1:5672", "h2:5673"}, "nova", false, "u"},
		{"rabbit://u:p@h1,h2/", []string{"h1:5672", "h2:5672"}, "/", false, "u"},
		{"rabbit://u:p@h1:5671,u:p@h2:5671/?ssl=1", []string{"h1:5671", "h2:5671"}, "/", true, "u"},
		{"rabbit://u:p%40ss@[::1]:5672/%2F", []string{"[::1]:5672"}, "/", false, "u"},
	}
	for _, c := range cases {
		eps, err := parseTransportURL(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if len(eps) != len(c.hosts) {
			t.Errorf("%s: %d endpoints", c.in, len(eps))
			continue
		}
		for i, ep := range eps {
			if ep.host != c.hosts[i] || ep.vhost != c.vhost || ep.tls != c.tls || ep.user != c.user {
				t.Errorf("%s: endpoint %d = %+v", c.in, i, ep)
			}
			if strings.Contains(ep.redact, ":p@") || strings.Contains(ep.redact, "p%40ss") {
				t.Errorf("%s: password in %s", c.in, ep.redact)
			}
		}
	}
	for _, bad := range []string{"", "http://h/", "amqp://u:p@h1,u:p@h2/", "amqp://u:p@h:99999/", "rabbit://u:p@,h2/"} {
		if _, err := parseTransportURL(bad); !errors.Is(err, ErrTransportURL) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	got := redactURL("rabbit://nova:s3cr3t@h1:5672,nova:0th3r@h2:5672/v?x=1")
	if strings.Contains(got, "s3cr3t") || strings.Contains(got, "0th3r") || !strings.Contains(got, "nova:xxxxx@h1:5672") {
		t.Fatalf("got %s", got)
	}
}

func TestBackoffCappedWithJitter(t *testing.T) {
	b := backoff{min: time.Second, max: 60 * time.Second}
	var got []time.Duration
	for i := 0; i < 8; i++ {
		got = append(got, b.next())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("probe schedule %v", got)
		}
	}
	j := backoff{min: time.Second, max: 4 * time.Second, jitter: true}
	for i := 0; i < 50; i++ {
		d := j.next()
		if d < time.Second/2 || d > 4*time.Second {
			t.Fatalf("jittered delay %v out of range", d)
		}
	}
}

// oslo's multi-host form: the first host refuses, the second is used.
func TestFailoverToSecondHost(t *testing.T) {
	v := newVhost(t)
	v.declareExchanges(t, false, "nova")
	logs := &syncBuf{}
	opts := testOptions(v, logs, "nova")
	opts.TransportURL = "rabbit://guest:guest@127.0.0.1:1,guest:guest@" + brokerAddr + "/" + v.name
	c, err := New(newTestProcessor(t), openOutbox(t, t.TempDir(), 10), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := startConsumer(t, c)
	waitFor(t, 15*time.Second, "ready through the second host", func() bool { return r.Ready() == nil })
	if !strings.Contains(logs.String(), "127.0.0.1:1") || !strings.Contains(logs.String(), "guest:xxxxx@") {
		t.Errorf("failover not logged with a redacted url: %s", logs.String())
	}
}
