package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

const (
	childEnv      = "TALLY_BROKER_TEST_CHILD"
	childVhostEnv = "TALLY_BROKER_TEST_VHOST"
	childDirEnv   = "TALLY_BROKER_TEST_DIR"
)

// childMain is the collector process of TestKillBetweenCommitAndAck: it
// drains a backlog with the pipelined consumer (several mapping workers, a
// commit in flight while the next deliveries are mapped) and kills itself
// with SIGKILL right after its third commit, before acknowledging it.
func childMain() int {
	if at := os.Getenv(childKillAtEnv); at != "" {
		return pipelineKillChild(at)
	}
	c, err := newChildConsumer(time.Millisecond, func(*Options) {})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	commits := 0
	c.afterCommit = func() {
		if commits++; commits == 3 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	_ = c.Run(context.Background())
	return 3
}

// newChildConsumer is the consumer of a collector child: four workers
// mapping with a pause of delay, on the queue of the virtual host named in
// its environment, committing to an outbox in the directory named there, and
// logging to stderr; edit adjusts its options.
func newChildConsumer(delay time.Duration, edit func(*Options)) (*Consumer, error) {
	v := vhostByName(os.Getenv(childVhostEnv))
	ob, err := openChildOutbox(os.Getenv(childDirEnv))
	if err != nil {
		return nil, err
	}
	opts := testOptions(v, nil, "nova")
	opts.Logger = zerolog.New(os.Stderr)
	opts.Workers = 4
	edit(&opts)
	return New(slowProcessor{newTestProcessor(nil), delay}, ob, opts)
}

// killed is what a test finds after a collector child died by SIGKILL.
type killed struct {
	queued            map[string]bool // ids back in the queue
	ob                *outbox.Outbox  // the child's outbox, opened
	inOutbox          map[string]int  // id -> copies in the outbox
	acked             int             // ids the broker no longer holds
	committedNotAcked int             // ids both in the outbox and back in the queue
}

// runChild runs the test binary as a collector child (childMain) on v's
// queue with its outbox in dir and env added to its environment, and waits
// for it; a child still running after a minute is sent onTimeout. It returns
// how the child ended, what it wrote on its standard error and Wait's error.
func runChild(t *testing.T, v *vhost, dir string, onTimeout syscall.Signal, env ...string) (syscall.WaitStatus, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childVhostEnv+"="+v.Name, childDirEnv+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	guard := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Signal(onTimeout) })
	err := cmd.Wait()
	guard.Stop()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws, stderr.String(), err
}

// afterKill waits until the dead child's deliveries are back in the queue,
// opens its outbox in dir and sorts ids; an id acknowledged (no longer
// queued) and not in the outbox fails the test: an ack preceded its commit.
func afterKill(t *testing.T, v *vhost, dir string, ids []string) killed {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the dead collector's deliveries back in the queue", func() bool {
		counts, ok := v.QueueCounts(t, defaultQueue)
		return ok && counts.Unacked == 0 && counts.Consumers == 0
	})
	k := killed{queued: v.queuedIDs(t, defaultQueue), ob: openOutbox(t, dir, 1000)}
	k.inOutbox = outboxIDs(t, k.ob)
	for _, id := range ids {
		switch {
		case !k.queued[id] && k.inOutbox[id] == 0:
			t.Errorf("%s acknowledged but not in the outbox", id)
		case !k.queued[id]:
			k.acked++
		case k.inOutbox[id] > 0:
			k.committedNotAcked++
		}
	}
	return k
}

// The collector dies between a commit and its ack while it drains a backlog
// through the pipeline: every delivery the broker no longer holds was
// committed before the kill (an ack never preceded its commit), the batch
// committed but not acknowledged is redelivered and committed again with the
// same event_ids (duplicates the Reporting API counts), and nothing is lost.
func TestKillBetweenCommitAndAck(t *testing.T) {
	t.Parallel() // its own virtual host
	v, _ := classicQueueVhost(t)
	const n = 300
	ids := publishNotes(t, v, "kill", n)

	dir := t.TempDir()
	ws, stderr, err := runChild(t, v, dir, syscall.SIGKILL)
	if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, stderr)
	}
	k := afterKill(t, v, dir, ids)
	queued, ob, acked, committedNotAcked := k.queued, k.ob, k.acked, k.committedNotAcked
	if acked == 0 || committedNotAcked == 0 || acked+len(queued) != n {
		t.Fatalf("after the kill: %d acknowledged, %d committed and not acknowledged, %d queued of %d",
			acked, committedNotAcked, len(queued), n)
	}
	t.Logf("after the kill: %d acknowledged, %d committed and not acknowledged, %d back in the queue", acked, committedNotAcked, len(queued))

	c := newConsumer(t, newTestProcessor(t), ob, testOptions(v, &testkit.SyncBuffer{}, "nova"))
	startConsumer(t, c)
	testkit.WaitFor(t, 30*time.Second, "redeliveries acknowledged", func() bool {
		return testutil.ToFloat64(c.m.acked) == float64(len(queued))
	})
	after := outboxIDs(t, ob)
	for _, id := range ids {
		want := 1
		if queued[id] && k.inOutbox[id] > 0 {
			want = 2 // committed, killed before the ack, redelivered
		}
		if after[id] != want {
			t.Errorf("%s in the outbox %d times, want %d", id, after[id], want)
		}
	}
	if n, _ := v.QueueState(t, defaultQueue); n != 0 {
		t.Errorf("%d messages left", n)
	}

	// The ledger kept step with the kill: every delivery the dead process
	// committed is counted consumed and committed, the redelivered ones
	// again; once drained, the events committed twice are counted as copies,
	// so the API is expected to hold each notification once.
	ctx := context.Background()
	for {
		first, last, evs, err := ob.Peek(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		if err := ob.Delivered(ctx, first, last, -1); err != nil {
			t.Fatal(err)
		}
	}
	led, err := ob.Ledger(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var tot ledger.Counts
	for _, c := range led.Intake {
		if !c.Balanced() {
			t.Errorf("ledger row does not balance: %+v", c)
		}
		tot.Add(c)
	}
	var expected, copies int64
	for _, c := range led.Stored {
		expected += c.Expected()
		copies += c.Copies
	}
	committed := int64(acked + committedNotAcked + len(queued))
	if tot.Consumed != committed || tot.Committed != committed || tot.Events != committed || tot.Delivered != committed ||
		copies != int64(committedNotAcked) || expected != n {
		t.Errorf("ledger: %+v, %d copies, %d expected at the API; want %d committed, %d copies, %d expected",
			tot, copies, expected, committed, committedNotAcked, n)
	}
}

// At the buffer bound the consumer stops taking deliveries and returns what
// it holds; it resumes once the outbox has room, and nothing is lost.
func TestBackPressureAtBound(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	ob := openOutbox(t, t.TempDir(), 5)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.BatchMax = 5
	opts.PauseMin, opts.PauseMax = time.Second, time.Second
	c := newConsumer(t, newTestProcessor(t), ob, opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready", func() bool { return r.Ready() == nil })
	const n = 12
	var bodies [][]byte
	for i := 0; i < n; i++ {
		bodies = append(bodies, note(t, fmt.Sprintf("bp-%02d", i), "compute.instance.exists"))
	}
	v.Publish(t, "nova", "notifications.info", bodies...)
	testkit.WaitFor(t, 15*time.Second, "paused at the bound", func() bool {
		return testutil.ToFloat64(c.m.paused) == 1 && testutil.ToFloat64(c.m.nacked) > 0
	})
	if d := ob.Depth(); d > 5 {
		t.Fatalf("outbox depth %d over its bound", d)
	}
	// Paused: nothing is held unacknowledged, the rest waits on the bus.
	testkit.WaitFor(t, 15*time.Second, "held deliveries requeued", func() bool {
		ready, _ := v.QueueState(t, defaultQueue)
		return int64(ready) == n-ob.Depth()
	})
	if r.Ready() != nil {
		t.Errorf("a pause is back-pressure, not unreadiness: %v", r.Ready())
	}
	// Drain as the sender would; consumption resumes and completes.
	seen := map[string]int{}
	testkit.WaitFor(t, 60*time.Second, "every notification through the outbox", func() bool {
		first, last, events, err := ob.Peek(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			seen[eventID(t, e)]++
		}
		if len(events) > 0 {
			if err := ob.Delete(context.Background(), first, last); err != nil {
				t.Fatal(err)
			}
		}
		return len(seen) == n
	})
	testkit.WaitFor(t, 15*time.Second, "all acknowledged", func() bool { return testutil.ToFloat64(c.m.acked) == n })
	if ready, _ := v.QueueState(t, defaultQueue); ready != 0 {
		t.Errorf("%d left in the queue", ready)
	}
}

// While the outbox refuses inserts nothing is acknowledged and the batch is
// requeued about once per second; once it accepts again everything arrives.
func TestRefusedInsertRequeues(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	dir := t.TempDir()
	refusing, err := openChildOutboxWithReserve(dir, 1<<62) // "disk full": every insert refused
	if err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, newTestProcessor(t), refusing, testOptions(v, &testkit.SyncBuffer{}, "nova"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready", func() bool { return r.Ready() == nil })
	v.Publish(t, "nova", "notifications.info", note(t, "ref-1", "compute.instance.exists"), note(t, "ref-2", "compute.instance.exists"))
	testkit.WaitFor(t, 15*time.Second, "first requeue", func() bool { return testutil.ToFloat64(c.m.nacked) >= 2 })
	start, before := time.Now(), testutil.ToFloat64(c.m.nacked)
	time.Sleep(2500 * time.Millisecond)
	rounds := (testutil.ToFloat64(c.m.nacked) - before) / 2
	elapsed := time.Since(start).Seconds()
	if rounds > elapsed+1 {
		t.Errorf("%v requeue rounds in %.1fs: more than one per second", rounds, elapsed)
	}
	if testutil.ToFloat64(c.m.acked) != 0 {
		t.Fatal("acknowledged without a commit")
	}
	r.stop()
	refusing.Close()
	ob := openOutbox(t, dir, 100)
	c2, err := New(newTestProcessor(t), ob, testOptions(v, &testkit.SyncBuffer{}, "nova"))
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c2)
	testkit.WaitFor(t, 15*time.Second, "accepted", func() bool {
		ids := outboxIDs(t, ob)
		return ids["ref-1"] == 1 && ids["ref-2"] == 1
	})
}

// slowProcessor gives the consumer something to be in the middle of.
type slowProcessor struct {
	input.Processor
	d time.Duration
}

func (p slowProcessor) Process(ctx context.Context, msg pipeline.Message) pipeline.Result {
	time.Sleep(p.d)
	return p.Processor.Process(ctx, msg)
}

// Every connection of the vhost closed by the broker mid-stream: the consumer
// reconnects, deliveries of the old channel are redelivered (never acked on
// the new one), and every confirmed notification reaches the outbox.
func TestCloseAllConnectionsMidStream(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	ob := openOutbox(t, t.TempDir(), 100000)
	logs := &testkit.SyncBuffer{}
	c := newConsumer(t, slowProcessor{newTestProcessor(t), 3 * time.Millisecond}, ob, testOptions(v, logs, "nova"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready", func() bool { return r.Ready() == nil })

	var mu sync.Mutex
	var confirmed []string
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		i := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			conn, err := amqp.Dial(v.URL())
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			for err == nil {
				select {
				case <-stop:
					conn.Close()
					return
				default:
				}
				id := fmt.Sprintf("cac-%05d", i)
				var dc *amqp.DeferredConfirmation
				dc, err = ch.PublishWithDeferredConfirm("nova", "notifications.info", false, false,
					amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: note(t, id, "compute.instance.exists")})
				if err == nil && dc.Wait() {
					mu.Lock()
					confirmed = append(confirmed, id)
					mu.Unlock()
				}
				i++
			}
			conn.Close()
		}
	}()
	testkit.WaitFor(t, 15*time.Second, "stream flowing", func() bool { return testutil.ToFloat64(c.m.acked) > 50 })
	testkit.Rabbitmqctl(t, "close_all_connections", "-p", v.Name, "broker test: closing mid-stream")
	testkit.WaitFor(t, 20*time.Second, "reconnected", func() bool {
		return testutil.ToFloat64(c.m.reconnects) >= 1 && r.Ready() == nil
	})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-pubDone
	mu.Lock()
	want := append([]string(nil), confirmed...)
	mu.Unlock()
	// The acknowledged count is no measure of completion here: an ack the
	// closed connection never delivered is acknowledged again after the
	// redelivery, and counted twice. Wait for the ids themselves.
	var got map[string]int
	testkit.WaitUntil(t, 60*time.Second, "every notification the broker confirmed to reach the outbox", func() (bool, string) {
		got = outboxIDs(t, ob)
		var lost []string
		for _, id := range want {
			if got[id] == 0 {
				lost = append(lost, id)
			}
		}
		if len(lost) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d confirmed by the broker but lost, first %s (%d confirmed, %d in the outbox)", len(lost), lost[0], len(want), len(got))
	})
	if strings.Contains(logs.String(), "unknown delivery tag") {
		t.Error("an ack went to a channel that did not deliver it")
	}
	t.Logf("%d confirmed, %d distinct in the outbox, %v reconnects", len(want), len(got), testutil.ToFloat64(c.m.reconnects))
}
