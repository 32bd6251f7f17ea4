package daemon

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
// ExitRunaway.
func TestRunawayExitLogsAndExits(t *testing.T) {
	var buf bytes.Buffer
	code := -1
	runawayExit(zerolog.New(&buf), 250*time.Millisecond, func(c int) { code = c })("nova@1.1.0")
	if code != ExitRunaway {
		t.Fatalf("exit status %d, want %d", code, ExitRunaway)
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if line["level"] != "error" || line["mapper"] != "nova@1.1.0" || !strings.Contains(line["message"].(string), "exiting at once without acknowledging") {
		t.Fatalf("log line %v", line)
	}
}
