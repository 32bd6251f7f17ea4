package channel

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Python client of examples/channel, written from docs/channel.md with
// the standard library only, publishes through the real socket: what the
// document describes is enough to write a client.
func TestPythonClientFromTheDocument(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import socket, struct").Run(); err != nil {
		t.Fatalf("%s is needed (apt-get install python3): %v", py, err)
	}
	h := newHarness(t, Options{})
	h.start()
	script, _ := filepath.Abs("../../../examples/channel/channel_publish.py")
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
