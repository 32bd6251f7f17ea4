package tokenfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
)

func write(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestReadLimitsAndShape(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tok")
	write(t, p, "  abc-123\n", 0o600)
	tok, fi, err := tokenfile.Read(p)
	if err != nil || tok != "abc-123" || tokenfile.Exposed(fi) {
		t.Fatalf("read: %q %v exposed=%v", tok, err, fi != nil && tokenfile.Exposed(fi))
	}
	write(t, p, strings.Repeat("x", tokenfile.MaxSize+1), 0o600)
	if _, _, err := tokenfile.Read(p); !errors.Is(err, tokenfile.ErrTooLarge) {
		t.Errorf("a file over the limit: %v", err)
	}
	write(t, p, "line-one\nline-two\n", 0o600)
	if _, _, err := tokenfile.Read(p); !errors.Is(err, tokenfile.ErrMalformed) || strings.Contains(err.Error(), "line-one") {
		t.Errorf("two lines: %v", err)
	}
	if _, _, err := tokenfile.Read(dir); err == nil {
		t.Error("a directory was read as a token file")
	}
}

func TestExposedByMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	for mode, want := range map[os.FileMode]bool{0o600: false, 0o400: false, 0o644: true, 0o604: true, 0o640: false} {
		// 0640: the file's group is the test's own (it created the file).
		write(t, p, "x", mode)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenfile.Exposed(fi); got != want {
			t.Errorf("mode %o: exposed %v, want %v", mode, got, want)
		}
	}
	// Group-readable with a group the process is not in.
	write(t, p, "x", 0o640)
	if err := os.Chown(p, -1, 4242); err != nil {
		t.Fatalf("chown (the tests run as root): %v", err)
	}
	fi, _ := os.Stat(p)
	if !tokenfile.Exposed(fi) {
		t.Error("a file readable by a foreign group is not reported")
	}
}

func TestSourceRereadsAndWarnsWhenExposed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	write(t, p, "first-secret\n", 0o604)
	var logs bytes.Buffer
	s, err := tokenfile.Open(p, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "readable by group or others") || strings.Contains(logs.String(), "first-secret") {
		t.Fatalf("warning on a 0644 file: %s", logs.String())
	}
	write(t, p, "second-secret-longer\n", 0o600)
	_ = os.Chtimes(p, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	if !s.Changed() {
		t.Fatal("the change is not seen")
	}
	if tok, err := s.Get(); err != nil || tok != "second-secret-longer" {
		t.Fatalf("after rotation: %q %v", tok, err)
	}
	// A broken version keeps the previous token.
	write(t, p, "", 0o600)
	_ = os.Chtimes(p, time.Now().Add(2*time.Minute), time.Now().Add(2*time.Minute))
	if tok, err := s.Get(); err == nil || tok != "second-secret-longer" {
		t.Fatalf("empty file: %q %v", tok, err)
	}
	if strings.Contains(logs.String(), "second-secret") {
		t.Fatal("a token reached the log")
	}
}

// TestWarnExposedIsTheTokenFilesRule: another secret file (a TLS key) is
// judged and reported as a token file is, naming its setting and path.
func TestWarnExposedIsTheTokenFilesRule(t *testing.T) {
	p := filepath.Join(t.TempDir(), "client.key")
	for mode, want := range map[os.FileMode]bool{0o600: false, 0o644: true, 0o604: true} {
		write(t, p, "-----BEGIN PRIVATE KEY-----\nkey-material\n", mode)
		var logs bytes.Buffer
		tokenfile.WarnExposed(zerolog.New(&logs), "TLS private key file", "TALLY_OSC_REPORTING_KEY_FILE", p)
		got := logs.String()
		if want != strings.Contains(got, "TLS private key file is readable by group or others") {
			t.Errorf("mode %o: warned %v, want %v: %s", mode, !want, want, got)
		}
		if want && (!strings.Contains(got, `"setting":"TALLY_OSC_REPORTING_KEY_FILE"`) || !strings.Contains(got, p) || !strings.Contains(got, "chmod 600")) {
			t.Errorf("mode %o: the warning lacks the setting, the path or the fix: %s", mode, got)
		}
		if strings.Contains(got, "key-material") {
			t.Errorf("the key reached the log: %s", got)
		}
	}
	var logs bytes.Buffer
	tokenfile.WarnExposed(zerolog.New(&logs), "TLS private key file", "X", filepath.Join(t.TempDir(), "absent"))
	if logs.Len() != 0 {
		t.Errorf("a file that cannot be examined is left to its reader: %s", logs.String())
	}
}
