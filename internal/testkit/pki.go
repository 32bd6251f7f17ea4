package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// A private certificate authority for the TLS tests, made with crypto/x509:
// the kind kolla-ansible and OpenStack-Helm deploy, with server and client
// certificates signed by it. Every file is PEM, the keys unencrypted (as
// RabbitMQ and the collector read them), mode 0600.

// CA is a test certificate authority. Its certificate is written to CAFile.
type CA struct {
	Name   string
	CAFile string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
}

// Cert is a certificate signed by a CA and its key, each in a file.
type Cert struct {
	CertFile, KeyFile string
	Subject           string // the common name
	NotAfter          time.Time
}

var pkiSerial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(time.Now().UnixNano() + pkiSerial.Add(1)) }

// NewCA makes a CA named name, its certificate in dir/<name>-ca.pem (dir is
// created when missing), valid from an hour ago for a day.
func NewCA(tb testing.TB, dir, name string) *CA {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name, Organization: []string{"tally tests"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{Name: name, CAFile: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, dir: dir}
	writePEM(tb, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// CertOptions shape a certificate made by Issue.
type CertOptions struct {
	// Hosts are the DNS names and IP addresses of a server certificate;
	// none makes a client certificate.
	Hosts []string
	// NotBefore and NotAfter: default an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Issue makes a certificate for the common name cn signed by the CA, in
// <dir>/<name>.pem and <dir>/<name>-key.pem.
func (ca *CA) Issue(tb testing.TB, name, cn string, o CertOptions) Cert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn, Organization: []string{"tally tests"}},
		NotBefore: o.NotBefore, NotAfter: o.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(o.Hosts) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		for _, h := range o.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	c := Cert{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem"),
		Subject: cn, NotAfter: o.NotAfter}
	writePEM(tb, c.CertFile, "CERTIFICATE", der)
	writePEM(tb, c.KeyFile, "PRIVATE KEY", kder)
	return c
}

// Pool is a certificate pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// CopyFile copies src over dst through a temporary file and a rename, the
// way a rotation tool replaces a certificate.
func CopyFile(tb testing.TB, src, dst string) {
	tb.Helper()
	b := ReadFile(tb, src)
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		tb.Fatal(err)
	}
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
