package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The real daemon, frozen with SIGSTOP, is killed by its watchdog process
// within its WATCHDOG_TIMEOUT, and exits by SIGKILL for its supervisor to
// restart it; a daemon stopped by SIGTERM takes its watchdog process with
// it.
func TestDaemonFrozenIsKilledByItsWatchdog(t *testing.T) {
	c, _, _ := novaCollector(t, "TALLY_OSC_WATCHDOG_TIMEOUT=2s")

	// A graceful stop ends the watchdog process too.
	c.start(t)
	c.waitReady(t)
	wd := watchdogPID(t, c.p)
	if code, _ := c.p.stop(t, 60*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	testkit.WaitFor(t, 10*time.Second, "the watchdog process to end with the daemon", func() bool { return daemon.ProcessGone(wd) })

	// Frozen: killed. The livez command, a container's health check, says
	// 0 before and 1 after.
	c.start(t)
	c.waitReady(t)
	wd = watchdogPID(t, c.p)
	livez := func() int {
		cmd := exec.Command(c.bin, "livez")
		cmd.Env = c.env
		out, _ := cmd.CombinedOutput()
		t.Logf("livez: %s", strings.TrimSpace(string(out)))
		return cmd.ProcessState.ExitCode()
	}
	if code := livez(); code != 0 {
		t.Fatalf("livez of a live daemon: exit %d", code)
	}
	if err := c.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code := livez(); code != 1 {
		t.Fatalf("livez of a frozen daemon: exit %d, want 1", code)
	}
	select {
	case <-c.p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the frozen daemon was not killed")
	}
	var ee *exec.ExitError
	if !errors.As(c.p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the frozen daemon ended with %v, want killed by SIGKILL", c.p.err)
	}
	if !strings.Contains(c.p.out.String(), "no heartbeat from the daemon") {
		t.Errorf("the watchdog did not say why:\n%s", tail(c.p.out.String(), 3000))
	}
	testkit.WaitFor(t, 10*time.Second, "the watchdog process to end", func() bool { return daemon.ProcessGone(wd) })
}

// watchdogPID reads the watchdog process's pid from the daemon's log.
func watchdogPID(t *testing.T, p *proc) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, 20*time.Second, "the watchdog process started", func() bool {
		for _, l := range strings.Split(p.out.String(), "\n") {
			var line struct {
				Msg string `json:"message"`
				PID int    `json:"pid"`
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "watchdog process started" {
				pid = line.PID
			}
		}
		return pid > 0
	})
	if daemon.ProcessGone(pid) {
		t.Fatalf("the watchdog process %d is not running", pid)
	}
	return pid
}
