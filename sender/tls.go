package sender

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// TLSSettings name the Reporting API's TLS files in the hints of a refused
// handshake (tlsfiles.Attempt.Explain).
var TLSSettings = tlsfiles.Names{
	Peer: "Reporting API", CA: "REPORTING_CA_FILE", Cert: "REPORTING_CERT_FILE", Key: "REPORTING_KEY_FILE",
	ServerName: "REPORTING_URL's host",
}

// CheckTLS checks the TLS files against the Reporting API URL: files set
// for an http URL are refused (they would be ignored), and every file set is
// read once. Errors wrap ErrInvalidURL or tlsfiles.ErrFiles and hold no key.
func CheckTLS(rawURL string, files tlsfiles.Files) error {
	if files.IsZero() {
		return nil
	}
	if files.ServerName != "" {
		return fmt.Errorf("%w: the Reporting API's certificate is checked for the URL's host; no other server name is taken", ErrInvalidURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" {
		return fmt.Errorf("%w: TLS files are set but the URL is not https", ErrInvalidURL)
	}
	return files.Check()
}

// tlsClient is the HTTP client of the TLS files as they were last read. The
// files are looked at (their size and modification time) before every POST;
// when one changed, a new client is made from them and the old one's idle
// connections closed, so a rotated CA, certificate or key is used from the
// next POST on, without a restart. A proxy from the environment is honoured
// as before (the files configure the TLS inside the tunnel too).
type tlsClient struct {
	files   tlsfiles.Files
	host    string
	stamp   string // the files' sizes and modification times when read
	client  *http.Client
	attempt *tlsfiles.Attempt
}

// stampOf describes the files' current state; a file that cannot be looked
// at is part of the description (reading it will say why).
func stampOf(f tlsfiles.Files) string {
	var b strings.Builder
	for _, p := range []string{f.CAFile, f.CertFile, f.KeyFile} {
		if p == "" {
			b.WriteString("-;")
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(&b, "%s:error;", p)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// get answers the client for the files as they are now, reading them again
// when they changed since the last call. On a read error the client made
// before (if any) stays in use and the error is returned for the log.
func (c *tlsClient) get(base func() *http.Client) (*http.Client, *tlsfiles.Attempt, error) {
	stamp := stampOf(c.files)
	if c.client != nil && stamp == c.stamp {
		return c.client, c.attempt, nil
	}
	a, err := c.files.Attempt(c.host)
	if err != nil {
		if c.client != nil {
			return c.client, c.attempt, err
		}
		return nil, nil, err
	}
	hc := base()
	tr := hc.Transport.(*http.Transport)
	tr.TLSClientConfig = a.Config
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
	c.client, c.attempt, c.stamp = hc, a, stamp
	return hc, a, nil
}
