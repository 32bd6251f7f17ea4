// Package tlsfiles builds the TLS client configuration of the collector's
// two outward links, the broker (TRANSPORT_CA_FILE, TRANSPORT_CERT_FILE,
// TRANSPORT_KEY_FILE, TRANSPORT_SERVER_NAME) and the Reporting API
// (REPORTING_CA_FILE, REPORTING_CERT_FILE, REPORTING_KEY_FILE), from files:
//
//   - a CA file (PEM, one certificate or several) that, when set, is the
//     only trust anchor of the link: the system's trust store is not
//     consulted, as with oslo.messaging's ssl_ca_file;
//   - a client certificate (PEM, the chain up to but without the CA) and its
//     private key (PEM, unencrypted), presented whenever the peer asks for
//     one, set together;
//   - a server name, checked against the peer's certificate instead of the
//     host of the URL (a URL that holds an address, a certificate that names
//     a host).
//
// The peer's certificate is always verified; nothing here can turn that off.
//
// Files.Attempt reads the files each time it is called, and the links call
// it for every new connection: a certificate, key or CA replaced on disk (a
// rotation by cert-manager, kolla-ansible or a configuration management run)
// is used from the next connection on, without a restart. A file caught
// half-written fails that one connection, which the link retries.
//
// A key's content never reaches an error or a log: errors name files by
// their path.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
)

// maxFileSize is the largest CA, certificate or key file read.
const maxFileSize = 1 << 20

// Files names the TLS files of one link. The zero value is the system's
// trust store and no client certificate.
type Files struct {
	CAFile     string // trust anchors (PEM); empty: the system's trust store
	CertFile   string // client certificate (PEM); with KeyFile
	KeyFile    string // its private key (PEM)
	ServerName string // name the peer's certificate must hold; empty: the URL's host
}

// IsZero answers whether no file and no server name is set.
func (f Files) IsZero() bool { return f == Files{} }

// Check reads every file once and answers every problem in one error
// (wrapping ErrFiles), or nil when Attempt would succeed now.
func (f Files) Check() error {
	_, err := f.Attempt("")
	return err
}

// An Attempt is the TLS configuration of one connection, and what its
// handshake showed, for Explain.
type Attempt struct {
	// Config verifies the peer against CAFile (or the system's trust store)
	// and presents the client certificate when the peer asks for one.
	Config *tls.Config
	files  Files
	asked  atomic.Bool // the peer asked for a client certificate
}

// Attempt reads the files now and answers the configuration of a
// connection to host (the server name checked unless ServerName is set).
// Use it for one connection: it records what the peer asked.
func (f Files) Attempt(host string) (*Attempt, error) {
	a := &Attempt{files: f}
	cfg, err := f.config(host, &a.asked)
	if err != nil {
		return nil, err
	}
	a.Config = cfg
	return a, nil
}

func (f Files) config(host string, asked *atomic.Bool) (*tls.Config, error) {
	var problems []error
	if (f.CertFile == "") != (f.KeyFile == "") {
		problems = append(problems, errors.New("a client certificate and its key go together: set both files or neither"))
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if f.ServerName != "" {
		cfg.ServerName = f.ServerName
	}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			problems = append(problems, err)
		}
		cfg.RootCAs = pool
	}
	// Without a certificate, an empty one answers the peer's request (the
	// peer decides whether that will do); with one, it is presented whatever
	// CAs the peer names as acceptable, as OpenSSL clients do.
	pair := &tls.Certificate{}
	if f.CertFile != "" && f.KeyFile != "" {
		p, err := readPair(f.CertFile, f.KeyFile)
		if err != nil {
			problems = append(problems, err)
		}
		pair = p
	}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked.Store(true)
		return pair, nil
	}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
		}
		return nil, fmt.Errorf("%w: %s", ErrFiles, strings.Join(msgs, "; "))
	}
	return cfg, nil
}

func readPool(path string) (*x509.CertPool, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

func readPair(certPath, keyPath string) (*tls.Certificate, error) {
	cb, err := readFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	kb, err := readFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("client key: %w", err)
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		// crypto/tls's messages describe the problem, never the key.
		return nil, fmt.Errorf("client certificate %s with key %s: %w", certPath, keyPath, err)
	}
	return &pair, nil
}

// readFile reads at most maxFileSize bytes; the error names the path only.
func readFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", path, pe.Err)
		}
		return nil, err
	}
	defer func() { _ = fh.Close() }() // read only
	b, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read failed", path)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileSize)
	}
	return b, nil
}

// Explain adds to a failed handshake's error what an operator should look
// at: the CA that did not vouch for the peer, an expired certificate, a name
// the certificate does not hold, a client certificate the peer asked for.
// Other errors come back as they are.
//
// A nil Attempt (no TLS of this package's making) answers err as it is.
func (a *Attempt) Explain(err error, settings Names) error {
	if err == nil || a == nil {
		return err
	}
	f := a.files
	trust := "the system's trust store (set " + settings.CA + " for a private CA)"
	if f.CAFile != "" {
		trust = "the CA file " + f.CAFile + " (" + settings.CA + ")"
	}
	var (
		ua x509.UnknownAuthorityError
		ci x509.CertificateInvalidError
		he x509.HostnameError
		ve *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("%w: the %s's certificate is not signed by a CA in %s", err, settings.Peer, trust)
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		return fmt.Errorf("%w: the %s's certificate (or one in its chain) has expired or is not valid yet; renew it there", err, settings.Peer)
	case errors.As(err, &he):
		return fmt.Errorf("%w: set %s to a name the certificate holds", err, settings.ServerName)
	case errors.As(err, &ve):
		return fmt.Errorf("%w: the %s's certificate was refused, checked against %s", err, settings.Peer, trust)
	case a.asked.Load() && f.CertFile == "", isClientCertAlert(err):
		if f.CertFile == "" {
			return fmt.Errorf("%w: the %s asks for a client certificate: set %s and %s", err, settings.Peer, settings.Cert, settings.Key)
		}
		return fmt.Errorf("%w: the %s refused the client certificate %s (is it signed by a CA the %s trusts, and still valid?)", err, settings.Peer, f.CertFile, settings.Peer)
	}
	return err
}

// Names are what the hints of Explain call the peer ("broker") and the
// settings of the link's files.
type Names struct{ Peer, CA, Cert, Key, ServerName string }

// isClientCertAlert: the alerts a server sends when a client certificate is
// missing or refused (TLS 1.3 certificate_required; bad_certificate,
// unknown_ca, handshake_failure in TLS 1.2). crypto/tls keeps the alert's
// type to itself and shows it as "remote error: tls: <description>"; some
// clients pass that text on in an error of their own.
func isClientCertAlert(err error) bool {
	msg := err.Error()
	for _, a := range []string{"certificate required", "bad certificate", "unknown certificate authority", "handshake failure"} {
		if strings.Contains(msg, "remote error: tls: "+a) {
			return true
		}
	}
	return false
}
