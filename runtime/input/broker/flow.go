package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// item is one delivery on its way from the channel to its acknowledgement.
// The worker that received it fills it, holds it (sess.hold), maps it, writes
// res and letter and then sets done under the flow's lock. The session
// goroutine reads res and letter only after it has seen done, under that lock.
type item struct {
	tag         uint64
	body        []byte
	exchange    string
	routingKey  string
	compression string
	first       bool // firstDelivery: may run a built-in module watched

	res    pipeline.Result
	letter *outbox.DeadLetter
	done   bool   // under sess.mu
	epoch  uint64 // sess.epoch when held: a requeue since drops it
	taken  time.Time
}

// source is the delivery channel the workers receive from, as the session
// last published it (sess.src); d is nil while nothing is to be taken (a
// wait after a refused commit, a pause). The session retires a source by
// publishing the next one and closing off, and then waits for left: closed
// once no worker is between entering the source and holding what it took
// from it, so after retire every delivery taken from d is held, or dropped
// as requeued.
type source struct {
	d      <-chan amqp.Delivery
	off    chan struct{}
	left   chan struct{}
	state  atomic.Int64 // workers inside, plus retiredBit once retired
	ended  atomic.Bool  // a worker found d closed
	retire sync.Once
}

const retiredBit = int64(1) << 62

func newSource(d <-chan amqp.Delivery) *source {
	return &source{d: d, off: make(chan struct{}), left: make(chan struct{})}
}

// enter counts a worker in, unless the source is retired.
func (src *source) enter() bool {
	for {
		v := src.state.Load()
		if v&retiredBit != 0 {
			return false
		}
		if src.state.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// leave counts a worker out; the last one out of a retired source closes left.
func (src *source) leave() {
	if src.state.Add(-1) == retiredBit {
		close(src.left)
	}
}

// retireAndWait sends the workers off the source and waits until none is inside.
func (src *source) retireAndWait() {
	src.retire.Do(func() {
		v := src.state.Or(retiredBit)
		close(src.off)
		if v == 0 {
			close(src.left)
		}
	})
	<-src.left
}

// batch is what one commit writes: the events and dead letters of a run of
// consecutive deliveries, acknowledged together up to lastTag.
type batch struct {
	events  []ledger.Keyed
	letters []outbox.DeadLetter
	lastTag uint64
	n       int
	tapped  []Committed // only while Options.Tap is active
	// The ledger: every delivery counted as consumed with its outcome, the
	// mapped and skipped ones in the events' transaction (or, without
	// events, the dead letters'), the dead-lettered ones in the dead
	// letters'; all in the hour taken, when the first was taken.
	taken     time.Time
	tally     ledger.Delta
	deadTally ledger.Delta
}

func (s *sess) consume() error {
	s.tag = fmt.Sprintf("tally-openstack-collector-%d-%d", os.Getpid(), s.c.tagSeq.Add(1))
	d, err := s.ch.Consume(s.c.opts.Queue, s.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %q: %w", s.c.opts.Queue, err)
	}
	s.deliveries = d
	return nil
}

// commitWait is a batch handed to the outbox: wait answers once it is
// durable or failed.
type commitWait struct {
	b    *batch
	wait func() error
}

// commitResult is a batch settled, in the order the batches were cut.
type commitResult struct {
	b   *batch
	err error
}

// startFlow starts the mapping workers, the committer and the settler of
// the session.
func (s *sess) startFlow() {
	depth := s.commitDepth()
	s.quit = make(chan struct{})
	s.kick = make(chan struct{}, 1)
	s.next = 1 // a channel's first delivery tag
	s.src.Store(newSource(s.deliveries))
	s.commitReq = make(chan *batch, depth)
	s.commitWait = make(chan commitWait, depth)
	s.commitDone = make(chan commitResult, depth)
	for range s.c.opts.Workers {
		s.wg.Add(1)
		go s.worker()
	}
	s.wg.Add(2)
	go s.committer()
	go s.settler()
}

// commitDepth is how many batches may be committing at once.
func (s *sess) commitDepth() int {
	if s.c.pipe == nil {
		return 1
	}
	return s.c.opts.CommitPipeline
}

// stopFlow ends the workers, the committer and the settler and waits for
// them: the commits in flight finish (each bounded by CommitTimeout) before
// the session returns, so two sessions never commit at once. Their results
// are dropped: what they committed and did not acknowledge is redelivered.
func (s *sess) stopFlow() {
	close(s.quit)
	close(s.commitReq)
	for range s.commitDone {
	}
	s.wg.Wait()
}

// worker takes deliveries from the channel the client library fills, holds
// each (hold), maps it and marks it done (finish), waking the session only
// when a commit group is ready. Mapping gets a context that the end of the
// session does not cancel: an interrupted call would read as a mapper
// failure. The runtime bounds each call.
func (s *sess) worker() {
	defer s.wg.Done()
	// Never cancelled: a delivery taken is mapped. context.Background, not
	// a WithoutCancel wrapper: the sandbox looks up values in the context
	// on every call, and a wrapper's lookup allocates.
	ctx := context.Background()
	for {
		src := s.src.Load()
		if !src.enter() {
			continue // retired: its successor is published already
		}
		select {
		case d, ok := <-src.d:
			if !ok {
				src.ended.Store(true)
				src.leave()
				s.wake()
				select {
				case <-src.off:
				case <-s.quit:
					return
				}
				continue
			}
			it := s.hold(d)
			src.leave()
			if it != nil {
				s.mapItem(ctx, it)
				s.finish(it)
			}
		case <-src.off:
			src.leave()
		case <-s.quit:
			src.leave()
			return
		}
	}
}

// wake wakes the session goroutine; it never blocks.
func (s *sess) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *sess) mapItem(ctx context.Context, it *item) {
	res := s.c.proc.Process(ctx, pipeline.Message{Body: it.body, Exchange: it.exchange, RoutingKey: it.routingKey,
		Compression: it.compression, FirstDelivery: it.first})
	switch res.Outcome {
	case pipeline.Skipped:
		// At debug level only: the pipeline logs an event over the size bound
		// as a warning, sampled, with the exchange, the routing key and the
		// sizes; a second, unsampled warning here would let a flood of
		// oversized events flood the log.
		s.log.Debug().Str("reason", res.Reason).Str("event_type", res.EventType).Int("size", len(it.body)).
			Str("exchange", it.exchange).Str("routing_key", it.routingKey).Msg("notification skipped")
	case pipeline.Unparseable, pipeline.Failed:
		// The body goes to the dead-letter area with its batch and is
		// acknowledged only once that is committed. A mapper failure is kept
		// whatever it costs (a replay may deliver it: the input pauses at the
		// area's bound). A body no replay can deliver (oversized,
		// undecodable, refused by its decoder) is marked Undeliverable: kept
		// as evidence within a budget of its own, dropped with a count past
		// it, and never a reason to pause, since holding it back would hold
		// up every message behind it. The pipeline counts and logs it (size,
		// exchange, routing key), never by content.
		it.letter = deadLetter(it, res, pipeline.DefaultMaxBodyBytes)
		it.letter.Undeliverable = res.Outcome == pipeline.Unparseable
	}
	it.res = res
}

// committer hands the batches to the outbox in the order they come: with
// the pipelined append it goes on to the next batch while the previous one
// syncs; otherwise each is written before the next. The settler waits for
// each in the same order.
func (s *sess) committer() {
	defer s.wg.Done()
	defer close(s.commitWait)
	var n uint64
	prev := closedChan
	for b := range s.commitReq {
		n++
		if s.c.beforeHandOff != nil {
			s.c.beforeHandOff(n, prev)
		}
		wait, settled := s.begin(b)
		if s.c.handedOff != nil {
			s.c.handedOff(n, settled, prev)
		}
		prev = settled
		s.commitWait <- commitWait{b: b, wait: wait}
	}
}

// settler answers each batch on commitDone once it is durable or failed,
// in the order the batches were handed to the outbox (which settles its
// appends in that order too).
func (s *sess) settler() {
	defer s.wg.Done()
	defer close(s.commitDone)
	for w := range s.commitWait {
		s.commitDone <- commitResult{b: w.b, err: w.wait()}
	}
}

func (s *sess) loop(ctx context.Context) error {
	s.armProbe()
	defer func() {
		if s.probeT != nil {
			s.probeT.Stop()
		}
	}()
	s.pauseBo = s.c.opts.pauseBackoff()
	s.startFlow()
	defer s.stopFlow()
	defer func() {
		if s.lingerT != nil {
			s.lingerT.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			s.shutdown()
			return ctx.Err()
		case e := <-s.connClosed:
			return fmt.Errorf("%w: connection closed: %w", errSessionLost, e)
		case e := <-s.chClosed:
			return fmt.Errorf("%w: channel closed: %w", errSessionLost, e)
		case b := <-s.blocked:
			s.noteBlocked(b)
		case <-s.kick:
			// a commit group is ready, or the consumer ended; dispatch below
			if s.src.Load().ended.Load() {
				return fmt.Errorf("%w: the broker cancelled the consumer", errSessionLost)
			}
		case <-s.lingerC:
			s.mu.Lock()
			s.lingerC = nil // a short batch waited long enough; dispatch below
			s.mu.Unlock()
		case r := <-s.commitDone:
			if err := s.committed(r); err != nil {
				return err
			}
		case <-s.probeC:
			s.probeC = nil
			if err := s.probeDue(); err != nil {
				return err
			}
		case <-s.refuseC:
			s.refuseC = nil
			s.setSource(s.deliveries)
		case <-s.resumeC:
			s.resumeC = nil
			if err := s.consume(); err != nil {
				return err
			}
			s.setSource(s.deliveries)
			s.c.m.paused.Set(0)
			s.log.Info().Msg("resuming consumption")
		}
		if err := s.dispatch(); err != nil {
			return err
		}
	}
}

// setSource publishes the channel the workers take deliveries from (nil:
// none) and waits until no worker is still taking from the one before.
func (s *sess) setSource(d <-chan amqp.Delivery) {
	old := s.src.Swap(newSource(d))
	old.retireAndWait()
}

// hold records a delivery a worker took, in delivery-tag order. A delivery
// whose tag is below next was requeued already (a multiple nack covered it
// while the worker was taking it) and is dropped: nil.
func (s *sess) hold(d amqp.Delivery) *item {
	it := &item{tag: d.DeliveryTag, body: d.Body, exchange: d.Exchange, routingKey: d.RoutingKey,
		compression: compressionOf(d.Headers), first: firstDelivery(d)}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.tag < s.next {
		return nil
	}
	s.c.m.consumed.Inc()
	s.lastTake = now
	it.taken = now
	it.epoch = s.epoch
	// Workers hold in nearly the order they took: insert from the end.
	i := len(s.pending)
	for i > 0 && s.pending[i-1].tag > it.tag {
		i--
	}
	s.pending = append(s.pending, nil)
	copy(s.pending[i+1:], s.pending[i:])
	s.pending[i] = it
	s.held++
	s.maxTag = max(s.maxTag, it.tag)
	if s.windowFull() {
		// The broker keeps the window full: it has more for us than we
		// acknowledge (Backlogged).
		s.c.fullAt.Store(s.c.sinceEpoch())
	}
	return it
}

// finish marks a mapped item done and wakes the session when a commit group
// can be cut: BatchMax mapped deliveries at the head, or everything held
// mapped and no linger timer armed (the session decides whether the short
// run waits). Nothing is woken while every commit slot is taken: the
// session dispatches when a commit settles.
func (s *sess) finish(it *item) {
	s.mu.Lock()
	if it.epoch != s.epoch {
		s.mu.Unlock()
		return // requeued while it was mapped
	}
	it.done = true
	s.doneN++
	wake := false
	if s.unsettled < s.commitDepth() {
		switch {
		case s.doneN == len(s.pending):
			wake = s.lingerC == nil
		case s.doneN >= s.c.opts.BatchMax:
			wake = s.headRun(s.c.opts.BatchMax) >= s.c.opts.BatchMax
		}
	}
	s.mu.Unlock()
	if wake {
		s.wake()
	}
}

// windowFull reports, under mu, whether the broker had Prefetch deliveries
// out when the highest tag held was sent: every tag after the last one
// settled (acknowledged or requeued) up to it, held or still in the client
// library's buffer.
func (s *sess) windowFull() bool {
	return s.maxTag > s.settled && s.maxTag-s.settled >= uint64(s.c.opts.Prefetch)
}

// headRun is the length of the run of mapped deliveries with consecutive
// tags from next at the head of pending, at most limit. A delivery tag is
// one more than the channel's previous one, so a gap is a delivery a worker
// took and has not held yet.
func (s *sess) headRun(limit int) int {
	r := 0
	for r < len(s.pending) && r < limit && s.pending[r].done && s.pending[r].tag == s.next+uint64(r) {
		r++
	}
	return r
}

// nextBatch takes the longest mapped prefix of pending, at most BatchMax
// deliveries. Delivery order is kept: an item mapped early waits for the
// items before it.
func (s *sess) nextBatch(limit int) *batch {
	r := s.headRun(limit)
	// A shorter run waits for the deliveries behind it to be mapped, unless
	// it is all that is held: every fsync costs, so a commit carries BatchMax
	// deliveries while traffic keeps the prefetch window full, and whatever
	// is there as soon as nothing more is arriving.
	if r == 0 || (r < limit && r < len(s.pending)) {
		return nil
	}
	if r < limit && s.linger(s.pending[0].taken) {
		return nil
	}
	var b *batch
	n := 0
	tapping := s.c.opts.Tap != nil && s.c.opts.Tap.Active()
	for n < r {
		it := s.pending[n]
		if b == nil {
			b = &batch{taken: it.taken}
		}
		k := ledger.Key{Hour: ledger.HourOf(b.taken), Source: it.exchange, Type: it.res.EventType}
		switch {
		case it.res.Outcome == pipeline.Mapped:
			b.events = it.res.AppendKeyed(b.events)
			b.tally.Row(k).Commit()
		case it.letter != nil:
			b.letters = append(b.letters, *it.letter)
			b.deadTally.Row(k).DeadLetter(it.letter.Reason)
		default:
			b.tally.Row(k).Skip(it.res.Reason)
		}
		if tapping {
			c := Committed{Exchange: it.exchange, RoutingKey: it.routingKey, EventType: it.res.EventType, Body: it.body}
			if it.res.Outcome == pipeline.Mapped {
				c.Events = it.res.Events
			}
			b.tapped = append(b.tapped, c)
		}
		b.lastTag = it.tag
		b.n++
		n++
	}
	if n > 0 {
		s.next = b.lastTag + 1
		s.doneN -= n
		clear(s.pending[:n])
		s.pending = s.pending[n:]
		if len(s.pending) == 0 {
			s.pending = nil
		}
	}
	return b
}

// linger reports whether a batch shorter than BatchMax should wait for more
// deliveries, and arms the timer that dispatches it when the wait is over. It
// waits while deliveries keep arriving (the last one less than CommitLinger
// ago) and the prefetch window has room for more, and never beyond
// 4 × CommitLinger after oldest, the take time of its first delivery.
func (s *sess) linger(oldest time.Time) bool {
	d := s.c.opts.CommitLinger
	if d <= 0 || s.stopping || s.windowFull() {
		return false
	}
	now := time.Now()
	wait := min(s.lastTake.Add(d).Sub(now), oldest.Add(4*d).Sub(now))
	if wait <= 0 {
		return false
	}
	if s.lingerC == nil {
		if s.lingerT == nil {
			s.lingerT = time.NewTimer(wait)
		} else {
			s.lingerT.Reset(wait)
		}
		s.lingerC = s.lingerT.C
	}
	return true
}

// dispatch is the group commit: whenever fewer than CommitPipeline batches
// are committing and the head of pending holds BatchMax mapped deliveries,
// or every delivery held is mapped (nothing else has arrived), that run is
// committed while the deliveries behind it go on being received and mapped
// (and, pipelined, while the batch before it syncs). Every delivery held
// mapped means the workers wait for the next one: nothing else has arrived.
// A run of skipped deliveries only commits their count in the ledger.
func (s *sess) dispatch() error {
	for {
		s.mu.Lock()
		if s.unsettled >= s.commitDepth() {
			s.mu.Unlock()
			return nil
		}
		b := s.nextBatch(s.c.opts.BatchMax)
		if b == nil {
			s.mu.Unlock()
			return nil
		}
		s.unsettled++
		s.mu.Unlock()
		s.inflight = append(s.inflight, b)
		s.commitReq <- b // never blocks: at most commitDepth batches are unsettled
	}
}

// committed settles the oldest batch in flight once its commit answered:
// an acknowledgement up to its last tag, or, on a failed commit, a requeue
// of everything held (the batches in flight behind it included: the outbox
// fails them too). A result for a batch no longer in flight (requeued with
// an earlier failure) is dropped.
func (s *sess) committed(r commitResult) error {
	s.mu.Lock()
	s.unsettled--
	s.mu.Unlock()
	if len(s.inflight) == 0 || s.inflight[0] != r.b {
		return nil
	}
	b, err := r.b, r.err
	s.inflight[0] = nil
	s.inflight = s.inflight[1:]
	if err == nil {
		if s.c.afterCommit != nil {
			s.c.afterCommit()
		}
		return s.ack(b)
	}
	if errors.Is(err, outbox.ErrFull) {
		return s.pause()
	}
	// Refused (disk full, I/O error) or anything else: take nothing more,
	// requeue and wait.
	s.setSource(nil)
	s.log.Error().Err(err).Int("deliveries", s.heldNow()).Dur("retry_in", s.c.opts.RefusedRetry).
		Msg("outbox refused the batch; requeued")
	if err := s.nackHeld(0); err != nil {
		return err
	}
	s.refuseC = time.After(s.c.opts.RefusedRetry)
	return nil
}

// ack acknowledges every delivery up to b.lastTag with one multiple ack on the
// channel that delivered them. Batches are cut from the head of pending in
// order and settle in that order, so every delivery up to b.lastTag is in b
// or in a batch already durable and acknowledged (or requeued).
func (s *sess) ack(b *batch) error {
	if s.c.beforeAck != nil {
		s.c.beforeAck(b.lastTag)
	}
	if err := s.ch.Ack(b.lastTag, true); err != nil {
		return fmt.Errorf("%w: ack: %w", errSessionLost, err)
	}
	if len(b.tapped) > 0 {
		s.c.opts.Tap.Committed(b.tapped)
	}
	s.mu.Lock()
	s.held -= b.n
	s.settled = b.lastTag
	if s.held == 0 {
		s.maxTag = 0
	}
	s.mu.Unlock()
	s.c.m.acked.Add(float64(b.n))
	s.pauseBo.Reset()
	return nil
}

// closedChan is a settled channel.
var closedChan = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// begin hands b to the outbox and returns the wait for its durability, and
// a channel closed once the outbox settled it. With the pipelined append
// the events' transaction is handed over and synced while begin returns;
// the dead letters (rare) are written before it returns. The batch is
// durable when both are.
func (s *sess) begin(b *batch) (wait func() error, settled <-chan struct{}) {
	// Not cancelled by the end of the session: a commit that started is
	// allowed to finish, and its deliveries are acknowledged only if the
	// session still can.
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.CommitTimeout)
	start := time.Now()
	done := func(err error) (func() error, <-chan struct{}) {
		return func() error {
			defer cancel()
			s.c.m.commitSeconds.Observe(time.Since(start).Seconds())
			return err
		}, closedChan
	}
	// Events first: at the bound nothing is written and everything held is
	// requeued. Dead letters do not count against the bound. Each part
	// carries its deliveries' counts in the ledger; the skipped ones go with
	// the first part written.
	tally, deadTally := &b.tally, &b.deadTally
	if len(b.events) == 0 && len(b.letters) > 0 {
		deadTally.Add(tally)
		tally = nil
	}
	var p *outbox.Pending
	if len(b.events) > 0 || len(b.letters) == 0 {
		if s.c.pipe != nil {
			p = s.c.pipe.BeginAppendKeyed(ctx, b.events, b.taken, tally)
		} else if err := s.c.box.AppendKeyed(ctx, b.events, b.taken, tally); err != nil {
			return done(err)
		}
	}
	if len(b.letters) > 0 {
		if p != nil {
			select {
			case <-p.Done(): // refused at once (the bound): no dead letters either
				if err := p.Err(); err != nil {
					return done(err)
				}
			default:
			}
		}
		if err := s.c.box.AppendDeadLettersCounted(ctx, b.letters, deadTally); err != nil {
			return done(err)
		}
	}
	if p == nil {
		return done(nil)
	}
	return func() error {
		defer cancel()
		var err error
		select {
		case <-p.Done():
			err = p.Err()
		case <-ctx.Done():
			err = fmt.Errorf("outbox commit not settled after %s: %w", s.c.opts.CommitTimeout, ctx.Err())
		}
		s.c.m.commitSeconds.Observe(time.Since(start).Seconds())
		return err
	}, p.Done()
}

// heldNow is the number of deliveries held.
func (s *sess) heldNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// nackHeld returns every delivery held, and extra more the session took
// itself up to tag extraTag, to the queue with one multiple nack and forgets
// them. Items still being mapped finish and are dropped, and so is a
// delivery a worker took below the tag and holds later.
func (s *sess) nackHeld(extraTag uint64, extra ...int) error {
	s.mu.Lock()
	tag := max(s.maxTag, extraTag)
	n := s.held
	for _, e := range extra {
		n += e
	}
	s.pending = nil
	s.doneN = 0
	s.epoch++
	s.held = 0
	s.maxTag = 0
	if tag >= s.next {
		s.next = tag + 1
	}
	s.settled = max(s.settled, tag)
	s.mu.Unlock()
	s.inflight = nil // their results, when they come, are dropped
	if tag == 0 {
		return nil
	}
	if err := s.ch.Nack(tag, true, true); err != nil {
		return fmt.Errorf("%w: nack: %w", errSessionLost, err)
	}
	s.lastNack = time.Now()
	s.c.m.nacked.Add(float64(n))
	return nil
}

// pause stops taking deliveries at the outbox bound: the workers are sent
// off the channel, the consumer is cancelled, every delivery held (mapped,
// being mapped, or still in the client's buffer) is requeued with one nack,
// and consumption resumes after a pause that doubles while the bound
// persists. Nothing stays unacknowledged during a pause, so consumer_timeout
// cannot fire.
func (s *sess) pause() error {
	var extraTag uint64
	extra := 0
	if s.deliveries != nil {
		s.setSource(nil)
		if err := s.ch.Cancel(s.tag, false); err != nil {
			return fmt.Errorf("%w: cancel: %w", errSessionLost, err)
		}
		for d := range s.deliveries {
			extraTag = max(extraTag, d.DeliveryTag)
			extra++
		}
		s.deliveries = nil
	}
	n := s.heldNow() + extra
	if err := s.nackHeld(extraTag, extra); err != nil {
		return err
	}
	d := s.pauseBo.Next()
	s.c.m.paused.Set(1)
	s.c.m.pauses.Inc()
	s.log.Warn().Int("requeued", n).Dur("pause", d).Msg("outbox at its bound; consumption paused")
	s.resumeC = time.After(d)
	return nil
}

// shutdown is the graceful stop: basic.cancel first, so the broker sends
// nothing more; then the deliveries already received are finished, in order:
// the workers take what the client library still holds, the commit in
// flight is awaited and acknowledged, everything else held is mapped,
// committed and acknowledged. Whatever cannot be finished within
// Options.StopBudget is requeued (or returned by the closing connection);
// a basic.cancel the broker does not answer ends when the session's guard
// closes the socket.
func (s *sess) shutdown() {
	s.mu.Lock()
	s.stopping = true
	// No linger from here on: a worker that maps the last delivery held
	// wakes the session again.
	s.lingerC = nil
	s.mu.Unlock()
	deadline := time.NewTimer(s.c.opts.StopBudget)
	defer deadline.Stop()
	draining := false
	if s.deliveries != nil {
		if err := s.ch.Cancel(s.tag, false); err != nil {
			return // the connection is gone; the broker requeues what is held
		}
		// Paused after a refused commit: the workers are off the channel.
		if s.src.Load().d == nil {
			s.setSource(s.deliveries)
		}
		draining = true
	}
	for {
		if draining && s.src.Load().ended.Load() {
			// The client library closed the channel: everything it received
			// is taken; wait until it is held.
			s.setSource(nil)
			s.deliveries = nil
			draining = false
		}
		if err := s.dispatch(); err != nil {
			return
		}
		if !draining && s.heldNow() == 0 {
			return
		}
		select {
		case <-s.kick:
		case r := <-s.commitDone:
			if r.err != nil && len(s.inflight) > 0 && s.inflight[0] == r.b {
				s.log.Warn().Err(r.err).Int("deliveries", s.heldNow()).Msg("commit failed while stopping; requeued")
				s.setSource(nil)
				_ = s.nackHeld(0)
				return
			}
			if err := s.committed(r); err != nil {
				return
			}
		case <-s.connClosed: //nolint:errcheck // the session's own watch on the connection reports the cause
			return
		case <-s.chClosed: //nolint:errcheck // the same for the channel
			return
		case b := <-s.blocked:
			s.noteBlocked(b)
		case <-deadline.C:
			if len(s.inflight) > 0 {
				// The commit may still land; the deliveries are requeued and
				// come back as duplicates at worst.
				s.log.Warn().Int("deliveries", s.heldNow()).Msg("stop budget spent with a commit in flight; requeued")
			}
			s.setSource(nil)
			_ = s.nackHeld(0)
			return
		}
	}
}

// deadLetter keeps what the collector could not map. The body is kept as it
// arrived (still compressed, with its codec, so a replay decodes it again),
// cut to maxBody bytes: a body over the pipeline's limit is kept as evidence,
// not in full.
func deadLetter(it *item, res pipeline.Result, maxBody int) *outbox.DeadLetter {
	body := it.body
	dl := &outbox.DeadLetter{
		Exchange: it.exchange, RoutingKey: it.routingKey, Compression: it.compression,
		EventType: res.EventType, Module: res.Module, Reason: res.Reason, At: time.Now().UTC(),
	}
	if res.Err != nil {
		dl.Detail = res.Err.Error()
	}
	if maxBody > 0 && len(body) > maxBody {
		body = body[:maxBody]
		dl.Truncated = len(it.body)
	}
	dl.Body = body
	return dl
}

// compressionOf reads kombu's "compression" header (set by oslo.messaging's
// kombu_compression): the codec's content type, or empty.
func compressionOf(h amqp.Table) string {
	if len(h) == 0 {
		return ""
	}
	switch v := h["compression"].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}
