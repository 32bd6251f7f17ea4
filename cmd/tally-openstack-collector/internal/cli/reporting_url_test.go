package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The daemon refuses a REPORTING_URL ending in the events route at start,
// exit 2, and says what to set instead.
func TestReportingURLWithTheEventsRouteExits2(t *testing.T) {
	// Should the check ever let it through, the daemon starts on a place of
	// the test's own.
	env := []string{"TALLY_OSC_REPORTING_URL=http://h/api/v1/events", "TALLY_OSC_REPORTING_TOKEN=tok-123456", "TALLY_OSC_REPORTING_INSECURE=true",
		"TALLY_OSC_BUFFER_PATH=" + filepath.Join(t.TempDir(), "outbox"), "TALLY_OSC_HTTP_ADDR=" + testkit.FreeAddr(t), "TALLY_OSC_TRANSPORT_URL=amqp://guest:guest@127.0.0.1:1/"}
	code, _, errOut := runCmd(t, "", env)
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "TALLY_OSC_REPORTING_URL=http://h\n") && !strings.Contains(errOut, "TALLY_OSC_REPORTING_URL=http://h ") {
		t.Errorf("the message does not give the URL to set:\n%s", errOut)
	}
}
