package sender_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// tlsAPI is the reference Reporting API serving https on loopback with a
// certificate for 127.0.0.1 signed by a CA made here; with clientCA it
// demands a client certificate signed by that CA.
type tlsAPI struct {
	*env
	url string
	ca  *testkit.CA
}

func newTLSAPI(t *testing.T, clientCA bool) *tlsAPI {
	t.Helper()
	e := newEnv(t)
	ca := testkit.NewCA(t, t.TempDir(), "reporting")
	cert := ca.Issue(t, "api", "127.0.0.1", testkit.CertOptions{Hosts: []string{"127.0.0.1"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := server.TLS{CertFile: cert.CertFile, KeyFile: cert.KeyFile}
	if clientCA {
		opts.ClientCAFile = ca.CAFile
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln, opts) }()
	t.Cleanup(func() { cancel(); <-done })
	return &tlsAPI{env: e, url: "https://" + ln.Addr().String(), ca: ca}
}

// run starts the sender's loop until the test ends; it answers its logs
// and a function that stops it earlier.
func (a *tlsAPI) run(t *testing.T, files tlsfiles.Files) (*testkit.SyncBuffer, func()) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	s, err := sender.New(a.ob, sender.Options{URL: a.url, Token: token, TLS: files, Logger: zerolog.New(logs),
		BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, IdleInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return logs, stop
}

// TestTLSReportingRightCA: with REPORTING_CA_FILE naming the private CA that
// signed the API's certificate, the events are delivered over https and the
// outbox drains.
func TestTLSReportingRightCA(t *testing.T) {
	a := newTLSAPI(t, false)
	a.append(t, 0, 20, 10)
	a.run(t, tlsfiles.Files{CAFile: a.ca.CAFile})
	testkit.WaitFor(t, 30*time.Second, "the outbox to drain", func() bool { return a.ob.Depth() == 0 })
	if st := a.stats(t); st.Accepted != 20 || st.ClientCerts[""] == 0 {
		t.Fatalf("stats %+v, want 20 accepted, without a client certificate", st)
	}
}

// TestTLSReportingWrongCAKeepsEvents: a CA file naming another CA: every
// POST fails at the handshake, the log says the API's certificate is not
// signed by a CA in that file, and the events stay in the outbox. The right
// CA copied over the file is taken by the same sender, without a restart,
// and the events are delivered.
func TestTLSReportingWrongCAKeepsEvents(t *testing.T) {
	a := newTLSAPI(t, false)
	a.append(t, 0, 20, 10)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	testkit.CopyFile(t, testkit.NewCA(t, t.TempDir(), "other").CAFile, caFile)
	logs, _ := a.run(t, tlsfiles.Files{CAFile: caFile})
	want := "the Reporting API's certificate is not signed by a CA in the CA file " + caFile + " (REPORTING_CA_FILE)"
	testkit.WaitFor(t, 30*time.Second, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), want) && strings.Contains(logs.String(), "delivery failed; events kept")
	})
	if d := a.ob.Depth(); d != 20 {
		t.Fatalf("outbox depth %d after refused handshakes, want 20", d)
	}
	if st := a.stats(t); st.Accepted != 0 {
		t.Fatalf("delivered through a refused handshake: %+v", st)
	}

	testkit.CopyFile(t, a.ca.CAFile, caFile)
	testkit.WaitFor(t, 30*time.Second, "the outbox to drain with the right CA", func() bool { return a.ob.Depth() == 0 })
	if st := a.stats(t); st.Accepted != 20 {
		t.Fatalf("stats %+v, want 20 accepted", st)
	}
}

// TestTLSReportingClientCertificate: an API that demands a client
// certificate refuses a sender without one (the log names the two settings
// to set; the events stay), and takes the configured one, whose subject it
// records. A rotated certificate is presented from the next connection on.
func TestTLSReportingClientCertificate(t *testing.T) {
	a := newTLSAPI(t, true)
	a.append(t, 0, 10, 10)
	logs, stop := a.run(t, tlsfiles.Files{CAFile: a.ca.CAFile})
	testkit.WaitFor(t, 30*time.Second, "the missing client certificate logged", func() bool {
		return strings.Contains(logs.String(), "the Reporting API asks for a client certificate: set REPORTING_CERT_FILE and REPORTING_KEY_FILE")
	})
	if d := a.ob.Depth(); d != 10 {
		t.Fatalf("outbox depth %d without a client certificate, want 10", d)
	}
	stop()

	dir := t.TempDir()
	client := a.ca.Issue(t, "client", "tally-collector", testkit.CertOptions{})
	files := tlsfiles.Files{CAFile: a.ca.CAFile, CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem")}
	testkit.CopyFile(t, client.CertFile, files.CertFile)
	testkit.CopyFile(t, client.KeyFile, files.KeyFile)
	logs2, _ := a.run(t, files)
	testkit.WaitFor(t, 30*time.Second, "delivery with the client certificate", func() bool { return a.ob.Depth() == 0 })
	if n := subjects(a.stats(t), "CN=tally-collector,"); n == 0 {
		t.Fatalf("the API saw no request with the client certificate: %+v", a.stats(t).ClientCerts)
	}

	rotated := a.ca.Issue(t, "client-rotated", "tally-collector-rotated", testkit.CertOptions{})
	testkit.CopyFile(t, rotated.KeyFile, files.KeyFile)
	testkit.CopyFile(t, rotated.CertFile, files.CertFile)
	a.append(t, 10, 10, 10)
	testkit.WaitFor(t, 30*time.Second, "delivery with the rotated certificate", func() bool {
		return a.ob.Depth() == 0 && subjects(a.stats(t), "CN=tally-collector-rotated,") > 0
	})
	for _, l := range []string{logs.String(), logs2.String()} {
		if strings.Contains(l, "PRIVATE KEY") {
			t.Fatal("key material in the logs")
		}
	}
}

// TestTLSReportingForeignClientCertificate: a client certificate from a CA
// the API does not trust is refused; the log says the API refused that
// certificate, and the events stay.
func TestTLSReportingForeignClientCertificate(t *testing.T) {
	a := newTLSAPI(t, true)
	a.append(t, 0, 5, 10)
	foreign := testkit.NewCA(t, t.TempDir(), "foreign").Issue(t, "client", "stranger", testkit.CertOptions{})
	logs, _ := a.run(t, tlsfiles.Files{CAFile: a.ca.CAFile, CertFile: foreign.CertFile, KeyFile: foreign.KeyFile})
	testkit.WaitFor(t, 30*time.Second, "the refused client certificate logged", func() bool {
		return strings.Contains(logs.String(), "the Reporting API refused the client certificate "+foreign.CertFile)
	})
	if d := a.ob.Depth(); d != 5 {
		t.Fatalf("outbox depth %d, want 5", d)
	}
}

// subjects counts the requests whose client certificate subject holds part.
func subjects(st server.Stats, part string) int64 {
	var n int64
	for s, c := range st.ClientCerts {
		if strings.Contains(s+",", part) {
			n += c
		}
	}
	return n
}

// TestTLSReportingOptionsChecked: files for an http URL, a certificate
// without its key, a missing CA file and a server name are refused by New,
// naming what is wrong and never the key's content.
func TestTLSReportingOptionsChecked(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir, "check")
	client := ca.Issue(t, "client", "c", testkit.CertOptions{})
	for _, tc := range []struct {
		url   string
		files tlsfiles.Files
		want  string
	}{
		{"http://127.0.0.1:1", tlsfiles.Files{CAFile: ca.CAFile}, "not https"},
		{"https://h", tlsfiles.Files{KeyFile: client.KeyFile}, "go together"},
		{"https://h", tlsfiles.Files{CAFile: filepath.Join(dir, "missing.pem")}, "missing.pem: no such file"},
		{"https://h", tlsfiles.Files{CertFile: client.CertFile, KeyFile: ca.CAFile}, "with key " + ca.CAFile},
		{"https://h", tlsfiles.Files{ServerName: "x"}, "server name"},
	} {
		_, err := sender.New(e.ob, sender.Options{URL: tc.url, Token: token, Insecure: true, TLS: tc.files})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: %v, want %q", tc.url, tc.files, err, tc.want)
			continue
		}
		if !errors.Is(err, sender.ErrInvalidURL) && !errors.Is(err, tlsfiles.ErrFiles) {
			t.Errorf("%s %+v: %v wraps neither ErrInvalidURL nor tlsfiles.ErrFiles", tc.url, tc.files, err)
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("key material in %q", err)
		}
	}
}
