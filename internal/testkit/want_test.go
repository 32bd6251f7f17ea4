package testkit

import (
	"fmt"
	"testing"
)

// WantAll reports each missing text once, naming it and what lacks it, and
// nothing when every text is there.
func TestWantAllReportsEachMissingText(t *testing.T) {
	var tb errorsTB
	WantAll(&tb, "the log", "started\nflushed\n", "started", "flushed")
	if len(tb.errs) != 0 {
		t.Fatalf("every text present, reported %q", tb.errs)
	}
	WantAll(&tb, "the log", "started\n", "started", "flushed", "closed")
	want := []string{"the log lacks \"flushed\":\nstarted\n", "the log lacks \"closed\":\nstarted\n"}
	if fmt.Sprint(tb.errs) != fmt.Sprint(want) {
		t.Fatalf("reported %q, want %q", tb.errs, want)
	}
}
