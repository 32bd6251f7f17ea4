package daemon

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// A duration in the log carries its unit (docs/operations.md, "Logs").
func TestLogDurationsCarryTheirUnit(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "json", zerolog.InfoLevel)
	log.Info().Dur("retry_in", 1500*time.Millisecond).Dur("took", 250*time.Millisecond).Msg("x")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["retry_in"] != "1.5s" || line["took"] != "250ms" {
		t.Fatalf("durations logged as %v and %v, want \"1.5s\" and \"250ms\": %s", line["retry_in"], line["took"], buf.String())
	}
}

// The program sets the duration format before anything runs: main calls
// ConfigureLogging first.
func TestMainConfiguresLogging(t *testing.T) {
	src := testkit.ReadFile(t, "../../main.go")
	body := string(src)
	i := strings.Index(body, "func main() {")
	if i < 0 {
		t.Fatal("no func main in main.go")
	}
	first := strings.TrimSpace(strings.SplitN(body[i+len("func main() {"):], "\n", 3)[1])
	if first != "daemon.ConfigureLogging()" {
		t.Fatalf("main begins with %q, want daemon.ConfigureLogging()", first)
	}
}
