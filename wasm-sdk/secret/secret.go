// Package secret holds the collector's one rule for names that hold
// credentials. The host applies it through internal/redact (the dump, the
// dead-letter view, the log, the fixtures' leak check) and guest modules
// apply it themselves (the channel module leaves such members out of an
// event), so both sides hide the same names. It is part of the guest SDK so
// that a mapper, which may import nothing else, can use it; it compiles for
// GOOS=wasip1 GOARCH=wasm, imports only unicode and unicode/utf8, and
// allocates nothing.
//
// # The rule
//
// IsName decides, case-insensitively, on the parts of a name (split at
// '_', '-', '.', spaces and lower-to-upper case changes, so auth_token,
// X-Auth-Token and authToken split alike):
//
//   - the name contains password, passwd, passphrase, token, secret,
//     credential, cookie or connection_info anywhere (auth_password,
//     _context_auth_token, PGPASSWORD, client_secret, Set-Cookie);
//   - a part is pass or pwd (adminPass, DB_PWD);
//   - a part is privatekey, apikey or accesskey, or is key after another part
//     (private_key, api_key, SSH_KEY, AWS_ACCESS_KEY_ID), except routing_key
//     and sort_key, which name no secret (a routing key is in every event's
//     source); key alone or first (key, key_name) is not a credential;
//   - the last part is auth or authorization (Authorization, basic_auth);
//     auth elsewhere is not (auth_algorithm, auth_url).
//
// The rule goes by parts rather than by exact names because services spell the
// same credential many ways; it errs on the side of hiding.
package secret

import (
	"unicode"
	"unicode/utf8"
)

// fragments mark a name as a credential wherever they occur in it (lower case).
var fragments = [...]string{"password", "passwd", "passphrase", "token", "secret", "credential", "cookie", "connection_info"}

// wholeParts mark a name as a credential when one of its parts is exactly one of them.
var wholeParts = [...]string{"pass", "pwd", "privatekey", "apikey", "accesskey", "connectioninfo"}

// IsName reports whether a name (a JSON member, an environment variable, a
// setting) looks like it holds a credential. The rule is in the package
// documentation. It allocates nothing.
func IsName(name string) bool {
	if name == "" {
		return false
	}
	return hasFragment(name) || hasCredentialPart(name)
}

// hasCredentialPart applies the rules on a name's parts (pass, pwd, key after
// another part, a last auth ...).
func hasCredentialPart(name string) bool {
	ps, pe := nextPart(name, 0)
	prevS, prevE := -1, -1
	for ps < pe {
		ns, ne := nextPart(name, pe)
		p, last := name[ps:pe], ns == ne
		switch {
		case isWholePart(p):
			return true
		case is(p, "connection") && !last && is(name[ns:ne], "info"):
			return true
		case is(p, "key") && prevS >= 0 && !is(name[prevS:prevE], "routing") && !is(name[prevS:prevE], "sort"):
			return true
		case (is(p, "auth") || is(p, "authorization")) && last:
			return true
		}
		prevS, prevE = ps, pe
		ps, pe = ns, ne
	}
	return false
}

func isWholePart(p string) bool {
	for _, w := range wholeParts {
		if is(p, w) {
			return true
		}
	}
	return false
}

// nextPart returns the bounds of the first part of name at or after byte i;
// start == end when there is none. Parts are runs of letters and digits,
// split where the case changes from lower (or a digit) to upper (authToken)
// and where an upper-case run ends (HTTPAuth: HTTP, Auth).
func nextPart(name string, i int) (start, end int) {
	for i < len(name) {
		r, w := utf8.DecodeRuneInString(name[i:])
		if isWordRune(r) {
			break
		}
		i += w
	}
	if i >= len(name) {
		return len(name), len(name)
	}
	start = i
	prev, w := utf8.DecodeRuneInString(name[i:])
	i += w
	for i < len(name) {
		r, w := utf8.DecodeRuneInString(name[i:])
		if !isWordRune(r) {
			break
		}
		if unicode.IsUpper(r) {
			next, _ := utf8.DecodeRuneInString(name[i+w:])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && unicode.IsLower(next)) {
				break
			}
		}
		prev = r
		i += w
	}
	return start, i
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// is reports whether part, lower-cased rune by rune, is word (lower-case
// ASCII).
func is(part, word string) bool {
	n, ok := matchFold(part, word)
	return ok && n == len(part)
}

// fragmentStarts marks the lower-case ASCII letters a fragment begins with:
// at an ASCII byte that lower-cases to none of them no fragment can begin.
var fragmentStarts = func() (m [utf8.RuneSelf]bool) {
	for _, f := range fragments {
		m[f[0]] = true
	}
	return m
}()

// hasFragment reports whether name, lower-cased rune by rune, contains one of
// the fragments. It walks name once, trying the fragments only where one can
// begin: a name is one pass over its bytes, not one per fragment.
func hasFragment(name string) bool {
	for i := 0; i < len(name); {
		if c := name[i]; c < utf8.RuneSelf {
			if fragmentStarts[lowerASCII(c)] && fragmentAt(name[i:]) {
				return true
			}
			i++
			continue
		}
		// A rune beyond ASCII may lower-case to a letter a fragment begins
		// with (U+212A KELVIN SIGN to k).
		if fragmentAt(name[i:]) {
			return true
		}
		_, w := utf8.DecodeRuneInString(name[i:])
		i += w
	}
	return false
}

// fragmentAt reports whether s, lower-cased rune by rune, begins with one of
// the fragments.
func fragmentAt(s string) bool {
	for _, f := range fragments {
		if _, ok := matchFold(s, f); ok {
			return true
		}
	}
	return false
}

// lowerASCII lower-cases an ASCII letter and leaves any other byte as it is.
func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// matchFold reports whether s begins with word (lower-case ASCII) once its
// runes are lower-cased, and how many bytes of s that prefix takes.
func matchFold(s, word string) (int, bool) {
	i := 0
	for k := 0; k < len(word); k++ {
		if i >= len(s) {
			return 0, false
		}
		if c := s[i]; c < utf8.RuneSelf {
			// ASCII, the usual name: what unicode.ToLower would answer.
			if lowerASCII(c) != word[k] {
				return 0, false
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if unicode.ToLower(r) != rune(word[k]) {
			return 0, false
		}
		i += w
	}
	return i, true
}
