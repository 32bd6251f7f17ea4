package channel

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The Python client of examples/channel, written from docs/channel.md with
// the standard library only, publishes through the real socket: what the
// document describes is enough to write a client.
func TestPythonClientFromTheDocument(t *testing.T) {
	py := testkit.LookPath(t, "python3", "python3")
	h := newHarness(t, Options{})
	h.start()
	script := testkit.RepoPath(t, "examples/channel/channel_publish.py")
	in := string(usage("py-1")) + "\n\n" + string(usage("py-2")) + "\n" + `{"broken` + "\n"
	cmd := exec.Command(py, script, "--socket", h.sock, "--tag", "usage.license", "--type", "JSON", "--perm", "0444")
	cmd.Stdin = strings.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1 (one line is not JSON)\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "message 3: refused invalid_json") || !strings.Contains(stderr.String(), "3 published, 1 not committed") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
	ids := map[string]bool{}
	for _, ev := range h.events() {
		ids[ev["event_id"].(string)] = true
	}
	if !ids["py-1"] || !ids["py-2"] || len(ids) != 2 {
		t.Fatalf("events %v", ids)
	}
}
