package broker

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// endpoint is one broker node to dial, in failover order.
type endpoint struct {
	url    string // amqp:// or amqps:// form accepted by amqp091
	tls    bool
	host   string // host:port, for logs
	vhost  string
	user   string
	redact string // the URL with the password replaced, for logs
}

// parseTransportURL turns TRANSPORT_URL into the endpoints to try in order.
//
// Accepted forms:
//
//	amqp://user:pass@host:5672/vhost
//	amqps://user:pass@host:5671/vhost          (TLS, server certificate verified)
//	rabbit://user:pass@h1:5672,user:pass@h2:5672/vhost   (oslo; failover in order)
//
// In the oslo form a host without credentials inherits those of the host before
// it, as oslo does; `?ssl=1` (or true) switches every host to TLS.
func parseTransportURL(raw string) ([]endpoint, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: empty", ErrTransportURL)
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, fmt.Errorf("%w: no scheme in %s", ErrTransportURL, redactURL(raw))
	}
	scheme = strings.ToLower(scheme)
	useTLS := false
	switch scheme {
	case "amqp", "rabbit":
	case "amqps":
		useTLS = true
	default:
		return nil, fmt.Errorf("%w: scheme %q (want amqp, amqps or rabbit)", ErrTransportURL, scheme)
	}
	netloc, path := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		netloc, path = rest[:i], rest[i:]
	}
	query := ""
	if p, q, ok := strings.Cut(path, "?"); ok {
		path, query = p, q
	}
	if query != "" {
		vals, err := url.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("%w: query: %v", ErrTransportURL, err)
		}
		if s := strings.ToLower(vals.Get("ssl")); s == "1" || s == "true" || s == "yes" {
			useTLS = true
		}
	}
	vhost := "/"
	if len(path) > 1 {
		v, err := url.PathUnescape(path[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: vhost: %v", ErrTransportURL, err)
		}
		vhost = v
	}
	hosts := strings.Split(netloc, ",")
	if scheme != "rabbit" && len(hosts) > 1 {
		return nil, fmt.Errorf("%w: several hosts need the rabbit:// form", ErrTransportURL)
	}
	var out []endpoint
	var user, pass string
	haveCreds := false
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, fmt.Errorf("%w: empty host in %s", ErrTransportURL, redactURL(raw))
		}
		if at := strings.LastIndex(h, "@"); at >= 0 {
			cred := h[:at]
			h = h[at+1:]
			u, p, _ := strings.Cut(cred, ":")
			var err error
			if user, err = url.PathUnescape(u); err != nil {
				return nil, fmt.Errorf("%w: user: %v", ErrTransportURL, err)
			}
			if pass, err = url.PathUnescape(p); err != nil {
				return nil, fmt.Errorf("%w: password is not escaped correctly", ErrTransportURL)
			}
			haveCreds = true
		}
		if !haveCreds {
			user, pass = "guest", "guest"
		}
		hostname, port := h, ""
		if hp, pp, err := net.SplitHostPort(h); err == nil {
			hostname, port = hp, pp
		}
		if hostname == "" {
			return nil, fmt.Errorf("%w: empty host name in %s", ErrTransportURL, redactURL(raw))
		}
		if port == "" {
			port = "5672"
			if useTLS {
				port = "5671"
			}
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w: port %q", ErrTransportURL, port)
		}
		s := "amqp"
		if useTLS {
			s = "amqps"
		}
		hostport := net.JoinHostPort(hostname, port)
		u := url.URL{Scheme: s, User: url.UserPassword(user, pass), Host: hostport, Path: "/" + vhost, RawPath: "/" + url.PathEscape(vhost)}
		ep := endpoint{url: u.String(), tls: useTLS, host: hostport, vhost: vhost, user: user}
		if _, err := amqp.ParseURI(ep.url); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrTransportURL, hostport, err)
		}
		ru := url.URL{Scheme: s, User: url.UserPassword(user, "xxxxx"), Host: hostport, Path: "/" + vhost, RawPath: "/" + url.PathEscape(vhost)}
		ep.redact = ru.String()
		out = append(out, ep)
	}
	return out, nil
}

// redactURL hides every password in a transport URL (any number of hosts), for
// messages about a URL that could not be parsed.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") {
			return "[redacted]"
		}
		return raw
	}
	netloc, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		netloc, tail = rest[:i], rest[i:]
	}
	hosts := strings.Split(netloc, ",")
	for i, h := range hosts {
		if at := strings.LastIndex(h, "@"); at >= 0 {
			cred := h[:at]
			u, _, hasPass := strings.Cut(cred, ":")
			if hasPass {
				hosts[i] = u + ":xxxxx@" + h[at+1:]
			}
		}
	}
	return scheme + "://" + strings.Join(hosts, ",") + tail
}
