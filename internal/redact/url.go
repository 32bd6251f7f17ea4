package redact

import (
	"regexp"
	"strings"
)

// URL hides the password of every user:password@ in a URL, with any number
// of comma-separated hosts (oslo's rabbit://u:p@h1,u:p@h2/vhost). It never
// fails: it is meant for URLs that may not parse.
//
// The user information of a host ends at its last '@', and the host list
// runs to the first '/', '?' or '#' after the last '@' of the URL, so a
// password holding a raw '/', '#', ':' or '@' is hidden whole (the transport
// URL parser of runtime/input/broker splits the same way). A host entry
// without '@' that comes before one with it is hidden whole too: it is most
// likely the start of a password holding a raw ','. Text without "://" that
// holds an '@' is hidden whole.
func URL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") {
			return Marker
		}
		return raw
	}
	netloc, tail := SplitAuthority(rest)
	entries := strings.Split(netloc, ",")
	lastWithAt := -1
	for i, e := range entries {
		if strings.Contains(e, "@") {
			lastWithAt = i
		}
	}
	for i, e := range entries {
		at := strings.LastIndex(e, "@")
		switch {
		case at < 0 && i < lastWithAt:
			entries[i] = Marker
		case at >= 0:
			if user, _, hasPass := strings.Cut(e[:at], ":"); hasPass {
				entries[i] = user + ":" + Marker + e[at:]
			}
		}
	}
	return scheme + "://" + strings.Join(entries, ",") + tail
}

// SplitAuthority splits what follows "scheme://" into the authority (user
// information and hosts) and the rest (path, query, fragment, with its
// leading '/', '?' or '#'). The authority runs to the first '/', '?' or '#'
// after the last '@', so those characters may appear raw in a password; an
// '@' in the path or the query must then be written %40.
func SplitAuthority(rest string) (authority, tail string) {
	from := max(strings.LastIndex(rest, "@"), 0)
	if i := strings.IndexAny(rest[from:], "/?#"); i >= 0 {
		return rest[:from+i], rest[from+i:]
	}
	return rest, ""
}

// urlWithUserinfo matches a URL carrying user information (user:pass@host),
// anywhere in a text, including oslo's multi-host transport URLs.
var urlWithUserinfo = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s]*@`)

// HasURLCredentials reports whether text holds a URL with user information.
func HasURLCredentials(text string) bool { return urlWithUserinfo.MatchString(text) }

// Env returns the value of an environment variable as it may be shown:
// Marker when the name is a secret name or the value holds a URL with user
// information, the value otherwise.
func Env(name, value string) string {
	if value != "" && (IsSecretName(name) || HasURLCredentials(value)) {
		return Marker
	}
	return value
}
