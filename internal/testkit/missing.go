package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// AllowSkipEnv names the variable that lets a test whose tool or service is
// missing skip instead of failing: TALLY_OSC_ALLOW_SKIP=1.
const AllowSkipEnv = "TALLY_OSC_ALLOW_SKIP"

// Missing ends the test because something it needs is not on this machine:
// a failure, or a skip when TALLY_OSC_ALLOW_SKIP=1. The message should name
// the Debian package (or the make target) that provides it.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(AllowSkipEnv) == "1" {
		tb.Skip(msg + " (skipped: " + AllowSkipEnv + "=1)")
	}
	tb.Fatal(msg + " (make test installs it; " + AllowSkipEnv + "=1 skips instead)")
}

// LookPath answers the path of a command, or ends the test naming the Debian
// package that provides it.
func LookPath(tb testing.TB, command, debianPackage string) string {
	tb.Helper()
	p, err := exec.LookPath(command)
	if err != nil {
		Missing(tb, "%s is not installed: apt-get install %s", command, debianPackage)
	}
	return p
}
