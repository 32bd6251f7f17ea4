package testkit

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A rabbitmqctl call stopped by its deadline leaves no Erlang VM behind: the
// VM would keep one of the CLI's few distribution ports.
func TestRabbitmqctlTimeoutLeavesNoVM(t *testing.T) {
	RequireBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	const marker = "timer:sleep(60017)."
	_ = ctlCommand(ctx, "rabbitmqctl", "eval", marker).Run() // no pipes: Run returns when the wrapper ends
	time.Sleep(time.Second)
	out, _ := exec.Command("pgrep", "-f", "sleep\\(60017\\)").Output()
	if s := strings.TrimSpace(string(out)); s != "" {
		exec.Command("pkill", "-9", "-f", "sleep\\(60017\\)").Run()
		t.Fatalf("processes left behind by a cancelled rabbitmqctl: %s", s)
	}
}
