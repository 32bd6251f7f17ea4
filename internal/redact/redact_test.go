package redact

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/secret"
)

// The rule itself is tested in wasm-sdk/secret; IsSecretName is that rule.
func TestIsSecretNameIsTheSharedRule(t *testing.T) {
	for _, n := range []string{"api_key", "cookie", "Authorization", "auth_password", "routing_key", "key_name"} {
		if IsSecretName(n) != secret.IsName(n) {
			t.Errorf("%q: IsSecretName %v, secret.IsName %v", n, IsSecretName(n), secret.IsName(n))
		}
	}
}

func TestJSONRedactsAtAnyDepthAndInStrings(t *testing.T) {
	in := []byte(`{"a":{"b":[{"api_key":"K1","x":1}]},"Cookie":"C2","s":"{\"password\":\"P3\",\"ok\":2}",` +
		`"routing_key":"notifications.info","key_name":"mykey","cut":"{\"token\":\"T4\",\"rest\":[1,"}`)
	out := JSON(nil, in)
	if !json.Valid(out) {
		t.Fatalf("invalid: %s", out)
	}
	for _, s := range []string{"K1", "C2", "P3", "T4"} {
		if bytes.Contains(out, []byte(s)) {
			t.Errorf("%s survived: %s", s, out)
		}
	}
	for _, s := range []string{`"x":1`, `\"ok\":2`, `"routing_key":"notifications.info"`, `"key_name":"mykey"`, `"Cookie":"[redacted]"`} {
		if !bytes.Contains(out, []byte(s)) {
			t.Errorf("%s missing: %s", s, out)
		}
	}
}

func TestJSONUnchangedWithoutSecrets(t *testing.T) {
	in := []byte(`{"a": [1, 2, {"b": "c"}], "s": "{\"d\": 1}", "n": null}`)
	if out := JSON(nil, in); !bytes.Equal(out, in) {
		t.Errorf("changed:\n%s\n%s", in, out)
	}
}

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/":         "amqp://guest:[redacted]@127.0.0.1:5672/",
		"amqps://u@h/":                               "amqps://u@h/",
		"amqp://h:5672/v":                            "amqp://h:5672/v",
		"rabbit://a:p1@h1:5672,b:p2@h2:5672/v?ssl=1": "rabbit://a:[redacted]@h1:5672,b:[redacted]@h2:5672/v?ssl=1",
		"rabbit://a:p1@h1,h2/":                       "rabbit://a:[redacted]@h1,h2/",
		"amqp://u:pa/ss@host/":                       "amqp://u:[redacted]@host/",
		"amqp://u:pa#s?s@host:5672/v":                "amqp://u:[redacted]@host:5672/v",
		"amqp://u:p@a@ss@[::1]:5672/%2F":             "amqp://u:[redacted]@[::1]:5672/%2F",
		"rabbit://u:pa,ss@h1/":                       "rabbit://[redacted],ss@h1/",
		"https://u:p@example.org/path":               "https://u:[redacted]@example.org/path",
		"https://example.org/path":                   "https://example.org/path",
		"u:p@host":                                   Marker,
		"not a url":                                  "not a url",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnv(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"HOME", "/root", "/root"},
		{"DB_PASSWORD", "hunter2", Marker},
		{"DB_PASSWORD", "", ""},
		{"SSH_KEY", "k2", Marker},
		{"TRANSPORT", "rabbit://nova:s3cret@h1:5672,nova:s3cret@h2:5672/", Marker},
		{"T2", "amqp://u:pa/ss@h/", Marker},
		{"PLAIN_URL", "https://example.org/x", "https://example.org/x"},
	} {
		if got := Env(c.name, c.value); got != c.want {
			t.Errorf("Env(%s, %s) = %q, want %q", c.name, c.value, got, c.want)
		}
	}
}

func TestRedactEscapedNames(t *testing.T) {
	// Names spelled with escapes are compared after unescaping.
	in := []byte(`{"auth_\u0074oken": "T1", "pass\u0057ORD": {"a": 1}, "ok": "v", "s": "{\"token\": \"T2\"}"}`)
	out := JSON(nil, in)
	if !json.Valid(out) {
		t.Fatalf("invalid: %s", out)
	}
	for _, s := range []string{"T1", `"a"`, "T2"} {
		if bytes.Contains(out, []byte(s)) {
			t.Errorf("%s survived: %s", s, out)
		}
	}
	if !bytes.Contains(out, []byte(`"ok": "v"`)) {
		t.Errorf("other member changed: %s", out)
	}
}

func TestEnvelopeTextReadsCutEnvelopes(t *testing.T) {
	for _, c := range []struct {
		body, want string
		ok         bool
	}{
		{`{"oslo.version": "2.0", "oslo.message": "{\"event_type\": \"a\"}"}`, `{"event_type": "a"}`, true},
		{`{"oslo.message" : "{\"payload\": {\"password\": \"P\", \"x\": [1,`, `{"payload": {"password": "P", "x": [1,`, true},
		{`{"oslo.message": "{\"s\": \"caf\u00e9\\u", `, `{"s": "café\u`, true},
		{`{"oslo.message": {"event_type": "a"}}`, "", false},
		{`{"oslo.message"`, "", false},
		{`{"event_type": "a", "payload": {`, "", false},
	} {
		got, ok := EnvelopeText([]byte(c.body))
		if ok != c.ok || got != c.want {
			t.Errorf("EnvelopeText(%s) = %q, %v; want %q, %v", c.body, got, ok, c.want, c.ok)
		}
	}
}
