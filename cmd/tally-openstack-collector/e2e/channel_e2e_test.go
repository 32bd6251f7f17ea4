package e2e

// End-to-end tests of the local message channel: the built binary with
// CHANNEL_SOCKET set, the Go client and the publish and tap commands as
// clients, the real RabbitMQ and the reference Reporting API.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// channelDir is a directory for the socket that every user may enter.
func channelDir(t *testing.T) string {
	t.Helper()
	return testkit.PublicTempDir(t, "tally-e2e-channel-")
}

// newChannelCollector makes a collector on the nova exchange whose channel
// socket, sock, lies in a directory every user may enter, and the stack
// around it; the collector is not yet started.
func newChannelCollector(t *testing.T) (b bins, a *api, c *collector, sock string) {
	t.Helper()
	b, v, a := stack(t, "nova")
	sock = filepath.Join(channelDir(t), "channel.sock")
	c = newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_EXCHANGES=nova", "TALLY_OSC_CHANNEL_SOCKET="+sock)
	return b, a, c, sock
}

// runPublish runs the publish command of the collector binary bin on the
// channel socket sock, with args and stdin, and answers its exit code (-1
// if it did not run) and what it printed.
func runPublish(bin, sock, stdin string, args ...string) (int, string) {
	cmd := exec.Command(bin, append([]string{"publish", "--channel", sock}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		return -1, fmt.Sprintf("%v\n%s", err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func usageLine(id string) string {
	return fmt.Sprintf(`{"id":%q,"time":"2026-02-01T10:00:00Z","type":"license.checkout","resource_type":"license",`+
		`"resource_id":"matlab","project_id":"p1","attributes":{"seats":1}}`, id)
}

// apiIDs is the set of event ids the Reporting API holds.
func apiIDs(t *testing.T, a *api) map[string]bool {
	t.Helper()
	events, _ := a.events(t)
	ids := make(map[string]bool, len(events))
	for _, ev := range events {
		ids[ev.EventID] = true
	}
	return ids
}

// TestEndToEndChannelSurvivesDaemonRestart: a publisher started before the
// daemon queues until it comes; the daemon is killed (SIGKILL) in the middle
// of the stream and started again on the same outbox. Every message the
// publisher saw acknowledged reaches the Reporting API, and in the end every
// message is acknowledged. Then the publish command, started while the
// daemon is stopped, waits for it and exits 0 once all its lines are
// committed.
func TestEndToEndChannelSurvivesDaemonRestart(t *testing.T) {
	b, a, c, sock := newChannelCollector(t)

	var mu sync.Mutex
	acked := map[uint64]bool{}
	ids := map[uint64]string{}
	pub, err := client.New(client.Options{Socket: sock, ReconnectInterval: 100 * time.Millisecond,
		QueueLimitBytes: 64 << 10,
		OnSettled: func(s client.Settlement) {
			mu.Lock()
			defer mu.Unlock()
			if s.Status != wire.Committed {
				t.Errorf("seq %d settled %s %s", s.Seq, s.Status, s.Reason)
			}
			acked[s.Seq] = true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background(), true)
	const n = 4000
	published := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for i := range n {
			id := fmt.Sprintf("chan-%d", i)
			seq, err := pub.PublishWait(ctx, client.Message{Tag: "usage.license", Type: client.JSON, Data: []byte(usageLine(id))})
			if err != nil {
				published <- err
				return
			}
			mu.Lock()
			ids[seq] = id
			mu.Unlock()
			if i%100 == 99 {
				time.Sleep(10 * time.Millisecond) // a stream, not one burst
			}
		}
		published <- nil
	}()
	testkit.WaitFor(t, 30*time.Second, "the publisher's queue full before the daemon", func() bool { return pub.Stats().NoBufs > 0 })

	c.start(t)
	c.waitReady(t)
	testkit.WaitFor(t, 60*time.Second, "a first part acknowledged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 800
	})
	c.p.kill9(t)
	mu.Lock()
	atKill := len(acked)
	mu.Unlock()
	c.start(t)
	c.waitReady(t)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := pub.Stats()
	if st.Acked != n || st.Reconnects < 1 {
		t.Fatalf("publisher stats %+v", st)
	}
	mu.Lock()
	want := make([]string, 0, len(acked))
	for seq := range acked {
		want = append(want, ids[seq])
	}
	mu.Unlock()
	testkit.WaitFor(t, 2*time.Minute, "every acknowledged message at the Reporting API", func() bool {
		got := apiIDs(t, a)
		for _, id := range want {
			if !got[id] {
				return false
			}
		}
		return true
	})
	s := a.stats(t)
	t.Logf("%d acknowledged before the kill; %d resent after it; the API holds %d, %d duplicates", atKill, st.Resent, s.Accepted, s.Duplicates)

	// The publish command, started while the daemon is stopped.
	if code, _ := c.p.stop(t, 60*time.Second); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	var lines strings.Builder
	for i := range 300 {
		lines.WriteString(usageLine(fmt.Sprintf("cli-%d", i)) + "\n")
	}
	file := filepath.Join(t.TempDir(), "usage.jsonl")
	if err := os.WriteFile(file, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := startProc(t, "publish", b.collector, []string{"publish", "--channel", sock, "usage.license", file}, os.Environ())
	time.Sleep(500 * time.Millisecond)
	if !cli.running() {
		t.Fatalf("publish did not wait for the daemon: %v\n%s", cli.err, cli.out.String())
	}
	c.start(t)
	c.waitReady(t)
	select {
	case <-cli.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("publish did not finish")
	}
	if cli.err != nil || !strings.Contains(cli.out.String(), "publish: 300 messages, 300 committed") {
		t.Fatalf("publish: %v\n%s", cli.err, cli.out.String())
	}
	testkit.WaitFor(t, 2*time.Minute, "the command's messages at the Reporting API", func() bool {
		got := apiIDs(t, a)
		for i := range 300 {
			if !got[fmt.Sprintf("cli-%d", i)] {
				return false
			}
		}
		return true
	})
	checkLedgerTotals(t, c, 300)
}

// lineReader collects a child process's standard output line by line.
type lineReader struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineReader) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		l.lines = append(l.lines, sc.Text())
		l.mu.Unlock()
	}
}

func (l *lineReader) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// startTap runs the tap command with its standard output collected.
func startTap(t *testing.T, bin string, args ...string) (*lineReader, *exec.Cmd, *testkit.SyncBuffer) {
	t.Helper()
	if bin != "setpriv" {
		args = append([]string{"tap"}, args...)
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &testkit.SyncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lr := &lineReader{}
	go lr.consume(out)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("tap %v stderr:\n%s", args, errb.String())
		}
	})
	return lr, cmd, errb
}

// TestEndToEndTapDuringAMQPStream: while notifications stream in from
// RabbitMQ, `tap` prints the mapped events whose type matches, live, and
// `tap --raw` the notifications, redacted (the context's token never shows);
// events published on the channel show on the same tap. The channel's
// statistics are on /metrics.
func TestEndToEndTapDuringAMQPStream(t *testing.T) {
	sock := filepath.Join(channelDir(t), "channel.sock")
	// Every user may connect: what each sees is up to the credentials.
	e := setupE2E(t, "TALLY_OSC_CHANNEL_SOCKET="+sock, "TALLY_OSC_CHANNEL_SOCKET_MODE=0666")

	mapped, _, _ := startTap(t, e.b.collector, "--channel", sock, `^compute\.instance\.`)
	raw, _, _ := startTap(t, e.b.collector, "--channel", sock, "--raw", `^compute\.instance\.`)
	all, _, _ := startTap(t, e.b.collector, "--channel", sock, `.`)
	// Another user, not in the daemon's group, taps everything too.
	other := otherUser(t, "tally-chan-b")
	stranger, _, _ := startTap(t, "setpriv", fmt.Sprintf("--reuid=%d", other.UID), fmt.Sprintf("--regid=%d", other.GID),
		"--clear-groups", publicBinary(t, e.b.collector), "tap", "--channel", sock, `.`)
	testkit.WaitFor(t, 30*time.Second, "four taps subscribed", func() bool {
		return sum(e.c.metrics(t), "tally_collector_channel_tap_subscriptions") == 4
	})

	const n = 200
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n)
	e.waitDelivered(t, n, 2*time.Minute)
	nova := 0
	for i := range n {
		if strings.HasPrefix(e.corpus.items[i%len(e.corpus.items)].EventType, "compute.instance.") {
			nova++
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the taps' lines", func() bool {
		return len(mapped.snapshot()) >= nova && len(raw.snapshot()) >= nova && len(all.snapshot()) >= n
	})
	for _, l := range mapped.snapshot() {
		var ev struct {
			EventID   string `json:"event_id"`
			EventType string `json:"event_type"`
			Source    struct {
				Exchange string `json:"exchange"`
			} `json:"source"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || !strings.HasPrefix(ev.EventType, "compute.instance.") ||
			!strings.HasPrefix(ev.EventID, e.prefix) || ev.Source.Exchange != "nova" {
			t.Fatalf("mapped tap line %s (%v)", l, err)
		}
	}
	secret := secretFor(e.prefix)
	for _, l := range raw.snapshot() {
		if strings.Contains(l, secret) || !strings.Contains(l, `"exchange":"nova"`) || !strings.Contains(l, `"message_id":"`+e.prefix) {
			t.Fatalf("raw tap line %s", l)
		}
	}
	if got := len(mapped.snapshot()); got != nova {
		t.Fatalf("the mapped tap printed %d lines for %d compute.instance notifications", got, nova)
	}

	// A channel message shows on the catch-all tap too, and on the other
	// user's, as it is readable by everyone (0444). Nothing from the bus
	// (0440, the daemon's user and group) reached that user.
	cmd := exec.Command(e.b.collector, "publish", "--channel", sock, "--type", "STRING", "--perm", "0444", "usage.meter")
	cmd.Stdin = strings.NewReader("id=meter-1 type=meter.read resource_type=meter resource_id=m1 project_id=p1 kwh=1.5\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	testkit.WaitFor(t, 30*time.Second, "the channel's event on the tap", func() bool {
		for _, l := range all.snapshot() {
			if strings.Contains(l, `"event_id":"meter-1"`) && strings.Contains(l, `"exchange":"channel"`) {
				return true
			}
		}
		return false
	})

	testkit.WaitFor(t, 30*time.Second, "the channel's event on the other user's tap", func() bool { return len(stranger.snapshot()) > 0 })
	if lines := stranger.snapshot(); len(lines) != 1 || !strings.Contains(lines[0], `"event_id":"meter-1"`) {
		t.Fatalf("the other user's tap printed %d lines: %q", len(lines), lines)
	}

	m := e.c.metrics(t)
	if got := sum(m, "tally_collector_channel_tap_dropped_total", `reason="permission"`); got < float64(n) {
		t.Errorf("tap_dropped_total{permission} = %v, want at least %d (the bus events the other user may not see)", got, n)
	}
	for name, min := range map[string]float64{
		"tally_collector_channel_received_total":         1,
		"tally_collector_channel_committed_total":        1,
		"tally_collector_channel_events_committed_total": 1,
		"tally_collector_channel_tap_delivered_total":    float64(2*nova + n),
	} {
		if got := sum(m, name); got < min {
			t.Errorf("%s = %v, want at least %v", name, got, min)
		}
	}
	if got := sum(m, "tally_collector_channel_tap_dropped_total", `reason="slow_subscriber"`); got != 0 {
		t.Errorf("taps that keep up lost %v events", got)
	}
	checkLedgerTotals(t, e.c, n)
}

// TestEndToEndPublishReportsWhatWasNotCommitted: publish exits 1 and names
// the lines the daemon did not commit (an unclaimed tag, a line that is not
// JSON).
func TestEndToEndPublishReportsWhatWasNotCommitted(t *testing.T) {
	b, a, c, sock := newChannelCollector(t)
	c.start(t)
	c.waitReady(t)

	run := func(stdin string, args ...string) (int, string) { return runPublish(b.collector, sock, stdin, args...) }
	code, out := run(usageLine("ok-1")+"\nnot json\n"+usageLine("ok-2")+"\n", "usage.license")
	if code != 1 || !strings.Contains(out, "stdin:2: channel client: invalid message") || !strings.Contains(out, "3 messages, 2 committed") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out = run(usageLine("nobody")+"\n", "nobody.claims.this")
	if code != 1 || !strings.Contains(out, "stdin:1: skipped unclaimed") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out = run("", "--type", "XML", "usage")
	if code != 2 {
		t.Fatalf("bad --type: exit %d:\n%s", code, out)
	}
	// --no-wait: written to the socket, then gone; the daemon commits them.
	code, out = run(usageLine("nowait-1")+"\n"+usageLine("nowait-2")+"\n", "--no-wait", "usage.license")
	if code != 0 || !strings.Contains(out, "2 messages written to the socket") {
		t.Fatalf("--no-wait: exit %d:\n%s", code, out)
	}
	ids := apiIDsEventually(t, a, "ok-1", "ok-2", "nowait-1", "nowait-2")
	if ids["nobody"] {
		t.Fatal("an unclaimed message reached the API")
	}
	// The ledger: five messages consumed on the channel, four committed,
	// the unclaimed one skipped.
	tot, table := c.checkLedger(t)
	if tot.Consumed != 5 || tot.Committed != 4 || tot.Skipped["unclaimed"] != 1 || !strings.Contains(table, "channel ") {
		t.Fatalf("ledger:\n%s", table)
	}
}

// otherUser is a system user of the tests, created once (useradd).
func otherUser(t *testing.T, name string) client.Cred {
	t.Helper()
	uid, gid := testkit.SystemUser(t, name)
	testkit.LookPath(t, "setpriv", "util-linux")
	return client.Cred{UID: uid, GID: gid}
}

// publicBinary is a copy of bin that every user may run.
func publicBinary(t *testing.T, bin string) string {
	t.Helper()
	dst := filepath.Join(channelDir(t), filepath.Base(bin))
	b := testkit.ReadFile(t, bin)
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func apiIDsEventually(t *testing.T, a *api, want ...string) map[string]bool {
	t.Helper()
	var got map[string]bool
	testkit.WaitFor(t, time.Minute, "events at the Reporting API", func() bool {
		got = apiIDs(t, a)
		for _, id := range want {
			if !got[id] {
				return false
			}
		}
		return true
	})
	return got
}
