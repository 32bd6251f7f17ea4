package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// SyncBuffer collects what several goroutines write (a logger's output, a
// child process's) for assertions.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String answers everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// JSONLines answers the lines written so far, each parsed as a JSON object (a
// zerolog line); a line that is not one fails the test. With messages given,
// only the lines whose "message" is one of them.
func (b *SyncBuffer) JSONLines(tb testing.TB, messages ...string) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("log line %q: %v", line, err)
		}
		if len(messages) > 0 && !slices.Contains(messages, fmt.Sprint(m["message"])) {
			continue
		}
		out = append(out, m)
	}
	return out
}
