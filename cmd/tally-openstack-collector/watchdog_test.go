package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The watchdog leaves a process alone while heartbeats arrive and returns
// when they end (the daemon stopped them); when they stop for the timeout it
// kills the process, frozen here with SIGSTOP as a Go runtime stopped by an
// unpreemptible guest is, and says so.
func TestWatchdogKillsProcessWithoutHeartbeat(t *testing.T) {
	sleepBin := testkit.LookPath(t, "sleep", "coreutils")
	for _, silent := range []bool{false, true} {
		victim := exec.Command(sleepBin, "300")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- victim.Wait() }()
		t.Cleanup(func() { _ = victim.Process.Kill() })
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		logs := &testkit.SyncBuffer{}
		killed := make(chan bool, 1)
		go func() { killed <- watchParent(r, 2*time.Second, victim.Process.Pid, zerolog.New(logs)) }()
		for range 20 { // beats for 2 s, the whole timeout
			if _, err := w.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !silent {
			w.Close()
			if <-killed {
				t.Fatalf("killed a process that sent heartbeats:\n%s", logs)
			}
			select {
			case err := <-waited:
				t.Fatalf("the process ended (%v) while it sent heartbeats", err)
			default:
			}
			_ = victim.Process.Kill()
			<-waited
			continue
		}
		if err := victim.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if !<-killed {
			t.Fatal("the watchdog returned without killing a silent process")
		}
		err = <-waited
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the silent process ended with %v, want killed by SIGKILL", err)
		}
		if !strings.Contains(logs.String(), "no heartbeat from the daemon") {
			t.Errorf("the kill is not logged:\n%s", logs)
		}
		w.Close()
	}
}

// The overrun hook of the daemon logs why and exits at once with
// exitRunaway.
func TestRunawayExitLogsAndExits(t *testing.T) {
	var buf bytes.Buffer
	code := -1
	runawayExit(zerolog.New(&buf), 250*time.Millisecond, func(c int) { code = c })("nova@1.1.0")
	if code != exitRunaway {
		t.Fatalf("exit status %d, want %d", code, exitRunaway)
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if line["level"] != "error" || line["mapper"] != "nova@1.1.0" || !strings.Contains(line["message"].(string), "exiting at once without acknowledging") {
		t.Fatalf("log line %v", line)
	}
}

// The real daemon, frozen with SIGSTOP, is killed by its watchdog process
// within its WATCHDOG_TIMEOUT, and exits by SIGKILL for its supervisor to
// restart it; a daemon stopped by SIGTERM takes its watchdog process with
// it.
func TestDaemonFrozenIsKilledByItsWatchdog(t *testing.T) {
	b := buildBinaries(t)
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, "nova")
	a := startAPI(t, b)
	c := newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=nova", "TALLY_OSC_WATCHDOG_TIMEOUT=2s")

	// A graceful stop ends the watchdog process too.
	c.start(t)
	c.waitReady(t)
	wd := watchdogPID(t, c.p)
	if code, _ := c.p.stop(t, 60*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	testkit.WaitFor(t, 10*time.Second, "the watchdog process to end with the daemon", func() bool { return gone(wd) })

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
	testkit.WaitFor(t, 10*time.Second, "the watchdog process to end", func() bool { return gone(wd) })
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
	if gone(pid) {
		t.Fatalf("the watchdog process %d is not running", pid)
	}
	return pid
}
