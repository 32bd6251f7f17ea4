package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// NeedOslo ends the test unless /usr/bin/python3 imports oslo_messaging (the
// real oslo.messaging Notifier the tests publish with).
func NeedOslo(tb testing.TB) {
	tb.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import oslo_messaging").Run(); err != nil {
		Missing(tb, "/usr/bin/python3 cannot import oslo_messaging: apt-get install python3-oslo.messaging")
	}
}

// OsloNotify publishes with the real oslo.messaging Notifier
// (examples/publisher/oslo_notify.py; args are its arguments: --url,
// --exchange, --count, files...) and answers the message_ids it reports, one
// per notification sent.
func OsloNotify(tb testing.TB, args ...string) []string {
	tb.Helper()
	NeedOslo(tb)
	cmd := exec.Command("/usr/bin/python3", append([]string{RepoPath(tb, "examples", "publisher", "oslo_notify.py")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("oslo_notify.py %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			MessageID string `json:"message_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.MessageID == "" {
			tb.Fatalf("oslo_notify.py said %q", sc.Text())
		}
		ids = append(ids, r.MessageID)
	}
	return ids
}
