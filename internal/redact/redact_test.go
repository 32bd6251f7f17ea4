package redact

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestIsSecretName(t *testing.T) {
	secret := []string{
		"password", "auth_password", "Auth_Password", "PGPASSWORD", "passwd", "db_passwd", "key_passphrase",
		"token", "auth_token", "_context_auth_token", "X-Subject-TOKEN", "authToken", "tokens",
		"secret", "client_secret", "ClientSecret", "secret_uuid",
		"connection_info", "connectionInfo", "ConnectionInfo",
		"credential", "credentials", "OS_CREDENTIAL_FILE", "cookie", "Set-Cookie", "session_cookie",
		"adminPass", "DB_PWD", "pass",
		"private_key", "privateKey", "PrivateKey", "privatekey", "api_key", "apiKey", "APIKey", "SSH_KEY",
		"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "access_key", "public_key", "encryption_key",
		"auth", "Authorization", "basic_auth", "HTTPAuth", "proxy-authorization",
	}
	plain := []string{
		"", "name", "instance_id", "key", "key_name", "keyName", "keys", "inner_keys", "routing_key", "routingKey",
		"sort_key", "auth_algorithm", "auth_mode", "auth_url", "author", "passage", "keyboard", "monkey",
		"event_type", "project_id", "host", "payload", "compass",
	}
	for _, n := range secret {
		if !IsSecretName(n) {
			t.Errorf("%q is not taken for a credential", n)
		}
	}
	for _, n := range plain {
		if IsSecretName(n) {
			t.Errorf("%q is taken for a credential", n)
		}
	}
}

func TestParts(t *testing.T) {
	for in, want := range map[string]string{
		"_context_auth_token": "context auth token",
		"X-Subject-TOKEN":     "x subject token",
		"authToken":           "auth token",
		"HTTPAuth":            "http auth",
		"APIKey":              "api key",
		"AWS_ACCESS_KEY_ID":   "aws access key id",
		"oslo.message":        "oslo message",
		"v2Key":               "v2 key",
	} {
		if got := strings.Join(parts(in), " "); got != want {
			t.Errorf("parts(%q) = %q, want %q", in, got, want)
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
