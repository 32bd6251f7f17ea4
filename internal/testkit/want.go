package testkit

import (
	"strings"
	"testing"
)

// WantAll fails the test for each of wants that text, named what in the
// message, does not contain.
func WantAll(tb testing.TB, what, text string, wants ...string) {
	tb.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			tb.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}
