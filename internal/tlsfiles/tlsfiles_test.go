package tlsfiles

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestAttemptReadsTheFilesEachTime: every Attempt reads the files as they
// are now, so a replaced CA is trusted by the next connection.
func TestAttemptReadsTheFilesEachTime(t *testing.T) {
	dir := t.TempDir()
	a, b := testkit.NewCA(t, dir, "a"), testkit.NewCA(t, dir, "b")
	caFile := filepath.Join(dir, "ca.pem")
	testkit.CopyFile(t, a.CAFile, caFile)
	leaf := b.Issue(t, "leaf", "127.0.0.1", testkit.CertOptions{Hosts: []string{"127.0.0.1"}})
	verify := func() error {
		at, err := Files{CAFile: caFile}.Attempt("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cert := certOf(t, leaf.CertFile)
		_, err = cert.Verify(x509.VerifyOptions{Roots: at.Config.RootCAs, DNSName: at.Config.ServerName})
		return err
	}
	if err := verify(); err == nil {
		t.Fatal("a certificate of CA b verified against CA a")
	}
	testkit.CopyFile(t, b.CAFile, caFile)
	if err := verify(); err != nil {
		t.Fatalf("after the CA file was replaced: %v", err)
	}
}

func certOf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	at, err := Files{CertFile: path, KeyFile: strings.TrimSuffix(path, ".pem") + "-key.pem"}.Attempt("")
	if err != nil {
		t.Fatal(err)
	}
	c, err := at.Config.GetClientCertificate(nil)
	if err != nil || len(c.Certificate) == 0 {
		t.Fatalf("client certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestFileLimit: a file larger than maxFileSize is refused, naming it.
func TestFileLimit(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir, "limit")
	pem, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	atLimit := filepath.Join(dir, "at-limit.pem")
	padded := append(append([]byte{}, pem...), []byte(strings.Repeat("#", maxFileSize-len(pem)))...)
	if err := os.WriteFile(atLimit, padded, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (Files{CAFile: atLimit}).Check(); err != nil {
		t.Fatalf("a file of exactly %d bytes: %v", maxFileSize, err)
	}
	over := filepath.Join(dir, "over.pem")
	if err := os.WriteFile(over, append(padded, '#'), 0o600); err != nil {
		t.Fatal(err)
	}
	err = (Files{CAFile: over}).Check()
	if !errors.Is(err, ErrFiles) || !strings.Contains(err.Error(), over+" is larger than") {
		t.Fatalf("a file of %d bytes: %v", maxFileSize+1, err)
	}
}

// TestProblemsNameFilesNotContents: every problem at once, each naming its
// file; what a key holds never appears, even where a key file stands in for
// a certificate.
func TestProblemsNameFilesNotContents(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir, "p")
	c := ca.Issue(t, "c", "c", testkit.CertOptions{})
	key, _ := os.ReadFile(c.KeyFile)
	err := Files{CAFile: c.KeyFile, CertFile: c.KeyFile, KeyFile: c.KeyFile}.Check()
	if err == nil {
		t.Fatal("a key file taken for a CA and a certificate")
	}
	for _, want := range []string{"CA file " + c.KeyFile + " holds no PEM certificate", "client certificate " + c.KeyFile} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	for _, line := range strings.Split(string(key), "\n") {
		if line != "" && strings.Contains(err.Error(), line) {
			t.Errorf("key content %q in %q", line, err)
		}
	}
	if err := (Files{KeyFile: c.KeyFile}).Check(); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("a key without its certificate: %v", err)
	}
	if err := (Files{CAFile: filepath.Join(dir, "none.pem")}).Check(); err == nil || !strings.Contains(err.Error(), "none.pem: no such file") {
		t.Errorf("a missing file: %v", err)
	}
}
