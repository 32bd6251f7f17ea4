package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// Default ports of a broker host without one.
const (
	defaultPort    = 5672
	defaultTLSPort = 5671
)

// TransportURL is a parsed TRANSPORT_URL: the broker hosts in failover order,
// the virtual host, the credentials of each host and the query options.
// String shows it with every password replaced; fmt's %v and %+v use String.
type TransportURL struct {
	Scheme  string // amqp, amqps or rabbit, in lower case
	Hosts   []TransportHost
	VHost   string     // decoded; "/" when the URL names none
	TLS     bool       // amqps://, or ?ssl=1 (true, yes)
	Options url.Values // the query, as written (ssl, heartbeat, ...)
}

// TransportHost is one broker host of a TransportURL.
type TransportHost struct {
	Host     string // host name or IP address, without brackets
	Port     int
	User     string // decoded
	Password string // decoded; never shown by String
}

// Addr is host:port, brackets around an IPv6 address.
func (h TransportHost) Addr() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }

// String is user:[redacted]@host:port (user@host:port without a password).
func (h TransportHost) String() string {
	if h.Password == "" {
		return url.User(h.User).String() + "@" + h.Addr()
	}
	return url.User(h.User).String() + ":" + redact.Marker + "@" + h.Addr()
}

// GoString is String: a %#v never shows the password either. fmt is its
// caller, which a dead-code pass does not see (TestParseTransportURL prints %#v).
func (h TransportHost) GoString() string { return h.String() }

// String is the URL with every password replaced by the redaction marker,
// default ports filled in: safe for a log or an error. fmt calls it (a %v of a
// TransportURL), which a dead-code pass does not see.
func (u TransportURL) String() string {
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	for i, h := range u.Hosts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(h.String())
	}
	b.WriteString(vhostPath(u.VHost))
	if len(u.Options) > 0 {
		b.WriteString("?" + u.Options.Encode())
	}
	return b.String()
}

// GoString is String, for fmt's %#v (a caller a dead-code pass does not see).
func (u TransportURL) GoString() string { return u.String() }

// vhostPath is the path naming a virtual host: "/" + the escaped name, so the
// default vhost "/" is "/%2F". '@' is escaped too: raw, it would be taken for
// the end of a password.
func vhostPath(vhost string) string {
	return "/" + strings.ReplaceAll(url.PathEscape(vhost), "@", "%40")
}

// ParseTransportURL parses TRANSPORT_URL. Accepted forms:
//
//	amqp://user:pass@host:5672/vhost
//	amqps://user:pass@host:5671/vhost          (TLS, server certificate verified)
//	rabbit://user:pass@h1:5672,user:pass@h2:5672/vhost?ssl=1   (oslo; failover in order)
//
// The rules, shared with the URL redactor of internal/redact:
//
//   - The host list runs from "://" to the first '/', '?' or '#' after the
//     last '@' of the URL, and a host's user information ends at its last
//     '@'. A password may therefore hold '/', '?', '#', ':' and '@' raw, as
//     operators paste them into oslo configurations; the user name ends at
//     the first ':'. An '@' in the vhost or the query must be written %40.
//   - Hosts are separated by ','; a ',' in a password must be written %2C. A
//     host without credentials takes those of the host before it (oslo); one
//     before any host with credentials is refused, since it is most likely
//     the front half of a password holding a raw ','. With no credentials at
//     all, guest:guest.
//   - User names, passwords and the vhost are percent-decoded where a '%' is
//     followed by two hex digits; any other '%' is kept as it is, as oslo does.
//   - No path, "/" and "/%2F" all name the default vhost "/"; "/name" names
//     "name". A '#' after the host list is refused (write %23).
//   - Ports default to 5672, or 5671 with TLS. An IPv6 address is written in
//     brackets: [::1]:5672.
//   - Several hosts need the rabbit:// form. ?ssl=1 (true, yes) turns TLS on
//     for every host; other options are kept in Options.
//
// Errors wrap ErrTransportURL and never quote the user information: they name
// the host by its position.
func ParseTransportURL(raw string) (TransportURL, error) {
	if strings.TrimSpace(raw) == "" {
		return TransportURL{}, fmt.Errorf("%w: empty", ErrTransportURL)
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return TransportURL{}, fmt.Errorf("%w: not a URL (want amqp://, amqps:// or rabbit://)", ErrTransportURL)
	}
	u := TransportURL{Scheme: strings.ToLower(scheme)}
	switch u.Scheme {
	case "amqp", "rabbit":
	case "amqps":
		u.TLS = true
	default:
		if !isSchemeToken(scheme) {
			return TransportURL{}, fmt.Errorf("%w: not a URL (want amqp://, amqps:// or rabbit://)", ErrTransportURL)
		}
		return TransportURL{}, fmt.Errorf("%w: scheme %q is not amqp, amqps or rabbit", ErrTransportURL, scheme)
	}
	authority, tail := redact.SplitAuthority(rest)
	path, query := tail, ""
	if i := strings.IndexAny(tail, "?#"); i >= 0 {
		path, query = tail[:i], tail[i:]
	}
	if strings.Contains(query, "#") {
		return TransportURL{}, fmt.Errorf("%w: a '#' after the host list (write %%23 in a vhost)", ErrTransportURL)
	}
	if query != "" {
		vals, err := url.ParseQuery(query[1:])
		if err != nil {
			return TransportURL{}, fmt.Errorf("%w: the query does not parse", ErrTransportURL)
		}
		u.Options = vals
		if s := strings.ToLower(vals.Get("ssl")); s == "1" || s == "true" || s == "yes" {
			u.TLS = true
		}
	}
	u.VHost = "/"
	if len(path) > 1 {
		u.VHost = unescape(path[1:])
	}

	entries := strings.Split(authority, ",")
	if u.Scheme != "rabbit" && len(entries) > 1 {
		return TransportURL{}, fmt.Errorf("%w: several hosts need the rabbit:// form", ErrTransportURL)
	}
	lastWithCreds := -1
	for i, e := range entries {
		if strings.Contains(e, "@") {
			lastWithCreds = i
		}
	}
	user, pass := "guest", "guest"
	for i, e := range entries {
		n := i + 1
		e = strings.TrimSpace(e)
		if e == "" {
			return TransportURL{}, fmt.Errorf("%w: host %d is empty", ErrTransportURL, n)
		}
		if at := strings.LastIndex(e, "@"); at >= 0 {
			ui := e[:at]
			e = e[at+1:]
			uu, pp, _ := strings.Cut(ui, ":")
			user, pass = unescape(uu), unescape(pp)
		} else if i < lastWithCreds {
			return TransportURL{}, fmt.Errorf("%w: host %d has no credentials but a later one has (a ',' in a password must be written %%2C)", ErrTransportURL, n)
		}
		host, port, err := splitHostPort(e, u.TLS)
		if err != nil {
			return TransportURL{}, fmt.Errorf("%w: host %d: %w", ErrTransportURL, n, err)
		}
		u.Hosts = append(u.Hosts, TransportHost{Host: host, Port: port, User: user, Password: pass})
	}
	for i, ep := range u.endpoints() {
		if _, err := amqp.ParseURI(ep.url); err != nil {
			// amqp091's message may quote the URL: left out.
			return TransportURL{}, fmt.Errorf("%w: host %d is not a usable AMQP address", ErrTransportURL, i+1)
		}
	}
	return u, nil
}

// splitHostPort splits a host entry (credentials removed). Its errors quote
// nothing of the entry.
func splitHostPort(e string, useTLS bool) (string, int, error) {
	host, portText := e, ""
	switch {
	case strings.HasPrefix(e, "["):
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return "", 0, errors.New("an IPv6 address lacks its closing ']'")
		}
		host, portText = e[1:end], e[end+1:]
		if portText != "" {
			if portText[0] != ':' {
				return "", 0, errors.New("text after an IPv6 address that is not :port")
			}
			portText = portText[1:]
			if portText == "" {
				return "", 0, errors.New("an empty port")
			}
		}
		if net.ParseIP(host) == nil {
			return "", 0, errors.New("not an IP address between '[' and ']'")
		}
	case strings.Count(e, ":") > 1:
		return "", 0, errors.New("an IPv6 address must be written in brackets, like [::1]:5672")
	default:
		if i := strings.IndexByte(e, ':'); i >= 0 {
			host, portText = e[:i], e[i+1:]
			if portText == "" {
				return "", 0, errors.New("an empty port")
			}
		}
	}
	if host == "" {
		return "", 0, errors.New("no host name")
	}
	if strings.ContainsAny(host, " \t\r\n") {
		return "", 0, errors.New("a space in the host name")
	}
	port := defaultPort
	if useTLS {
		port = defaultTLSPort
	}
	if portText != "" {
		n, err := strconv.Atoi(portText)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, errors.New("the port is not a number between 1 and 65535")
		}
		port = n
	}
	return host, port, nil
}

// unescape decodes %XX where XX are two hex digits and keeps any other '%'
// as it is (Python's urllib unquote, which oslo uses).
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// isSchemeToken: letters, digits, '+', '-', '.', starting with a letter.
func isSchemeToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// endpoint is one broker node to dial, in failover order.
type endpoint struct {
	url      string // amqp:// or amqps:// form accepted by amqp091
	tls      bool
	host     string // host:port, for logs
	hostname string // the host alone: the server name TLS checks by default
	vhost    string
	user     string
	redact   string // the URL with the password replaced, for logs
}

// AMQPURLs are the hosts as amqp091 dials them, in failover order: amqp://
// or amqps:// (TLS), each with its own credentials and the vhost escaped.
// They hold passwords: never log them (String is the form for logs).
func (u TransportURL) AMQPURLs() []string {
	s := u.dialScheme()
	out := make([]string, 0, len(u.Hosts))
	for _, h := range u.Hosts {
		du := url.URL{Scheme: s, User: url.UserPassword(h.User, h.Password), Host: h.Addr(),
			Path: "/" + u.VHost, RawPath: vhostPath(u.VHost)}
		out = append(out, du.String())
	}
	return out
}

func (u TransportURL) dialScheme() string {
	if u.TLS {
		return "amqps"
	}
	return "amqp"
}

// endpoints turns the hosts into the endpoints to dial, in order.
func (u TransportURL) endpoints() []endpoint {
	s := u.dialScheme()
	urls := u.AMQPURLs()
	out := make([]endpoint, 0, len(u.Hosts))
	for i, h := range u.Hosts {
		out = append(out, endpoint{
			url: urls[i], tls: u.TLS, host: h.Addr(), hostname: h.Host, vhost: u.VHost, user: h.User,
			redact: s + "://" + h.String() + vhostPath(u.VHost),
		})
	}
	return out
}

// parseTransportURL turns TRANSPORT_URL into the endpoints to try in order.
func parseTransportURL(raw string) ([]endpoint, error) {
	u, err := ParseTransportURL(raw)
	if err != nil {
		return nil, err
	}
	return u.endpoints(), nil
}

// linkEndpoints is the check of a link's URL and TLS files that the
// consumer's and the control link's options share (ParseTransportURL,
// CheckTLS), and the endpoints to try in order.
func linkEndpoints(raw string, files tlsfiles.Files) ([]endpoint, error) {
	eps, err := parseTransportURL(raw)
	if err != nil {
		return nil, err
	}
	if err := CheckTLS(raw, files); err != nil {
		return nil, err
	}
	return eps, nil
}

// TLSSettings name the broker's TLS files in the hints of a refused
// handshake (tlsfiles.Files.Explain).
var TLSSettings = tlsfiles.Names{
	Peer: "broker", CA: "TRANSPORT_CA_FILE", Cert: "TRANSPORT_CERT_FILE", Key: "TRANSPORT_KEY_FILE", ServerName: "TRANSPORT_SERVER_NAME",
}

// CheckTLS checks the TLS files of a broker link against its URL: files
// set for a URL without TLS are refused (they would be ignored: TLS is
// turned on by amqps:// or ?ssl=1, as oslo's ssl option does), and every
// file set is read once. Errors wrap ErrTransportURL or tlsfiles.ErrFiles
// and quote no password and no key.
func CheckTLS(rawURL string, files tlsfiles.Files) error {
	u, err := ParseTransportURL(rawURL)
	if err != nil {
		return err
	}
	if files.IsZero() {
		return nil
	}
	if !u.TLS {
		return fmt.Errorf("%w: TLS files or a server name are set but the URL does not use TLS (write amqps://, or add ?ssl=1 to rabbit://)", ErrTransportURL)
	}
	return files.Check()
}
