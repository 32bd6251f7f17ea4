package daemon

// The daemon's watchdog: a second process that kills the daemon when the
// daemon's Go runtime stops (docs/abi.md, "Runaway guests").
//
// Metered (MAPPER_METERED, the default), a mapper that loops spends its
// budget and fails; unmetered, a built-in mapper runs watched, without
// termination checks. Compiled guest code cannot be preempted by Go, so such
// a guest that loops holds its goroutine for good, and the next garbage
// collection, which first stops every goroutine, waits for it for ever: the
// probes, the sender and the timer that would notice the deadline all stop
// with it. Metered, the watchdog stays for a freeze of any other cause. Nothing inside the process can
// be relied on then. So the daemon re-executes its own binary in a hidden mode
// (WatchdogCommand) and feeds it a heartbeat over a pipe from a goroutine;
// when the heartbeat stops for WATCHDOG_TIMEOUT, the watchdog logs why and
// kills the daemon with SIGKILL, for its supervisor to restart it. Its
// deliveries were never acknowledged: the broker delivers them again, marked
// redelivered, and a redelivery runs guarded (pipeline.Message.FirstDelivery).
// The same heartbeat sends systemd's WATCHDOG=1 (notify.go).
//
// The watchdog dies with the daemon: its stdin reaches end of file when the
// daemon exits or stops the heartbeat, and PR_SET_PDEATHSIG kills it should
// the daemon die first. It ignores SIGTERM, SIGINT and SIGHUP, which a
// supervisor or a terminal may send to every process of the daemon's group:
// the daemon's graceful stop is watched to its end.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
)

// WatchdogCommand is the hidden command the watchdog process runs.
const WatchdogCommand = "internal-watchdog"

// ExitRunaway is the daemon's exit status when a built-in mapper call overran
// its deadline (EX_SOFTWARE).
const ExitRunaway = 70

// runawayExit is the engine's runtime.Config.OnWatchedOverrun in the daemon
// (only called unmetered, where built-in modules run watched): a watched
// call past its deadline cannot be stopped, and the next garbage
// collection would wait for it for ever. The daemon exits at once, before the
// call is answered, so that nothing is acknowledged: the delivery comes back
// redelivered and runs guarded, is stopped at its deadline and dead-lettered.
func runawayExit(log zerolog.Logger, deadline time.Duration, exit func(int)) func(module string) {
	return func(module string) {
		log.Error().Str("mapper", module).Dur("deadline", deadline).Int("exit_status", ExitRunaway).
			Msg("a built-in mapper call overran its deadline and cannot be stopped: exiting at once without acknowledging; the notification comes back redelivered and is mapped with termination checks")
		exit(ExitRunaway)
	}
}

// heartbeat runs the watchdog process and feeds it, and pings systemd's
// watchdog while live passes, until ctx is done; then it closes the pipe,
// which ends the watchdog process, and waits for it. timeout 0: no watchdog
// process (systemd's pings alone, when systemd asks for them).
func heartbeat(ctx context.Context, log zerolog.Logger, timeout time.Duration, logFormat string, n *notifier, live func() error) {
	// PR_SET_PDEATHSIG fires when the thread that started the child ends:
	// this goroutine keeps its thread for the daemon's life.
	goruntime.LockOSThread()
	var wd *watchdogProc
	var beat <-chan time.Time
	if timeout > 0 {
		t := time.NewTicker(max(timeout/5, 100*time.Millisecond))
		defer t.Stop()
		beat = t.C
		wd = startWatchdogProc(log, timeout, logFormat)
		defer func() {
			if wd != nil {
				wd.stop()
			}
		}()
	}
	var sd <-chan time.Time
	if n.watchdog > 0 {
		t := time.NewTicker(n.watchdog / 2)
		defer t.Stop()
		sd = t.C
		n.pingWatchdog(live)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat:
			if wd == nil {
				wd = startWatchdogProc(log, timeout, logFormat)
				continue
			}
			if err := wd.beat(); err != nil {
				log.Error().Err(err).Msg("the watchdog process is gone; starting another")
				wd.stop()
				wd = startWatchdogProc(log, timeout, logFormat)
			}
		case <-sd:
			n.pingWatchdog(live)
		}
	}
}

// watchdogProc is a running watchdog process and the pipe that feeds it.
type watchdogProc struct {
	cmd *exec.Cmd
	w   *os.File
}

// startWatchdogProc starts the watchdog process for this one; nil when it
// cannot (logged: the daemon runs on, without it).
func startWatchdogProc(log zerolog.Logger, timeout time.Duration, logFormat string) *watchdogProc {
	// The running binary itself, even when an upgrade replaced the file.
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			log.Error().Err(err).Msg("no watchdog process: the executable is not found")
			return nil
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		log.Error().Err(err).Msg("no watchdog process: pipe")
		return nil
	}
	cmd := exec.Command(exe, WatchdogCommand, //nolint:gosec // G204: the daemon's own executable, its arguments its own
		"--parent", strconv.Itoa(os.Getpid()), "--timeout", timeout.String(), "--log-format", logFormat)
	cmd.Args[0] = "tally-openstack-collector" // as ps shows it
	cmd.Stdin = r
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.Env = []string{} // it needs none, and the daemon's may hold credentials
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = r.Close() // the start failed: the pipe is only released
		_ = w.Close()
		log.Error().Err(err).Msg("no watchdog process: start")
		return nil
	}
	_ = r.Close() // the child holds its end
	log.Info().Int("pid", cmd.Process.Pid).Dur("timeout", timeout).Msg("watchdog process started")
	return &watchdogProc{cmd: cmd, w: w}
}

func (p *watchdogProc) beat() error {
	_, err := p.w.Write([]byte{1})
	return err
}

// stop closes the pipe, which ends the watchdog process, and reaps it.
func (p *watchdogProc) stop() {
	_ = p.w.Close() // the watchdog process sees the end of the pipe either way
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// RunWatchdog is the watchdog process: --parent PID --timeout D
// --log-format F, heartbeats on stdin.
func RunWatchdog(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := pflag.NewFlagSet(WatchdogCommand, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	parent := fs.Int("parent", 0, "")
	timeout := fs.Duration("timeout", 0, "")
	format := fs.String("log-format", "json", "")
	if err := fs.Parse(args); err != nil || *parent <= 1 || *timeout <= 0 {
		fmt.Fprintf(stderr, "%s is started by the daemon, not by hand\n", WatchdogCommand)
		return 2
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	log := component(NewLogger(stderr, *format, zerolog.InfoLevel), "watchdog")
	if watchParent(stdin, *timeout, *parent, log) {
		return 1
	}
	return 0
}

// watchParent reads heartbeats until they stop for timeout, then kills the
// parent and reports true; it reports false when beats ends (the parent
// stopped the heartbeat, or died).
func watchParent(beats io.Reader, timeout time.Duration, parent int, log zerolog.Logger) bool {
	got := make(chan struct{}, 1)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		buf := make([]byte, 64)
		for {
			if _, err := beats.Read(buf); err != nil {
				return
			}
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-eof:
			return false
		case <-got:
			if !t.Stop() {
				<-t.C
			}
			t.Reset(timeout)
		case <-t.C:
			killFrozen(parent, timeout, log)
			return true
		}
	}
}

// killFrozen kills the frozen parent with SIGKILL. A process that is PID 1
// of its namespace (a container's entry point without an init) ignores
// SIGKILL from inside the namespace: if the parent is still there after a
// while, it gets SIGABRT, on which the Go runtime ends it (exit status 2).
func killFrozen(parent int, timeout time.Duration, log zerolog.Logger) {
	log.Error().Int("pid", parent).Dur("silent_for", timeout).
		Msg("no heartbeat from the daemon: its Go runtime is stopped (most likely a built-in mapper call that cannot be preempted); killing it with SIGKILL for its supervisor to restart it")
	if err := syscall.Kill(parent, syscall.SIGKILL); err != nil {
		log.Error().Err(err).Int("pid", parent).Msg("SIGKILL")
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if ProcessGone(parent) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Error().Int("pid", parent).Msg("the daemon outlived SIGKILL (PID 1 of its namespace?): sending SIGABRT")
	_ = syscall.Kill(parent, syscall.SIGABRT)
}

// ProcessGone reports whether the process pid has exited, or is a zombie
// waiting for its parent to reap it (signal 0 still reaches a zombie, so
// the state in /proc decides). The watchdog waits on it after SIGKILL; the
// end-to-end tests wait on it for the processes they start.
func ProcessGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}
