// Package tokenfile reads bearer tokens kept in files: the Reporting API's
// (REPORTING_TOKEN_FILE) and the control routes' (CONTROL_TOKEN_FILE).
//
// A token file holds one line. It is read with a size limit (MaxSize), so a
// path pointed at the wrong file (a log, a device) cannot make the process
// read without end, and a file that group or others may read is reported
// (a warning, not a refusal: a Kubernetes Secret volume is 0644 unless its
// defaultMode says otherwise; see Exposed). A Source re-reads its file when the file's
// modification time or size changes, so a rotated Secret is picked up without
// a restart. Linux only (it reads the owner group from syscall.Stat_t).
//
// The same exposure policy covers the other secrets kept in files, the TLS
// private keys (WarnExposed), so every secret file is judged by one rule.
package tokenfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// MaxSize is the largest token file read, in bytes.
const MaxSize = 4 << 10

// Read returns the token held in path, trimmed of surrounding white space,
// and the file's information (for Exposed). Neither the error nor anything
// else carries the file's content.
func Read(path string) (string, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	fi, err := f.Stat()
	if err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("token file %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	if len(b) > MaxSize {
		return "", nil, fmt.Errorf("%w: %s", ErrTooLarge, path)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", nil, fmt.Errorf("%w: %s", ErrMalformed, path)
	}
	return tok, fi, nil
}

// Exposed reports whether users other than the collector's may read the
// file: others may, or its group may and that group is not one of the
// process's own groups. (A Kubernetes Secret mounted with fsGroup is
// root:fsGroup 0440, the fsGroup being the pod's: not exposed.)
func Exposed(fi fs.FileInfo) bool {
	perm := fi.Mode().Perm()
	if perm&0o004 != 0 {
		return true
	}
	if perm&0o040 == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	return !ownGroup(st.Gid)
}

// WarnExposed logs a warning naming setting and path when the secret file
// at path (a TLS private key) may be read by users other than the
// collector's, as a token file's Source does for its own: one policy for
// every secret kept in a file. A file that cannot be examined is left to the
// code that reads it, which reports it with the path.
func WarnExposed(log zerolog.Logger, what, setting, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	warnExposed(log, what, setting, path, fi)
}

func warnExposed(log zerolog.Logger, what, setting, path string, fi fs.FileInfo) {
	if !Exposed(fi) {
		return
	}
	ev := log.Warn().Str("file", path).Str("mode", fi.Mode().Perm().String())
	if setting != "" {
		ev = ev.Str("setting", setting)
	}
	ev.Msg(what + " is readable by group or others; make it readable by the collector's user only " +
		"(chmod 600, or defaultMode 0400 for a Kubernetes Secret)")
}

func ownGroup(gid uint32) bool {
	if uint32(os.Getegid()) == gid { //nolint:gosec // G115: Linux group ids are 32-bit
		return true
	}
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if uint32(g) == gid { //nolint:gosec // G115: Linux group ids are 32-bit
			return true
		}
	}
	return false
}

// Source holds a token, either fixed or kept in a file and re-read when the
// file changes. Safe for concurrent use.
type Source struct {
	static string
	file   string
	log    zerolog.Logger

	mu    sync.Mutex
	cur   string
	mtime time.Time
	size  int64
}

// Static is a Source of a fixed token.
func Static(token string) *Source { return &Source{static: token, cur: token} }

// Open reads file once (an error when it is unusable) and returns a Source
// that re-reads it when it changes. log receives a warning each time a
// version of the file is read that group or others may read.
func Open(file string, log zerolog.Logger) (*Source, error) {
	s := &Source{file: file, log: log}
	if _, err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// File is the path the token is read from; "" for a fixed token.
func (s *Source) File() string { return s.file }

// Changed reports whether the file's modification time or size differs from
// the version last read. Always false for a fixed token, and while the file
// cannot be examined.
func (s *Source) Changed() bool {
	if s.file == "" {
		return false
	}
	fi, err := os.Stat(s.file)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !fi.ModTime().Equal(s.mtime) || fi.Size() != s.size
}

// Get returns the current token, reading the file again when it changed. When
// that read fails the previous token is returned with the error.
func (s *Source) Get() (string, error) {
	if s.file == "" {
		return s.static, nil
	}
	if !s.Changed() {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cur, nil
	}
	return s.reload()
}

func (s *Source) reload() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, fi, err := Read(s.file)
	if err != nil {
		return s.cur, err
	}
	warnExposed(s.log, "token file", "", s.file, fi)
	s.cur, s.mtime, s.size = tok, fi.ModTime(), fi.Size()
	return s.cur, nil
}

// Current is the token last read, without looking at the file.
func (s *Source) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}
