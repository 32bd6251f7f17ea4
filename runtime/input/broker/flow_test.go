package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// recordingOutbox is the real outbox with a slower Append (a sleep before it
// delegates, standing in for a slow disk) that records what each call
// committed, once it returned nil; a pipelined append is recorded when it is
// handed over, and counts as committed once its Pending settled nil.
type recordingOutbox struct {
	*outbox.Outbox
	delay time.Duration

	appending atomic.Int32 // Append and AppendDeadLetters calls in progress

	mu        sync.Mutex
	committed map[string]bool            // event_ids and dead letters' message_ids
	handed    map[string]*outbox.Pending // event_ids of pipelined appends
	order     []string                   // event_ids in the order they were committed (or handed over)
	commits   int
}

var (
	_ input.Outbox          = (*recordingOutbox)(nil)
	_ input.PipelinedOutbox = (*recordingOutbox)(nil)
)

// keyedEventIDs is the event_id of each event, in order.
func keyedEventIDs(events []ledger.Keyed) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		var ev struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(e.Bytes, &ev)
		ids[i] = ev.EventID
	}
	return ids
}

func (r *recordingOutbox) BeginAppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) *outbox.Pending {
	r.appending.Add(1)
	time.Sleep(r.delay)
	p := r.Outbox.BeginAppendKeyed(ctx, events, taken, tally)
	go func() {
		<-p.Done()
		r.appending.Add(-1)
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handed == nil {
		r.handed = map[string]*outbox.Pending{}
	}
	if len(events) > 0 {
		r.commits++
	}
	for _, id := range keyedEventIDs(events) {
		r.handed[id] = p
		r.order = append(r.order, id)
	}
	return p
}

func (r *recordingOutbox) AppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) error {
	r.appending.Add(1)
	defer r.appending.Add(-1)
	time.Sleep(r.delay)
	if err := r.Outbox.AppendKeyed(ctx, events, taken, tally); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits++
	for _, id := range keyedEventIDs(events) {
		r.committed[id] = true
		r.order = append(r.order, id)
	}
	return nil
}

func (r *recordingOutbox) AppendDeadLettersCounted(ctx context.Context, letters []outbox.DeadLetter, tally *ledger.Delta) error {
	r.appending.Add(1)
	defer r.appending.Add(-1)
	if err := r.Outbox.AppendDeadLettersCounted(ctx, letters, tally); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range letters {
		var env struct {
			Msg string `json:"oslo.message"`
		}
		var inner struct {
			ID string `json:"message_id"`
		}
		_ = json.Unmarshal(l.Body, &env)
		_ = json.Unmarshal([]byte(env.Msg), &inner)
		r.committed[inner.ID] = true
	}
	return nil
}

func (r *recordingOutbox) isCommitted(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.handed[id]; p != nil {
		select {
		case <-p.Done():
			return p.Err() == nil
		default:
			return false
		}
	}
	return r.committed[id]
}

// shuffleProcessor maps after a random pause, so that the workers finish out
// of delivery order, and counts the mappings that ran while a commit was in
// progress.
type shuffleProcessor struct {
	input.Processor
	box     *recordingOutbox
	overlap *atomic.Int64
}

func (p shuffleProcessor) Process(ctx context.Context, msg pipeline.Message) pipeline.Result {
	time.Sleep(time.Duration(rand.Int64N(int64(2 * time.Millisecond))))
	if p.box.appending.Load() > 0 {
		p.overlap.Add(1)
	}
	return p.Processor.Process(ctx, msg)
}

// Under concurrency (four mapping workers finishing out of order, a commit
// in flight while later deliveries are mapped) no delivery is acknowledged
// before its event or dead letter is committed, events are committed in
// delivery order, and acknowledgements only move forward. Delivery tags are
// checked against commits: one consumer drains a pre-filled queue once, so
// delivery tag k is the k-th message published.
func TestAckNeverPrecedesCommit(t *testing.T) {
	t.Parallel() // its own virtual host
	v, _ := classicQueueVhost(t)
	const n = 400
	// byTag[k] is the id to find committed before tag k is acknowledged
	// ("" for a delivery with nothing to commit).
	byTag := make([]string, n+1)
	var wantOrder []string
	var bodies [][]byte
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("ord-%04d", i)
		switch {
		case i%37 == 0: // unparseable: a dead letter without an id
			bodies = append(bodies, []byte("not json"))
		case i%25 == 0: // a failing mapper: a dead letter
			bodies = append(bodies, note(t, id, "test.fail"))
			byTag[i] = id
		default:
			bodies = append(bodies, note(t, id, "compute.instance.exists"))
			byTag[i] = id
			wantOrder = append(wantOrder, id)
		}
	}
	v.Publish(t, "", defaultQueue, bodies...)

	rec := &recordingOutbox{Outbox: openOutbox(t, t.TempDir(), 1<<20), delay: 3 * time.Millisecond, committed: map[string]bool{}}
	var overlap atomic.Int64
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.Prefetch = 50
	opts.Workers = 4
	c := newConsumer(t, shuffleProcessor{newTestProcessor(t), rec, &overlap}, rec, opts)
	var mu sync.Mutex
	var violations []string
	var acks []uint64
	c.beforeAck = func(tag uint64) {
		mu.Lock()
		defer mu.Unlock()
		from := uint64(1)
		if len(acks) > 0 {
			from = acks[len(acks)-1] + 1
		}
		if tag < from || tag > n {
			violations = append(violations, fmt.Sprintf("ack of tag %d after an ack of tag %d", tag, from-1))
		}
		for k := from; k <= tag && k <= n; k++ {
			if id := byTag[k]; id != "" && !rec.isCommitted(id) {
				violations = append(violations, fmt.Sprintf("tag %d (%s) acknowledged before its commit", k, id))
			}
		}
		acks = append(acks, tag)
	}
	startConsumer(t, c)
	testkit.WaitFor(t, 60*time.Second, "all acknowledged", func() bool { return testutil.ToFloat64(c.m.acked) == n })

	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if len(acks) < 2 || acks[len(acks)-1] != n {
		t.Errorf("acks %v", acks)
	}
	rec.mu.Lock()
	order, commits := slices.Clone(rec.order), rec.commits
	rec.mu.Unlock()
	if !slices.Equal(order, wantOrder) {
		t.Errorf("events committed out of delivery order:\n got %v\nwant %v", order, wantOrder)
	}
	if d := rec.Outbox.DeadLetterCount(); d != int64(n/25-n/(25*37)+n/37) {
		t.Errorf("dead letters %d", d)
	}
	// The pipeline at work: deliveries were mapped while a commit was in
	// progress, and commits covered several deliveries each.
	if overlap.Load() == 0 {
		t.Error("no delivery was mapped while a commit was in flight")
	}
	if commits >= len(wantOrder) {
		t.Errorf("%d commits for %d events: no batching", commits, len(wantOrder))
	}
	t.Logf("%d acks, %d event commits, %d mappings during a commit", len(acks), commits, overlap.Load())
}

// Stopping under load: basic.cancel goes out first (at the first
// acknowledgement after the stop the broker lists no consumer on the queue),
// then what was held is committed and acknowledged. Nothing is lost, nothing
// is left unacknowledged, and no event is committed twice.
func TestGracefulStopUnderLoad(t *testing.T) {
	t.Parallel() // its own virtual host
	v, qch := classicQueueVhost(t)
	const n = 400
	ids := publishNotes(t, v, "stop", n)

	ob := openOutbox(t, t.TempDir(), 1<<20)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.Prefetch = 50
	opts.Workers = 2
	c := newConsumer(t, slowProcessor{newTestProcessor(t), 2 * time.Millisecond}, ob, opts)
	var stopping atomic.Bool
	acksAfterStop, consumersAtFirst := 0, -1
	var hookErr error
	c.beforeAck = func(uint64) { // the session goroutine
		if !stopping.Load() {
			return
		}
		if acksAfterStop++; acksAfterStop == 1 {
			q, err := qch.QueueDeclarePassive(defaultQueue, true, false, false, false, nil)
			consumersAtFirst, hookErr = q.Consumers, err
		}
	}
	r := startConsumer(t, c)
	testkit.WaitFor(t, 30*time.Second, "draining", func() bool { return testutil.ToFloat64(c.m.acked) >= 50 })
	stopping.Store(true)
	r.stop()
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if acksAfterStop == 0 {
		t.Fatal("nothing held was committed and acknowledged after the stop")
	}
	if consumersAtFirst != 0 {
		t.Errorf("%d consumers on the queue at the first acknowledgement after the stop: basic.cancel did not come first", consumersAtFirst)
	}
	counts, ok := v.QueueCounts(t, defaultQueue)
	if !ok || counts.Unacked != 0 {
		t.Errorf("%d deliveries left unacknowledged", counts.Unacked)
	}
	queued := v.queuedIDs(t, defaultQueue)
	got := outboxIDs(t, ob)
	for _, id := range ids {
		switch {
		case got[id] > 1:
			t.Errorf("%s committed %d times", id, got[id])
		case got[id] == 0 && !queued[id]:
			t.Errorf("%s lost", id)
		case got[id] == 1 && queued[id]:
			t.Errorf("%s committed and still queued (not acknowledged)", id)
		}
	}
	if float64(len(got)) != testutil.ToFloat64(c.m.acked) {
		t.Errorf("%d in the outbox, %v acknowledged", len(got), testutil.ToFloat64(c.m.acked))
	}
	t.Logf("stopped after %d of %d; %d acknowledgements after the stop", len(got), n, acksAfterStop)
}
