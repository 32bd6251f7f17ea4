package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// These tests run against real RabbitMQ TLS listeners: the test process's
// own nodes (testkit.RabbitMQTLS), with a CA and certificates made by the
// tests. They share the nodes and run one after the other (none is
// parallel): a test that serves another certificate puts the node's own
// back when it ends.

// tlsDump runs Dump over amqps against exchange on the node, publishes one
// notification once the dump is bound, and answers what it printed, its
// logs and its error. A dump refused at connection ends on its own; one that
// connected is stopped once the notification was printed.
func tlsDump(t *testing.T, n *testkit.TLSNode, files tlsfiles.Files, exchange string) (out, logs string, err error) {
	t.Helper()
	v := n.Vhost()
	v.DeclareExchanges(t, false, exchange)
	o, l := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	opts := Options{TransportURL: n.AMQPS(""), TLS: files, Exchanges: []string{exchange},
		Logger: zerolog.New(l), DialTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Dump(ctx, opts, o) }()
	var ended bool
	testkit.WaitFor(t, 30*time.Second, "the dump to bind or fail", func() bool {
		select {
		case err = <-done:
			ended = true
			return true
		default:
			return strings.Contains(l.String(), "dump bound")
		}
	})
	if ended {
		t.Logf("dump ended: %v", err)
		return o.String(), l.String(), err
	}
	id := "tls-" + exchange
	v.Publish(t, exchange, "notifications.info", note(t, id, "compute.instance.exists"))
	testkit.WaitFor(t, 30*time.Second, "the dump to print "+id, func() bool { return strings.Contains(o.String(), id) })
	cancel()
	return o.String(), l.String(), <-done
}

// TestTLSBrokerRightCA: with TRANSPORT_CA_FILE naming the CA that signed the
// broker's certificate, the dump connects over amqps (to an IP address the
// certificate holds) and prints what is published; no client certificate is
// needed where the listener does not demand one.
func TestTLSBrokerRightCA(t *testing.T) {
	b := testkit.RabbitMQTLS(t)
	out, logs, err := tlsDump(t, b.Optional, tlsfiles.Files{CAFile: b.CA.CAFile}, "tls-right-ca")
	if err != nil || !strings.Contains(out, `"tls-tls-right-ca"`) {
		t.Fatalf("amqps with the right CA: err %v, dump %q, logs:\n%s", err, out, logs)
	}
}

// TestTLSBrokerWrongCARefused: a CA file naming another CA makes the
// handshake fail; the error says the broker's certificate is not signed by a
// CA in that file, names the file, and nothing is consumed. The system's
// trust store is not consulted when a CA file is set, and without one the
// private CA is unknown too.
func TestTLSBrokerWrongCARefused(t *testing.T) {
	b := testkit.RabbitMQTLS(t)
	other := testkit.NewCA(t, t.TempDir(), "other")
	out, _, err := tlsDump(t, b.Optional, tlsfiles.Files{CAFile: other.CAFile}, "tls-wrong-ca")
	if err == nil {
		t.Fatalf("a broker certificate from another CA was accepted; dump %q", out)
	}
	for _, want := range []string{"certificate signed by unknown authority", "not signed by a CA in the CA file " + other.CAFile, "TRANSPORT_CA_FILE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(out, "tls-wrong-ca") {
		t.Errorf("consumed over a refused connection: %q", out)
	}
	_, _, err = tlsDump(t, b.Optional, tlsfiles.Files{}, "tls-system-store")
	if err == nil || !strings.Contains(err.Error(), "system's trust store") {
		t.Fatalf("without a CA file: %v, want the private CA refused against the system's trust store", err)
	}
}

// TestTLSBrokerExpiredCertificateRefused: the broker serving a certificate
// that expired (rotated in with RabbitMQ's PEM cache cleared) is refused
// even with the right CA, and the error says it expired.
func TestTLSBrokerExpiredCertificateRefused(t *testing.T) {
	b := testkit.RabbitMQTLS(t)
	expired := b.CA.Issue(t, "server-expired", "localhost", testkit.CertOptions{
		Hosts: []string{"127.0.0.1", "localhost"}, NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	b.Optional.SwapCert(t, expired)
	_, _, err := tlsDump(t, b.Optional, tlsfiles.Files{CAFile: b.CA.CAFile}, "tls-expired")
	if err == nil || !strings.Contains(err.Error(), "certificate has expired") || !strings.Contains(err.Error(), "renew it there") {
		t.Fatalf("an expired broker certificate: %v, want it refused as expired", err)
	}
}

// TestTLSBrokerServerName: a certificate naming a host only, reached at an
// address: refused with a hint at TRANSPORT_SERVER_NAME, accepted once the
// server name is set to the name the certificate holds.
func TestTLSBrokerServerName(t *testing.T) {
	b := testkit.RabbitMQTLS(t)
	named := b.CA.Issue(t, "server-named", "rabbitmq.tally.test", testkit.CertOptions{Hosts: []string{"rabbitmq.tally.test"}})
	b.Optional.SwapCert(t, named)
	_, _, err := tlsDump(t, b.Optional, tlsfiles.Files{CAFile: b.CA.CAFile}, "tls-no-name")
	if err == nil || !strings.Contains(err.Error(), "set TRANSPORT_SERVER_NAME") {
		t.Fatalf("a certificate without the address: %v, want a hint at TRANSPORT_SERVER_NAME", err)
	}
	out, logs, err := tlsDump(t, b.Optional, tlsfiles.Files{CAFile: b.CA.CAFile, ServerName: "rabbitmq.tally.test"}, "tls-name")
	if err != nil || !strings.Contains(out, `"tls-tls-name"`) {
		t.Fatalf("with TRANSPORT_SERVER_NAME: err %v, dump %q, logs:\n%s", err, out, logs)
	}
}

// TestTLSBrokerClientCertificateRequired: a listener with
// fail_if_no_peer_cert refuses a client without a certificate (the error
// names the two settings to set) and accepts the configured one, whose
// subject the broker shows on the connection.
func TestTLSBrokerClientCertificateRequired(t *testing.T) {
	b := testkit.RabbitMQTLS(t)
	out, _, err := tlsDump(t, b.Required, tlsfiles.Files{CAFile: b.CA.CAFile}, "tls-no-client-cert")
	if err == nil {
		t.Fatalf("connected without a client certificate; dump %q", out)
	}
	if !strings.Contains(err.Error(), "set TRANSPORT_CERT_FILE and TRANSPORT_KEY_FILE") {
		t.Errorf("error %q does not name the client certificate settings", err)
	}
	files := tlsfiles.Files{CAFile: b.CA.CAFile, CertFile: b.Client.CertFile, KeyFile: b.Client.KeyFile}
	v := b.Required.Vhost()
	v.DeclareExchanges(t, false, "tls-client-cert")
	o, l := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Dump(ctx, Options{TransportURL: b.Required.AMQPS(""), TLS: files, Exchanges: []string{"tls-client-cert"}, Logger: zerolog.New(l)}, o)
	}()
	defer func() { cancel(); <-done }()
	testkit.WaitFor(t, 30*time.Second, "the dump to bind", func() bool { return strings.Contains(l.String(), "dump bound") })
	subjects := b.Required.PeerCertSubjects(t)
	if !containsAll(subjects, "CN=tally-collector") {
		t.Fatalf("connections' client certificates %q, want the collector's", subjects)
	}
	v.Publish(t, "tls-client-cert", "notifications.info", note(t, "tls-with-cert", "compute.instance.exists"))
	testkit.WaitFor(t, 30*time.Second, "the dump to print", func() bool { return strings.Contains(o.String(), "tls-with-cert") })
	if strings.Contains(l.String(), "PRIVATE KEY") {
		t.Error("key material in the logs")
	}
}

// containsAll: every subject holds want (and there is at least one).
func containsAll(subjects []string, want string) bool {
	for _, s := range subjects {
		if !strings.Contains(s, want) {
			return false
		}
	}
	return len(subjects) > 0
}

// TestTLSBrokerRotatedFilesWithoutRestart: the consumer reads its TLS files
// at every connection. Started with the wrong CA file it is refused (logged
// with the hint) and keeps retrying; the right CA copied over the file lets
// it connect, the same Consumer, no restart. Then its client certificate and
// key are replaced on disk: after the broker closes the connection, the
// consumer connects again presenting the new certificate.
func TestTLSBrokerRotatedFilesWithoutRestart(t *testing.T) {
	b := testkit.RabbitMQTLS(t)
	dir := t.TempDir()
	other := testkit.NewCA(t, filepath.Join(dir, "other"), "other")
	files := tlsfiles.Files{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem")}
	testkit.CopyFile(t, other.CAFile, files.CAFile)
	testkit.CopyFile(t, b.Client.CertFile, files.CertFile)
	testkit.CopyFile(t, b.Client.KeyFile, files.KeyFile)

	v := b.Required.Vhost()
	v.DeclareExchanges(t, false, "tls-rotate")
	logs := &testkit.SyncBuffer{}
	opts := testOptions(&vhost{v}, logs, "tls-rotate")
	opts.TransportURL, opts.TLS, opts.Queue = b.Required.AMQPS(""), files, "tls-rotate"
	ob := openOutbox(t, t.TempDir(), 100)
	c := newConsumer(t, newTestProcessor(t), ob, opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 30*time.Second, "the wrong CA refused and logged", func() bool {
		return strings.Contains(logs.String(), "not signed by a CA in the CA file "+files.CAFile)
	})
	if r.Ready() == nil {
		t.Fatal("ready over a refused connection")
	}

	testkit.CopyFile(t, b.CA.CAFile, files.CAFile)
	testkit.WaitFor(t, 60*time.Second, "the consumer to connect with the right CA", func() bool { return r.Ready() == nil })
	v.Publish(t, "tls-rotate", "notifications.info", note(t, "tls-rotate-1", "compute.instance.exists"))
	testkit.WaitFor(t, 30*time.Second, "the notification in the outbox", func() bool { return outboxIDs(t, ob)["tls-rotate-1"] == 1 })
	if s := b.Required.PeerCertSubjects(t); !containsAll(s, "CN=tally-collector") || strings.Contains(strings.Join(s, " "), "rotated") {
		t.Fatalf("client certificates %q, want the first one", s)
	}

	rotated := b.CA.Issue(t, "client-rotated", "tally-collector-rotated", testkit.CertOptions{})
	testkit.CopyFile(t, rotated.KeyFile, files.KeyFile)
	testkit.CopyFile(t, rotated.CertFile, files.CertFile)
	b.Required.Ctl(t, "close_all_connections", "certificate rotation test")
	testkit.WaitFor(t, 60*time.Second, "the consumer to reconnect with the rotated certificate", func() bool {
		return r.Ready() == nil && containsAll(b.Required.PeerCertSubjects(t), "CN=tally-collector-rotated")
	})
	v.Publish(t, "tls-rotate", "notifications.info", note(t, "tls-rotate-2", "compute.instance.exists"))
	testkit.WaitFor(t, 30*time.Second, "the second notification in the outbox", func() bool { return outboxIDs(t, ob)["tls-rotate-2"] == 1 })
}

// TestTLSOptionsChecked: TLS files for a URL without TLS are refused, as are
// a certificate without its key and a CA file that does not exist; every
// problem is listed, and the key's content never appears.
func TestTLSOptionsChecked(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir, "check")
	client := ca.Issue(t, "client", "c", testkit.CertOptions{})
	ob := openOutbox(t, t.TempDir(), 10)
	for _, tc := range []struct {
		url   string
		files tlsfiles.Files
		want  []string
	}{
		{"amqp://u:p@h/", tlsfiles.Files{CAFile: ca.CAFile}, []string{"does not use TLS"}},
		{"rabbit://u:p@h1,u:p@h2/", tlsfiles.Files{ServerName: "h"}, []string{"does not use TLS"}},
		{"amqps://u:p@h/", tlsfiles.Files{CertFile: client.CertFile}, []string{"go together"}},
		{"rabbit://u:p@h/?ssl=1", tlsfiles.Files{CAFile: filepath.Join(dir, "missing.pem"), CertFile: client.CertFile, KeyFile: ca.CAFile},
			[]string{"missing.pem: no such file", "client certificate " + client.CertFile + " with key " + ca.CAFile}},
		{"amqps://u:p@h/", tlsfiles.Files{CAFile: client.KeyFile}, []string{"holds no PEM certificate"}},
	} {
		_, err := New(newTestProcessor(t), ob, Options{TransportURL: tc.url, Exchanges: []string{"nova"}, TLS: tc.files})
		if !errors.Is(err, ErrOptions) {
			t.Errorf("%s %+v: %v, want ErrOptions", tc.url, tc.files, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %+v: %q lacks %q", tc.url, tc.files, err, w)
			}
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("key material in %q", err)
		}
		if _, err := NewControl(ControlOptions{TransportURL: tc.url, TLS: tc.files, Replica: "r1",
			Apply: func(context.Context, Decision) error { return nil }}); err == nil || !strings.Contains(err.Error(), tc.want[0]) {
			t.Errorf("control link %s %+v: %v, want %q", tc.url, tc.files, err, tc.want[0])
		}
	}
}
