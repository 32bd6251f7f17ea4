package testkit

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const missingProbeEnv = "TALLY_OSC_TESTKIT_MISSING_PROBE"

// A missing tool fails the test and names the package; with
// TALLY_OSC_ALLOW_SKIP=1 it skips, with the same words. The test runs its own
// binary again as the test that misses something.
func TestMissingFailsUnlessAllowedToSkip(t *testing.T) {
	if os.Getenv(missingProbeEnv) != "" {
		LookPath(t, "tally-no-such-tool", "tally-probe-package")
		return
	}
	for _, c := range []struct {
		allow    string
		wantFail bool
		verdict  string
	}{
		{"", true, "--- FAIL"},
		{"0", true, "--- FAIL"},
		{"1", false, "--- SKIP"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingFailsUnlessAllowedToSkip$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), missingProbeEnv+"=1", AllowSkipEnv+"="+c.allow)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.wantFail || !strings.Contains(string(out), c.verdict) {
			t.Errorf("%s=%q: exit %v, want a failure: %v; output:\n%s", AllowSkipEnv, c.allow, err, c.wantFail, out)
		}
		if !strings.Contains(string(out), "apt-get install tally-probe-package") {
			t.Errorf("%s=%q: the package is not named:\n%s", AllowSkipEnv, c.allow, out)
		}
	}
}
