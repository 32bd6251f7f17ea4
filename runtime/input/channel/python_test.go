package channel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
)

// The Python client of examples/channel, written from docs/channel.md with
// the standard library only, publishes through the real socket: what the
// document describes is enough to write a client.
func TestPythonClientFromTheDocument(t *testing.T) {
	py := testkit.LookPath(t, "python3", "python3")
	h := startHarness(t, Options{})
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

// pythonDriver runs testdata/channel_driver.py with Debian's python3 and
// the client package of examples/channel/python on its path.
func pythonDriver(t *testing.T, mode string, env ...string) (*helperProc, io.Writer) {
	t.Helper()
	py := testkit.LookPath(t, "python3", "python3")
	script, err := filepath.Abs("testdata/channel_driver.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, mode)
	cmd.Env = append([]string{"PYTHONPATH=" + testkit.RepoPath(t, "examples/channel/python"), "PATH=/usr/bin:/bin",
		"PYTHONDONTWRITEBYTECODE=1"}, env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	return startHelper(t, cmd, "python "+mode), in
}

// The Python client publishes before the daemon exists (its bounded queue
// answers ENOBUFS). The daemon starts, reads part of that queue, and is
// stopped and started again (its outbox reopened) while the rest is in
// flight; the client then publishes the rest of its stream, waiting for
// room. Every message is committed, and the only events seen twice are
// messages it sent again after the restart (same event_id, counted once by
// the Reporting API).
func TestPythonClientSurvivesDaemonRestart(t *testing.T) {
	const n = 3000
	h := newHarness(t, Options{})
	p, in := pythonDriver(t, "publish", "CHANNEL_SOCKET="+h.sock, fmt.Sprintf("CHANNEL_COUNT=%d", n), "CHANNEL_ID_PREFIX=pyr")
	nb := p.next(t, "nobufs")
	if nb["queued"].(float64) < 1 || nb["state"] == "connected" {
		t.Fatalf("before the daemon: %v", nb)
	}
	h.start()
	testkit.WaitFor(t, 20*time.Second, "the first messages read", func() bool { return h.counter("received_total") > 0 })
	h.stop()
	h.restartBox()
	h.start()
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	// Once more while the stream flows (the client may be done by then:
	// what is asserted holds either way).
	for {
		if pr := p.next(t, "progress"); pr["settled"].(float64) >= 600 {
			break
		}
	}
	h.stop()
	h.restartBox()
	h.start()
	done := p.next(t, "done")
	st := done["stats"].(map[string]any)
	if done["last"] != "committed" || st["acked"].(float64) != n+1 || st["dropped"].(float64) != 0 ||
		st["reconnects"].(float64) < 1 || st["nobufs"].(float64) < 1 {
		t.Fatalf("python client: %v", done)
	}
	count := map[string]int{}
	for _, ev := range h.events() {
		count[ev["event_id"].(string)]++
	}
	extra := 0
	for i := 0; i <= n; i++ {
		c := count[fmt.Sprintf("pyr-%d", i)]
		if c == 0 {
			t.Fatalf("message pyr-%d lost", i)
		}
		extra += c - 1
	}
	if len(count) != n+1 || float64(extra) > st["resent"].(float64) {
		t.Fatalf("%d distinct ids, %d extra events, %v resent", len(count), extra, st["resent"])
	}
	t.Logf("%d messages, %d resent after the restart, %d events seen twice", n+1, int(st["resent"].(float64)), extra)
}

// The Python client taps: a callback subscription by expression and a
// polling one by exact name, each delivery with the publisher's pid; then
// both are unsubscribed with the daemon's answer.
func TestPythonClientTaps(t *testing.T) {
	h := startHarness(t, Options{})
	p, _ := pythonDriver(t, "tap", "CHANNEL_SOCKET="+h.sock, "CHANNEL_COUNT=3",
		`CHANNEL_REGEX=^license\.`, "CHANNEL_EXACT=license.checkout")
	sub := p.next(t, "subscribed")
	if subs := sub["subscriptions"].([]any); len(subs) != 2 || subs[1].(map[string]any)["exact"] != true ||
		subs[1].(map[string]any)["polling"] != true || subs[0].(map[string]any)["status"] != "taken" {
		t.Fatalf("subscriptions %v", sub)
	}
	c := h.client(client.Options{})
	for i := range 3 {
		if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(fmt.Sprintf("pytap-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	via := map[string]int{}
	for range 6 {
		d := p.next(t, "delivery")
		ev := d["value"].(map[string]any)
		if d["name"] != "license.checkout" || d["pid"].(float64) != float64(os.Getpid()) ||
			!strings.HasPrefix(ev["event_id"].(string), "pytap-") {
			t.Fatalf("delivery %v", d)
		}
		via[d["via"].(string)]++
	}
	if via["callback"] != 3 || via["poll"] != 3 {
		t.Fatalf("deliveries %v", via)
	}
	if u := p.next(t, "unsubscribed"); u["left"].(float64) != 0 {
		t.Fatalf("after unsubscribing: %v", u)
	}
	p.next(t, "done")
	testkit.WaitFor(t, 10*time.Second, "the hub idle", func() bool { return !h.srv.Tap().Active() })
}
