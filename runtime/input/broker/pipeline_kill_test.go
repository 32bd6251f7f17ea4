package broker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// childKillAtEnv names the point at which pipelineKillChild kills itself.
const childKillAtEnv = "TALLY_BROKER_TEST_KILL_AT"

// The kill points of TestKillBetweenPipelinedStages. A batch goes through
// two stages: handed to the outbox (sequenced, given to the store's writer,
// not yet durable), then durable and not yet acknowledged.
const (
	// killHandedBeforeDurable: batch N+1 handed over while batch N is not
	// yet durable.
	killHandedBeforeDurable = "handed-before-durable"
	// killDurableThenHanded: batch N+1 handed over after batch N became
	// durable and before N was acknowledged.
	killDurableThenHanded = "durable-then-handed"
	// killDurableWhileHanded: batch N durable and not acknowledged while
	// batch N+1 is handed over and not yet durable.
	killDurableWhileHanded = "durable-while-handed"
)

func settledNow(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pipelineKillChild is the collector process of
// TestKillBetweenPipelinedStages: it drains a backlog with two batches
// committing at once and kills itself with SIGKILL at the first moment the
// stage named by at is reached, after writing "killing" to stderr. If it
// never is, it exits with status 4.
func pipelineKillChild(at string) int {
	c, err := newChildConsumer(200*time.Microsecond, func(opts *Options) {
		opts.Logger = opts.Logger.Level(zerolog.WarnLevel)
		opts.BatchMax = 5
		opts.CommitLinger = -1
		opts.CommitPipeline = 2
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	kill := func(what string) {
		fmt.Fprintln(os.Stderr, "killing:", what)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	var (
		mu          sync.Mutex
		handed      uint64 // batches handed to the outbox
		lastSettled <-chan struct{}
		durable     uint64        // batches durable (afterCommit)
		acked       atomic.Uint64 // batches acknowledged
	)
	// The first batches are acknowledged; the kill comes at batch minBatch or
	// later.
	const minBatch = 6
	c.handedOff = func(n uint64, settled, prev <-chan struct{}) {
		mu.Lock()
		handed, lastSettled = n, settled
		mu.Unlock()
		if n < minBatch {
			return
		}
		switch at {
		case killHandedBeforeDurable:
			if !settledNow(prev) {
				kill(fmt.Sprintf("batch %d handed over, batch %d not yet durable", n, n-1))
			}
		case killDurableThenHanded:
			if settledNow(prev) && acked.Load() < n-1 {
				kill(fmt.Sprintf("batch %d handed over, batch %d durable and not acknowledged", n, n-1))
			}
		}
	}
	if at == killDurableThenHanded {
		// Batch N+1 is handed over only once N is durable, and N's
		// acknowledgement waits (a while at most) for that hand-over.
		c.beforeHandOff = func(n uint64, prev <-chan struct{}) {
			if n >= minBatch {
				<-prev
			}
		}
	}
	c.beforeAck = func(uint64) {
		k := acked.Load() + 1 // the batch being acknowledged
		if at == killDurableThenHanded && k >= minBatch-1 {
			// Batch k is durable and held unacknowledged until the kill,
			// which comes as batch k+1 is handed over (handedOff). Holding
			// it, rather than waiting for the hand-over and then going on,
			// keeps its ack from reaching the broker between the kill
			// decision and the signal.
			time.Sleep(10 * time.Second)
		}
		acked.Add(1)
	}
	c.afterCommit = func() {
		mu.Lock()
		durable++
		k, h, next := durable, handed, lastSettled
		mu.Unlock()
		if at == killDurableWhileHanded && k >= minBatch && h > k && !settledNow(next) {
			kill(fmt.Sprintf("batch %d durable and not acknowledged, batch %d handed over and not durable", k, h))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	_ = c.Run(ctx)
	fmt.Fprintln(os.Stderr, "child: the kill point was never reached")
	return 4
}

// The collector dies between the two stages of pipelined commits, in each
// order: nothing acknowledged is missing from the outbox, every delivery is
// either there or back in the queue, and what was durable and not
// acknowledged is redelivered.
func TestKillBetweenPipelinedStages(t *testing.T) {
	t.Parallel() // its own virtual host
	for _, at := range []string{killHandedBeforeDurable, killDurableThenHanded, killDurableWhileHanded} {
		t.Run(at, func(t *testing.T) {
			v, _ := classicQueueVhost(t)
			const n = 600
			ids := publishNotes(t, v, "pipe", n)

			dir := t.TempDir()
			ws, stderr, err := runChild(t, v, dir, syscall.SIGTERM, childKillAtEnv+"="+at)
			if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(stderr, "killing:") {
				t.Fatalf("child did not kill itself at %s: %v\n%s", at, err, stderr)
			}
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "killing:") {
					t.Log(l)
				}
			}
			k := afterKill(t, v, dir, ids)
			queued, acked, committedNotAcked := k.queued, k.acked, k.committedNotAcked
			for _, id := range ids {
				if k.inOutbox[id] > 1 {
					t.Errorf("%s in the outbox %d times", id, k.inOutbox[id])
				}
			}
			if acked == 0 || acked+len(queued) != n {
				t.Fatalf("after the kill: %d acknowledged, %d queued of %d", acked, len(queued), n)
			}
			if at != killHandedBeforeDurable && committedNotAcked == 0 {
				t.Errorf("after the kill at %s nothing was durable and not acknowledged", at)
			}
			t.Logf("after the kill: %d acknowledged, %d committed and not acknowledged, %d back in the queue",
				acked, committedNotAcked, len(queued))
		})
	}
}
