package broker

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
)

func TestParseTransportURL(t *testing.T) {
	type host struct {
		addr, user, pass string
	}
	cases := []struct {
		in      string
		hosts   []host
		vhost   string
		tls     bool
		options url.Values
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []host{{"127.0.0.1:5672", "guest", "guest"}}, "/", false, nil},
		{"amqp://127.0.0.1", []host{{"127.0.0.1:5672", "guest", "guest"}}, "/", false, nil},
		{"AMQP://u:p@h", []host{{"h:5672", "u", "p"}}, "/", false, nil},
		{"amqps://u:p@rabbit.example:5671/openstack", []host{{"rabbit.example:5671", "u", "p"}}, "openstack", true, nil},
		{"amqps://u:p@rabbit.example/", []host{{"rabbit.example:5671", "u", "p"}}, "/", true, nil},
		// Raw characters in the password: the user information ends at the last '@'.
		{"amqp://user:pa/ss@host/", []host{{"host:5672", "user", "pa/ss"}}, "/", false, nil},
		{"amqp://user:pa/ss@host:5673/v", []host{{"host:5673", "user", "pa/ss"}}, "v", false, nil},
		{"amqp://user:p@ss@host/v", []host{{"host:5672", "user", "p@ss"}}, "v", false, nil},
		{"amqp://user:p:a:ss@host/", []host{{"host:5672", "user", "p:a:ss"}}, "/", false, nil},
		{"amqp://user:pa#ss@host/", []host{{"host:5672", "user", "pa#ss"}}, "/", false, nil},
		{"amqp://user:pa?ss@host/", []host{{"host:5672", "user", "pa?ss"}}, "/", false, nil},
		{"amqp://user:pa%ss@host/", []host{{"host:5672", "user", "pa%ss"}}, "/", false, nil},
		{"amqp://user:100%@host/", []host{{"host:5672", "user", "100%"}}, "/", false, nil},
		{"amqp://user:a/b@c#d?e:f@host:5672/v?heartbeat=10", []host{{"host:5672", "user", "a/b@c#d?e:f"}}, "v",
			false, url.Values{"heartbeat": {"10"}}},
		// Percent-encoding.
		{"amqp://us%40er:p%2Fa%23s%3As%40%25%2C@host/", []host{{"host:5672", "us@er", "p/a#s:s@%,"}}, "/", false, nil},
		{"rabbit://u:p%40ss@[::1]:5672/%2F", []host{{"[::1]:5672", "u", "p@ss"}}, "/", false, nil},
		// IPv6.
		{"amqp://u:p@[::1]:5672/", []host{{"[::1]:5672", "u", "p"}}, "/", false, nil},
		{"amqps://u:p@[fe80::1]/", []host{{"[fe80::1]:5671", "u", "p"}}, "/", true, nil},
		// oslo's several hosts; credentials carry over to a host without them.
		{"rabbit://u:p@h1:5672,u:p@h2:5672/vhost", []host{{"h1:5672", "u", "p"}, {"h2:5672", "u", "p"}}, "vhost", false, nil},
		{"rabbit://a:p1@h1:5672,b:p/2@h2:5673/nova", []host{{"h1:5672", "a", "p1"}, {"h2:5673", "b", "p/2"}}, "nova", false, nil},
		{"rabbit://u:p@h1,h2/", []host{{"h1:5672", "u", "p"}, {"h2:5672", "u", "p"}}, "/", false, nil},
		{"rabbit://u:p@h1:5671,u:p@h2:5671/?ssl=1", []host{{"h1:5671", "u", "p"}, {"h2:5671", "u", "p"}}, "/", true,
			url.Values{"ssl": {"1"}}},
		{"rabbit://u:p@h1,u:p@h2/?ssl=true", []host{{"h1:5671", "u", "p"}, {"h2:5671", "u", "p"}}, "/", true,
			url.Values{"ssl": {"true"}}},
		{"rabbit://u:p@h1, u:p@h2/", []host{{"h1:5672", "u", "p"}, {"h2:5672", "u", "p"}}, "/", false, nil},
		// Empty vhost, "/", %2F, a name with a slash.
		{"amqp://u:p@h", []host{{"h:5672", "u", "p"}}, "/", false, nil},
		{"amqp://u:p@h/", []host{{"h:5672", "u", "p"}}, "/", false, nil},
		{"amqp://u:p@h/%2F", []host{{"h:5672", "u", "p"}}, "/", false, nil},
		{"amqp://u:p@h/%2f", []host{{"h:5672", "u", "p"}}, "/", false, nil},
		{"amqp://u:p@h//", []host{{"h:5672", "u", "p"}}, "/", false, nil},
		{"amqp://u:p@h/a/b", []host{{"h:5672", "u", "p"}}, "a/b", false, nil},
		{"amqp://u:p@h/a%2Fb", []host{{"h:5672", "u", "p"}}, "a/b", false, nil},
		{"amqp://u:p@h/v%40x", []host{{"h:5672", "u", "p"}}, "v@x", false, nil},
		{"amqp://u:p@h?heartbeat=30&ssl=0", []host{{"h:5672", "u", "p"}}, "/", false,
			url.Values{"heartbeat": {"30"}, "ssl": {"0"}}},
		// A user without a password.
		{"amqp://u@h/", []host{{"h:5672", "u", ""}}, "/", false, nil},
	}
	for _, c := range cases {
		u, err := ParseTransportURL(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if len(u.Hosts) != len(c.hosts) {
			t.Errorf("%s: %d hosts", c.in, len(u.Hosts))
			continue
		}
		for i, h := range u.Hosts {
			if h.Addr() != c.hosts[i].addr || h.User != c.hosts[i].user || h.Password != c.hosts[i].pass {
				t.Errorf("%s: host %d = %s %q %q, want %+v", c.in, i, h.Addr(), h.User, h.Password, c.hosts[i])
			}
		}
		if u.VHost != c.vhost || u.TLS != c.tls || fmt.Sprint(u.Options) != fmt.Sprint(c.options) {
			t.Errorf("%s: vhost %q tls %v options %v", c.in, u.VHost, u.TLS, u.Options)
		}
		// The shown forms hide every password and parse back to the same hosts.
		shown := []string{u.String(), fmt.Sprintf("%v", u), fmt.Sprintf("%+v", u), fmt.Sprintf("%#v", u), redact.URL(c.in)}
		for _, ep := range u.endpoints() {
			shown = append(shown, ep.redact)
		}
		for _, s := range shown {
			for _, h := range u.Hosts {
				if len(h.Password) > 1 && h.Password != h.User && strings.Contains(s, h.Password) {
					t.Errorf("%s: password shown in %s", c.in, s)
				}
			}
		}
		back, err := ParseTransportURL(u.String())
		if err != nil || len(back.Hosts) != len(u.Hosts) || back.VHost != u.VHost || back.TLS != u.TLS {
			t.Errorf("%s: String %s parses back as %v, %v", c.in, u.String(), back, err)
			continue
		}
		for i := range back.Hosts {
			if back.Hosts[i].Addr() != u.Hosts[i].Addr() || back.Hosts[i].User != u.Hosts[i].User {
				t.Errorf("%s: String %s gives host %d %s", c.in, u.String(), i, back.Hosts[i])
			}
		}
	}
}

func TestParseTransportURLRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"user:Zq7@host", "not a URL"},
		{"http://u:Zq7@h/", `scheme "http"`},
		{"am qp://u:Zq7@h/", "not a URL"},
		{"amqp://u:Zq7@h1,u:Zq7@h2/", "rabbit://"},
		{"amqp://u:Zq7@h:99999/", "host 1: the port"},
		{"amqp://u:Zq7@h:0/", "host 1: the port"},
		{"amqp://u:Zq7@h:x/", "host 1: the port"},
		{"amqp://u:Zq7@h:/", "host 1: an empty port"},
		{"amqp://u:Zq7@/", "host 1: no host name"},
		{"amqp://u:Zq7@:5672/", "host 1: no host name"},
		{"amqp://u:Zq7@::1:5672/", "brackets"},
		{"amqp://u:Zq7@[::1/", "closing"},
		{"amqp://u:Zq7@[nothost]:5672/", "not an IP"},
		{"amqp://u:Zq7@[::1]x/", "not :port"},
		{"rabbit://u:Zq7@,h2/", "host 1: no host name"},
		{"rabbit://,u:Zq7@h2/", "host 1 is empty"},
		{"rabbit://u:Zq7@h1,/", "host 2 is empty"},
		{"rabbit://u:Zq7,Wk3@h1/", "%2C"},
		{"rabbit://u:12,34@h1/", "%2C"},
		{"amqp://u:Zq7@h/v#frag", "%23"},
		{"amqp://u:Zq7@h/v?a=%zz", "query"},
		{"amqp://u:Zq7@ho st/", "space"},
	} {
		_, err := ParseTransportURL(c.in)
		if !errors.Is(err, ErrTransportURL) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v (want %q)", c.in, err, c.want)
			continue
		}
		for _, secret := range []string{"Zq7", "Wk3", "34"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: the error quotes the password: %v", c.in, err)
			}
		}
	}
}

// An endpoint's URL is what amqp091 dials: credentials and vhost round-trip.
func TestEndpointURLs(t *testing.T) {
	eps, err := parseTransportURL("rabbit://us%40er:p/a@ss@h1:5673,h2/a%2Fb?ssl=1")
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 {
		t.Fatalf("%d endpoints", len(eps))
	}
	for i, ep := range eps {
		u, err := url.Parse(ep.url)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := u.User.Password()
		if u.Scheme != "amqps" || u.User.Username() != "us@er" || p != "p/a@ss" || u.Path != "/a/b" || !ep.tls {
			t.Errorf("endpoint %d: %s", i, ep.url)
		}
		if strings.Contains(ep.redact, "p/a@ss") || !strings.Contains(ep.redact, "us%40er:[redacted]@") {
			t.Errorf("endpoint %d shown as %s", i, ep.redact)
		}
	}
	if eps[0].host != "h1:5673" || eps[1].host != "h2:5671" || eps[0].vhost != "a/b" {
		t.Errorf("hosts %s %s vhost %q", eps[0].host, eps[1].host, eps[0].vhost)
	}
}
