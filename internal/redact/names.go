package redact

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Marker replaces every hidden value: a credential-named member, a URL's
// password, a secret setting.
const Marker = "[redacted]"

// fragments mark a name as a credential wherever they occur in it (lower case).
var fragments = [...]string{"password", "passwd", "passphrase", "token", "secret", "credential", "cookie", "connection_info"}

// wholeParts mark a name as a credential when one of its parts is exactly one of them.
var wholeParts = map[string]bool{
	"pass": true, "pwd": true, "privatekey": true, "apikey": true, "accesskey": true, "connectioninfo": true,
}

// keyNotSecret are the parts before "key" that make an ordinary name of it.
var keyNotSecret = map[string]bool{"routing": true, "sort": true}

// IsSecretName reports whether a name (a JSON member, an environment
// variable, a setting) looks like it holds a credential. The rule is in the
// package documentation.
func IsSecretName(name string) bool {
	if name == "" {
		return false
	}
	l := strings.ToLower(name)
	for _, f := range fragments {
		if strings.Contains(l, f) {
			return true
		}
	}
	ps := parts(name)
	for i, p := range ps {
		switch {
		case wholeParts[p]:
			return true
		case p == "connection" && i+1 < len(ps) && ps[i+1] == "info":
			return true
		case p == "key" && i > 0 && !keyNotSecret[ps[i-1]]:
			return true
		case (p == "auth" || p == "authorization") && i == len(ps)-1:
			return true
		}
	}
	return false
}

// parts splits a name into lower-case parts at every character that is not a
// letter or a digit and where the case changes from lower to upper (authToken)
// or an upper-case run ends (HTTPAuth: http, auth).
func parts(name string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, strings.ToLower(cur.String()))
			cur.Reset()
		}
	}
	var prev rune
	for i, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush()
			prev = 0
			continue
		}
		if unicode.IsUpper(r) && prev != 0 {
			next, _ := utf8.DecodeRuneInString(name[i+utf8.RuneLen(r):])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && unicode.IsLower(next)) {
				flush()
			}
		}
		cur.WriteRune(r)
		prev = r
	}
	flush()
	return out
}
