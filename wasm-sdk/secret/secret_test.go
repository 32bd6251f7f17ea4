package secret

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestIsName(t *testing.T) {
	secret := []string{
		"password", "auth_password", "Auth_Password", "PGPASSWORD", "passwd", "db_passwd", "key_passphrase",
		"token", "auth_token", "_context_auth_token", "X-Subject-TOKEN", "authToken", "tokens",
		"secret", "client_secret", "ClientSecret", "secret_uuid",
		"connection_info", "connectionInfo", "ConnectionInfo", "connection-info",
		"credential", "credentials", "OS_CREDENTIAL_FILE", "cookie", "Set-Cookie", "session_cookie",
		"adminPass", "DB_PWD", "pass",
		"private_key", "privateKey", "PrivateKey", "privatekey", "api_key", "apiKey", "APIKey", "SSH_KEY", "X-Api-Key",
		"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "access_key", "public_key", "encryption_key",
		"auth", "Authorization", "basic_auth", "HTTPAuth", "proxy-authorization",
		"COOKIE", "api\u212aey", // KELVIN SIGN lower-cases to k
	}
	plain := []string{
		"", "name", "instance_id", "key", "key_name", "keyName", "keys", "inner_keys", "routing_key", "routingKey",
		"sort_key", "auth_algorithm", "auth_mode", "auth_url", "author", "passage", "keyboard", "monkey",
		"event_type", "project_id", "host", "payload", "compass", "seats", "\xff", "key_über",
	}
	for _, n := range secret {
		if !IsName(n) {
			t.Errorf("%q is not taken for a credential", n)
		}
	}
	for _, n := range plain {
		if IsName(n) {
			t.Errorf("%q is taken for a credential", n)
		}
	}
}

func TestParts(t *testing.T) {
	for in, want := range map[string]string{
		"_context_auth_token": "context|auth|token",
		"X-Subject-TOKEN":     "X|Subject|TOKEN",
		"authToken":           "auth|Token",
		"HTTPAuth":            "HTTP|Auth",
		"APIKey":              "API|Key",
		"AWS_ACCESS_KEY_ID":   "AWS|ACCESS|KEY|ID",
		"oslo.message":        "oslo|message",
		"v2Key":               "v2|Key",
		"--":                  "",
	} {
		var got []string
		for s, e := nextPart(in, 0); s < e; s, e = nextPart(in, e) {
			got = append(got, in[s:e])
		}
		if g := strings.Join(got, "|"); g != want {
			t.Errorf("parts of %q = %q, want %q", in, g, want)
		}
	}
}

// isNameBefore is the rule as IsName decided it before it walked a name once
// for all fragments: each fragment searched for on its own, every rune
// lower-cased by unicode.ToLower. FuzzIsName holds IsName to it.
func isNameBefore(name string) bool {
	if name == "" {
		return false
	}
	for _, f := range fragments {
		for i := 0; i < len(name); {
			if matchFoldBefore(name[i:], f) {
				return true
			}
			_, w := utf8.DecodeRuneInString(name[i:])
			i += w
		}
	}
	return hasCredentialPart(name)
}

func matchFoldBefore(s, word string) bool {
	i := 0
	for k := 0; k < len(word); k++ {
		if i >= len(s) {
			return false
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if unicode.ToLower(r) != rune(word[k]) {
			return false
		}
		i += w
	}
	return true
}

// FuzzIsName: IsName decides every name as the rule did before its single
// walk (isNameBefore), the seeds being TestIsName's names.
func FuzzIsName(f *testing.F) {
	for _, n := range []string{"seats", "auth_password", "api\u212aey", "COOKIE", "p\xffassword", "xconnection_info",
		"Ｐassword", "pass\u0130", "tok\u212aen", "secreT", "credentiaL", "\xff\xfe", "passwd", "passphrase"} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := IsName(name), isNameBefore(name); got != want {
			t.Fatalf("IsName(%q) = %v, before %v", name, got, want)
		}
	})
}

// A guest calls IsName for every member it copies: it must not allocate.
func TestIsNameAllocatesNothing(t *testing.T) {
	names := []string{"seats", "X-Api-Key", "key_über", "AWS_SECRET_ACCESS_KEY", "HTTPAuth"}
	if n := testing.AllocsPerRun(100, func() {
		for _, s := range names {
			IsName(s)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
