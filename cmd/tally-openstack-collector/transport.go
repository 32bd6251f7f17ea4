package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// checkTransportURL accepts amqp://, amqps:// and oslo's rabbit:// with one or
// more comma-separated user:pass@host:port. It never quotes the URL back, which
// may carry a password.
func checkTransportURL(raw string) error {
	if raw == "" {
		return errors.New("must not be empty")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return errors.New("not a URL (want amqp://, amqps:// or rabbit://)")
	}
	switch strings.ToLower(scheme) {
	case "amqp", "amqps", "rabbit":
	default:
		return fmt.Errorf("scheme %q is not amqp, amqps or rabbit", scheme)
	}
	hosts, _, _ := splitHosts(rest)
	hosts, _, _ = strings.Cut(hosts, "?")
	if strings.Contains(hosts, ",") && strings.ToLower(scheme) != "rabbit" {
		return errors.New("several hosts need the rabbit:// form")
	}
	for _, h := range strings.Split(hosts, ",") {
		if i := strings.LastIndex(h, "@"); i >= 0 {
			h = h[i+1:]
		}
		if h == "" {
			return errors.New("a host is missing")
		}
		if strings.Contains(h, ":") {
			host, port, err := net.SplitHostPort(h)
			if err != nil || host == "" {
				return errors.New("a host is not host or host:port")
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return errors.New("a port is not a number between 1 and 65535")
			}
		}
	}
	return nil
}

// splitHosts splits what follows "scheme://" into the host list and the rest.
// The host list ends at the first slash after the last '@', so a slash in a
// password does not end it early.
func splitHosts(rest string) (hosts, tail string, hasTail bool) {
	from := max(strings.LastIndex(rest, "@"), 0)
	i := strings.Index(rest[from:], "/")
	if i < 0 {
		return rest, "", false
	}
	return rest[:from+i], rest[from+i+1:], true
}
