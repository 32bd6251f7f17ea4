package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// buildRunawayBinary builds, in a copy of the tree, a collector whose
// built-in nova module loops for ever without a call when payload.host is
// "loop-forever" (mappers/nova/runaway_loop.go, the tag tally_runaway), with
// make build as a release is built.
func buildRunawayBinary(t *testing.T) string {
	t.Helper()
	makeBin := testkit.LookPath(t, "make", "make")
	gitBin := testkit.LookPath(t, "git", "git")
	tree := t.TempDir()
	testkit.CopyWorkingTree(t, gitBin, testkit.RepoRoot(t), tree)
	cmd := exec.Command(makeBin, "build", "WAT2WASM=/nonexistent", "CLANG=/nonexistent")
	cmd.Dir = tree
	cmd.Env = append(testkit.CleanMakeEnv(), "GOFLAGS=-tags=tally_runaway", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build with the tag tally_runaway: %v\n%s", err, out)
	}
	return filepath.Join(tree, "bin", "tally-openstack-collector")
}

// novaNotification is an oslo envelope of a real nova notification
// (mappers/nova/testdata) with message_id id and payload.host host.
func novaNotification(t *testing.T, id, host string) []byte {
	t.Helper()
	b := testkit.ReadFile(t, "../../../mappers/nova/testdata/compute.instance.create.end__ceilometer__1.in.json")
	var n map[string]any
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	n["message_id"] = id
	n["payload"].(map[string]any)["host"] = host
	inner, _ := json.Marshal(n)
	body, _ := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(inner)})
	return body
}

// supervised is a collector the test restarts whenever it exits, the only
// supervisor there is, probing /livez meanwhile.
type supervised struct {
	*collector
	name      string
	pprofAddr string
	exits     []string  // how each run ended
	lastAlive time.Time // the last /livez answer of the current run; zero before its first
	worstGap  time.Duration
}

// check restarts an exited run and probes a running one with a short
// timeout. A run that answered once and then stays silent for longer than
// limit, while its process is alive, fails the test: the frozen process the
// watchdog exists to end.
func (s *supervised) check(t *testing.T, limit time.Duration) {
	t.Helper()
	if !s.p.running() {
		how := "exit 0"
		var ee *exec.ExitError
		if errors.As(s.p.err, &ee) {
			ws := ee.Sys().(syscall.WaitStatus)
			how = fmt.Sprintf("exit %d", ws.ExitStatus())
			if ws.Signaled() {
				how = "signal " + ws.Signal().String()
			}
		}
		s.exits = append(s.exits, how)
		t.Logf("%s: run %d ended (%s); restarting it", s.name, s.runs, how)
		s.start(t)
		s.lastAlive = time.Time{}
		return
	}
	cl := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := cl.Get("http://" + s.httpAddr + "/livez")
	if err == nil {
		resp.Body.Close()
		s.lastAlive = time.Now()
		return
	}
	if s.lastAlive.IsZero() {
		return // still starting
	}
	gap := time.Since(s.lastAlive)
	s.worstGap = max(s.worstGap, gap)
	if gap > limit && s.p.running() {
		t.Fatalf("%s is alive but has not answered /livez for %s:\n%s", s.name, gap.Round(time.Millisecond), tail(s.p.out.String(), 3000))
	}
}

// deadLetter is what the test reads of a dead letter.
type deadLetter struct {
	Reason string `json:"reason"`
	Module string `json:"module"`
}

// deadLetters lists the dead letters a running collector holds; false while
// it does not answer (starting).
func (s *supervised) deadLetters(t *testing.T) ([]deadLetter, bool) {
	t.Helper()
	code, body, err := s.get("/deadletters?limit=1000")
	if err != nil || code != 200 {
		return nil, false
	}
	var l struct {
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("GET /deadletters: %v\n%s", err, body)
	}
	return l.DeadLetters, true
}

// runawayBodies is ordinary nova notifications, with the message ids
// <prefix>-0000-4000-8000-<i in hex>, and after the middle one the
// notification that makes the test build's nova module loop
// (<prefix>-0000-4000-8000-1008f00f00f0). want holds the ordinary ids.
func runawayBodies(t *testing.T, prefix string, ordinary int) (want map[string]bool, bodies [][]byte) {
	t.Helper()
	want = map[string]bool{}
	for i := range ordinary {
		id := fmt.Sprintf("%s-0000-4000-8000-%012x", prefix, i)
		want[id] = true
		bodies = append(bodies, novaNotification(t, id, "compute-host-name"))
		if i == ordinary/2 {
			bodies = append(bodies, novaNotification(t, prefix+"-0000-4000-8000-1008f00f00f0", "loop-forever"))
		}
	}
	return want, bodies
}

// runawayDrained removes from want the ids the API holds, and reports
// whether it holds them all, the collectors hold a dead letter, and the
// queue is empty: the end of a runaway scenario.
func runawayDrained(t *testing.T, a *api, v *vhost, reps []*supervised, want map[string]bool) bool {
	t.Helper()
	evs, _ := a.events(t)
	for _, e := range evs {
		delete(want, e.EventID)
	}
	if len(want) > 0 {
		return false
	}
	dead := 0
	for _, s := range reps {
		l, ok := s.deadLetters(t)
		if !ok {
			return false
		}
		dead += len(l)
	}
	ready, unacked := queueDepth(t, v, "tally-notifications")
	return dead >= 1 && ready == 0 && unacked == 0
}

// checkOneDeadLetter fails the test unless the collectors hold exactly one
// dead letter between them, the nova module's, for reason.
func checkOneDeadLetter(t *testing.T, reps []*supervised, reason string) {
	t.Helper()
	dead := 0
	for _, s := range reps {
		l, ok := s.deadLetters(t)
		if !ok {
			t.Fatalf("%s: GET /deadletters failed", s.name)
		}
		for _, d := range l {
			dead++
			if d.Reason != reason || !strings.HasPrefix(d.Module, "nova@") {
				t.Errorf("%s: dead letter %+v, want the nova module's %s", s.name, d, reason)
			}
		}
	}
	if dead != 1 {
		t.Fatalf("dead letters = %d, want exactly 1", dead)
	}
}

// A built-in module that loops never leaves a frozen process. Two collectors
// share one queue; among ordinary nova notifications comes one that makes
// the (test build's) nova module loop for ever.
//
// "metered", the default settings: the looping call spends its budget and
// fails like any other; one dead letter with reason budget, no collector
// ever ends, nothing is lost, and each collector answers every /livez probe
// within a second the whole time, garbage collections forced throughout.
//
// "watched/deadline" and "watched/frozen", with MAPPER_METERED=false: the
// collector that takes the looping notification first maps it watched and
// exits at the deadline without acknowledging it, or, if a garbage
// collection froze its Go runtime first, is killed by its watchdog process;
// the test restarts what exits. The broker delivers the notification again,
// marked redelivered; whoever takes it maps it guarded, stops it at its
// deadline and dead-letters it: once. Every ordinary notification reaches
// the API, and no collector is ever found alive but silent for longer than
// its watchdog allows. In "deadline" the call's deadline (2 s) usually comes
// first and the collector exits with status 70 (a garbage collection that
// starts before it freezes the process, and the watchdog's SIGKILL ends it:
// either is accepted); in "frozen" the deadline is 20 s and the test makes
// every collector collect garbage (the profiler's heap?gc=1) every moment
// until one ends, so the one with the looping guest freezes before its
// deadline and only its watchdog process can end it. The guarded redelivery
// collects garbage as often, and must not freeze.
func TestRunawayBuiltinNeverFreezes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a copy of the tree and runs two collectors")
	}
	testkit.RequireBroker(t)
	bin := buildRunawayBinary(t)
	t.Run("metered", func(t *testing.T) { meteredRunawayScenario(t, bin) })
	t.Run("watched/deadline", func(t *testing.T) { runawayScenario(t, bin, false) })
	t.Run("watched/frozen", func(t *testing.T) { runawayScenario(t, bin, true) })
}

// livezProber probes the /livez of collectors that must never end, from
// its own goroutine, each probe with a client timeout of one second: the
// condition the metered scenario requires the whole time. A round probes
// every collector, and the next starts probeEvery later, so that the probes
// do not take the cores the collectors map on. It stops at the first
// failure and keeps it.
type livezProber struct {
	stop, done chan struct{}
	mu         sync.Mutex
	err        error
	answered   int
}

// probeEvery is the pace of livezProber's rounds.
const probeEvery = 20 * time.Millisecond

func startLivezProber(reps []*supervised) *livezProber {
	lp := &livezProber{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(lp.done)
		cl := http.Client{Timeout: time.Second}
		round := time.NewTicker(probeEvery)
		defer round.Stop()
		for {
			select {
			case <-lp.stop:
				return
			case <-round.C:
			}
			for _, s := range reps {
				select {
				case <-lp.stop:
					return
				default:
				}
				err := func() error {
					if !s.p.running() {
						return fmt.Errorf("%s ended (%w), want no exit:\n%s", s.name, s.p.err, tail(s.p.out.String(), 3000))
					}
					resp, err := cl.Get("http://" + s.httpAddr + "/livez")
					if err != nil {
						return fmt.Errorf("%s did not answer /livez within 1 s: %w", s.name, err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						return fmt.Errorf("%s: /livez answered %d", s.name, resp.StatusCode)
					}
					return nil
				}()
				lp.mu.Lock()
				if err != nil {
					lp.err = err
				} else {
					lp.answered++
				}
				lp.mu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()
	return lp
}

// check fails the test if a probe has failed; it returns the probes
// answered so far.
func (lp *livezProber) check(t *testing.T) int {
	t.Helper()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.err != nil {
		t.Fatal(lp.err)
	}
	return lp.answered
}

// close stops the prober and waits for it.
func (lp *livezProber) close() {
	close(lp.stop)
	<-lp.done
}

// meteredRunawayScenario: with the default settings (MAPPER_METERED on) the
// looping notification, among 6,000 ordinary ones, spends its budget and is
// dead-lettered with reason budget: no collector exits, nothing is lost, and
// each answers every /livez probe within a second the whole time, garbage
// collections forced throughout.
func meteredRunawayScenario(t *testing.T, bin string) {
	b, v, a := stack(t, "nova")
	b.collector = bin
	var reps [2]*supervised
	for i := range reps {
		pprofAddr := testkit.FreeAddr(t)
		c := newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=nova",
			fmt.Sprintf("TALLY_OSC_REPLICA_NAME=collector-%d", i),
			"TALLY_OSC_PREFETCH=20",
			"TALLY_OSC_DEBUG_PPROF=true", "TALLY_OSC_DEBUG_PPROF_ADDR="+pprofAddr)
		reps[i] = &supervised{collector: c, name: fmt.Sprintf("collector-%d", i), pprofAddr: pprofAddr}
		c.start(t)
	}
	for _, s := range reps {
		s.waitReady(t)
	}
	lp := startLivezProber(reps[:])
	t.Cleanup(lp.close)
	supervise := func() {
		lp.check(t)
		for _, s := range reps {
			s.forceGC()
		}
	}

	const ordinary = 6000
	want, bodies := runawayBodies(t, "0000mete", ordinary)
	start := time.Now()
	v.Publish(t, "nova", "notifications.info", bodies...)
	testkit.WaitFor(t, 5*time.Minute, "every ordinary notification at the API, the looping one dead-lettered, the queue empty", func() bool {
		supervise()
		return runawayDrained(t, a, v, reps[:], want)
	})
	t.Logf("%s: every ordinary notification delivered", time.Since(start).Round(time.Millisecond))
	probes := lp.check(t)
	for _, s := range reps {
		if s.runs != 1 {
			t.Errorf("%s ran %d times, want once", s.name, s.runs)
		}
		if strings.Contains(s.p.out.String(), "exiting at once without acknowledging") {
			t.Errorf("%s took the watched path", s.name)
		}
	}
	checkOneDeadLetter(t, reps[:], "budget")
	t.Logf("figures: no exit; %d /livez probes, each answered within 1 s", probes)
}

// forceGC makes a running collector collect garbage, through its profiler;
// a frozen one does not answer.
func (s *supervised) forceGC() {
	if !s.p.running() {
		return
	}
	cl := http.Client{Timeout: 300 * time.Millisecond}
	if resp, err := cl.Get("http://" + s.pprofAddr + "/debug/pprof/heap?gc=1"); err == nil {
		resp.Body.Close()
	}
}

func runawayScenario(t *testing.T, bin string, freeze bool) {
	b, v, a := stack(t, "nova")
	b.collector = bin

	const watchdog = 3 * time.Second
	// Silent for longer than this while alive: frozen, and not ended.
	limit := watchdog + 7*time.Second
	var reps [2]*supervised
	for i := range reps {
		c := newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=nova",
			fmt.Sprintf("TALLY_OSC_REPLICA_NAME=collector-%d", i),
			"TALLY_OSC_MAPPER_METERED=false", // the watched mode
			"TALLY_OSC_WATCHDOG_TIMEOUT="+watchdog.String(),
			// The harness's generous deadline, shortened: the looping call
			// reaches it soon.
			"TALLY_OSC_MAPPER_CALL_TIMEOUT=2s",
			"TALLY_OSC_PREFETCH=20")
		pprofAddr := testkit.FreeAddr(t)
		if freeze {
			c.env = append(c.env, "TALLY_OSC_MAPPER_CALL_TIMEOUT=20s",
				"TALLY_OSC_DEBUG_PPROF=true", "TALLY_OSC_DEBUG_PPROF_ADDR="+pprofAddr)
		}
		reps[i] = &supervised{collector: c, name: fmt.Sprintf("collector-%d", i), pprofAddr: pprofAddr}
		c.start(t)
	}
	for _, s := range reps {
		s.waitReady(t)
	}
	supervise := func() {
		for _, s := range reps {
			s.check(t, limit)
			if freeze {
				s.forceGC()
			}
		}
	}

	const ordinary = 400
	want, bodies := runawayBodies(t, "0000runa", ordinary)
	start := time.Now()
	v.Publish(t, "nova", "notifications.info", bodies[:ordinary/2]...)
	loopAt := time.Now()
	v.Publish(t, "nova", "notifications.info", bodies[ordinary/2:]...)

	var firstExit time.Duration
	var servingAgain time.Duration
	testkit.WaitFor(t, 5*time.Minute, "every ordinary notification at the API, the looping one dead-lettered, the queue empty", func() bool {
		supervise()
		exits := 0
		for _, s := range reps {
			exits += len(s.exits)
		}
		if exits > 0 && firstExit == 0 {
			firstExit = time.Since(loopAt)
		}
		if exits > 0 && servingAgain == 0 {
			up := true
			for _, s := range reps {
				up = up && s.p.running() && !s.lastAlive.IsZero()
			}
			if up {
				servingAgain = time.Since(loopAt)
			}
		}
		return runawayDrained(t, a, v, reps[:], want)
	})
	t.Logf("%s: every ordinary notification delivered", time.Since(start).Round(time.Millisecond))

	// Exactly one dead letter, the looping notification, mapped guarded and
	// stopped at its deadline.
	checkOneDeadLetter(t, reps[:], "timeout")
	// The looping notification cost one exit: the broker marks it
	// redelivered after the first. (An ordinary call starved past its
	// deadline on a busy machine would cost one more, and no dead letter.)
	var exits []string
	for _, s := range reps {
		for k, how := range s.exits {
			exits = append(exits, s.name+": "+how)
			if freeze && how != "signal killed" {
				t.Errorf("%s ended with %s, want SIGKILL by its watchdog: it froze before its deadline", s.name, how)
			}
			switch how {
			case fmt.Sprintf("exit %d", daemon.ExitRunaway):
				if !strings.Contains(s.past[k].out.String(), "exiting at once without acknowledging") {
					t.Errorf("%s exited with %d without saying why", s.name, daemon.ExitRunaway)
				}
			case "signal killed":
				if !strings.Contains(s.past[k].out.String(), "no heartbeat from the daemon") {
					t.Errorf("%s was killed without its watchdog saying why", s.name)
				}
			default:
				t.Errorf("%s ended with %s, want exit %d or SIGKILL by its watchdog", s.name, how, daemon.ExitRunaway)
			}
		}
	}
	if len(exits) == 0 {
		t.Fatal("no collector exited: the looping notification never ran watched")
	}
	// Both serve: one more ordinary notification gets through.
	id := "0000runa-0000-4000-8000-ffffffffffff"
	v.Publish(t, "nova", "notifications.info", novaNotification(t, id, "compute-host-name"))
	testkit.WaitFor(t, time.Minute, "a notification after the runaway", func() bool {
		supervise()
		evs, _ := a.events(t)
		for _, e := range evs {
			if e.EventID == id {
				return true
			}
		}
		return false
	})
	worst := time.Duration(0)
	for _, s := range reps {
		worst = max(worst, s.worstGap)
	}
	t.Logf("figures: %v, seen %s after the looping notification was published; both serving again %s after it; longest /livez silence of a live process %s",
		exits, firstExit.Round(time.Millisecond), servingAgain.Round(time.Millisecond), worst.Round(time.Millisecond))
}
