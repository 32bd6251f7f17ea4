package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// tlsFront terminates TLS with a certificate for 127.0.0.1 signed by a test CA
// and forwards the plain AMQP stream to the local broker: a real TLS handshake
// in front of the real broker. It returns the address and the CA's pool.
func tlsFront(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tally test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", brokerAddr)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { _, _ = io.Copy(b, c); b.Close() }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return ln.Addr().String(), pool
}

// TestAMQPSVerifiesTheBroker connects over amqps through a TLS front: with the
// CA that signed the broker's certificate the dump consumes; with the system
// roots only the handshake is refused and nothing is consumed.
func TestAMQPSVerifiesTheBroker(t *testing.T) {
	v := newVhost(t)
	v.DeclareExchanges(t, false, "nova")
	addr, pool := tlsFront(t)
	amqps := "amqps://guest:guest@" + addr + "/" + url.PathEscape(v.Name)

	run := func(tc *tls.Config) (string, error) {
		out, logs := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
		opts := Options{TransportURL: amqps, TLSConfig: tc, Exchanges: []string{"nova"}, Logger: zerolog.New(logs),
			DialTimeout: 5 * time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- Dump(ctx, opts, out) }()
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(logs.String(), "dump bound") && time.Now().Before(deadline) {
			select {
			case err := <-done:
				return out.String(), err
			case <-time.After(50 * time.Millisecond):
			}
		}
		v.Publish(t, "nova", "notifications.info", note(t, "tls-1", "compute.instance.exists"))
		for !strings.Contains(out.String(), "tls-1") && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		err := <-done
		return out.String(), err
	}

	out, err := run(&tls.Config{RootCAs: pool})
	if err != nil || !strings.Contains(out, `"tls-1"`) {
		t.Fatalf("amqps with the right CA: err %v, dump %q", err, out)
	}
	out, err = run(&tls.Config{})
	if err == nil || !strings.Contains(err.Error(), "certificate") || strings.Contains(out, "tls-1") {
		t.Fatalf("amqps without the CA: err %v, dump %q; want a certificate error and nothing consumed", err, out)
	}
}
