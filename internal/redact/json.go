package redact

import (
	"bytes"
	"encoding/json"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// JSON copies src to dst, replacing the value of every member whose name is
// a secret name (IsSecretName) with Marker, at any depth. It does not need valid
// JSON: it treats any string followed by a colon as a member name, and when
// the value after such a name is cut off, the rest of the input is dropped.
// This makes it usable on bodies that fail to parse. Escaped member names are
// unescaped before the comparison. A string value that itself holds JSON (an
// oslo envelope's oslo.message, cut or whole) is redacted the same way.
func JSON(dst, src []byte) []byte {
	return redactDepth(dst, src, 0)
}

const maxEmbedDepth = 4

func redactDepth(dst, src []byte, depth int) []byte {
	i := 0
	for i < len(src) {
		c := src[i]
		if c != '"' {
			dst = append(dst, c)
			i++
			continue
		}
		end := skipString(src, i)
		str := src[i:end]
		i = end
		j := skipSpace(src, i)
		if j >= len(src) || src[j] != ':' {
			dst = appendValueString(dst, str, depth)
			continue
		}
		dst = append(dst, str...)
		if !IsSecretName(UnquoteLenient(str)) {
			continue
		}
		// A member name: copy the colon, replace the value.
		dst = append(dst, src[i:j+1]...)
		dst = append(dst, `"`+Marker+`"`...)
		i = skipValue(src, skipSpace(src, j+1))
	}
	return dst
}

// appendValueString copies a string token; when its content is JSON text
// with a secret member in it, the content is redacted and quoted again.
func appendValueString(dst, tok []byte, depth int) []byte {
	if depth >= maxEmbedDepth || len(tok) < 3 {
		return append(dst, tok...)
	}
	content := UnquoteLenient(tok)
	k := skipSpace([]byte(content), 0)
	if k >= len(content) || (content[k] != '{' && content[k] != '[') {
		return append(dst, tok...)
	}
	red := redactDepth(nil, []byte(content), depth+1)
	if string(red) == content {
		return append(dst, tok...)
	}
	q, _ := json.Marshal(string(red))
	return append(dst, q...)
}

// UnquoteLenient decodes a JSON string token (with its opening quote), which
// may lack its closing quote or hold a malformed escape (the raw character is
// kept then, without its backslash): the content of a string in a body that
// was cut. The decoding is jsonstr's (Unescape with KeepChar).
func UnquoteLenient(tok []byte) string {
	if len(tok) > 0 && tok[0] == '"' {
		tok = tok[1:]
	}
	// The content ends at the first quote no backslash escapes, as
	// skipString reads it.
	for j := 0; j < len(tok); j++ {
		if tok[j] == '\\' {
			j++
		} else if tok[j] == '"' {
			tok = tok[:j]
			break
		}
	}
	out, _ := jsonstr.Unescape(make([]byte, 0, len(tok)), tok, jsonstr.KeepChar)
	return string(out)
}

// EnvelopeText finds the member "oslo.message" in a body that does not parse
// (cut short, or broken elsewhere) and returns the content of its string,
// itself possibly cut, decoded by UnquoteLenient. ok is false when the body
// has no such member or its value is not a string.
func EnvelopeText(body []byte) (text string, ok bool) {
	key := []byte(`"oslo.message"`)
	i := bytes.Index(body, key)
	if i < 0 {
		return "", false
	}
	j := skipSpace(body, i+len(key))
	if j >= len(body) || body[j] != ':' {
		return "", false
	}
	j = skipSpace(body, j+1)
	if j >= len(body) || body[j] != '"' {
		return "", false
	}
	return UnquoteLenient(body[j:skipString(body, j)]), true
}

// skipString returns the index just past the string starting at src[i] ('"'),
// or len(src) when it is not terminated.
func skipString(src []byte, i int) int {
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(src)
}

func skipSpace(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the value starting at src[i]; an
// unbalanced or cut value runs to the end of src.
func skipValue(src []byte, i int) int {
	if i >= len(src) {
		return i
	}
	switch src[i] {
	case '"':
		return skipString(src, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(src); j++ {
			switch src[j] {
			case '"':
				j = skipString(src, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(src)
	default:
		j := i
		for j < len(src) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(src[j])) {
			j++
		}
		return j
	}
}
