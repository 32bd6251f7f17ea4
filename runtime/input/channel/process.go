package channel

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// item is one published message on its way from its connection to its
// answer.
type item struct {
	c    *conn
	seq  uint64
	tag  string
	typ  wire.Type
	body []byte // the envelope handed to the pipeline
	raw  []byte // the data as published, kept for the raw tap only
	size int64  // charged to the server's budget
	uid  uint32
	gid  uint32
	perm uint32
	pid  uint32 // the publisher's, from SO_PEERCRED

	status    wire.Status
	reason    string
	events    [][]byte
	keys      []ledger.Keys // of events, as the pipeline has them (pipeline.Result.Keys)
	letter    *outbox.DeadLetter
	eventType string    // of the message, for the ledger
	taken     time.Time // when it was read, for the ledger
}

// newItem copies a message out of the reader's buffer into its envelope.
func newItem(c *conn, p *wire.Publish, tapping bool) *item {
	it := &item{
		taken: time.Now(),
		c:     c, seq: p.Seq, tag: string(p.Tag), typ: p.Type,
		uid: p.UID, gid: p.GID, perm: p.Perm & 0o777, pid: uint32(max(c.cred.pid, 0)),
	}
	at := p.PublishedAt
	if at <= 0 {
		at = time.Now().UnixNano()
	}
	var ds, de int
	it.body, ds, de = appendEnvelope(make([]byte, 0, len(p.Data)+len(p.Tag)+192), p, at)
	if tapping {
		if p.Type == wire.JSON {
			it.raw = it.body[ds:de]
		} else {
			it.raw = append([]byte(nil), p.Data...)
		}
	}
	it.size = int64(len(it.body) + len(it.raw) + 256)
	return it
}

// envelopeTime is the layout of channel.published_at: RFC 3339 in UTC with
// nanoseconds, so that two messages published apart never share a time.
const envelopeTime = "2006-01-02T15:04:05.000000000Z"

// appendEnvelope writes the document the pipeline maps for a message:
//
//	{"event_type":<tag>,
//	 "channel":{"type":"JSON","published_at":"...Z","uid":1000,"gid":1000},
//	 "message":<the data: a JSON value as published, or a string>}
//
// The tag is the event type the catalogue routes on. It returns where the
// message's data lies in the result.
func appendEnvelope(dst []byte, p *wire.Publish, at int64) ([]byte, int, int) {
	dst = append(dst, `{"event_type":`...)
	dst = jsonstr.AppendQuotedBytes(dst, p.Tag)
	dst = append(dst, `,"channel":{"type":"`...)
	dst = append(dst, p.Type.String()...)
	dst = append(dst, `","published_at":"`...)
	dst = time.Unix(0, at).UTC().AppendFormat(dst, envelopeTime)
	dst = append(dst, `","uid":`...)
	dst = strconv.AppendUint(dst, uint64(p.UID), 10)
	dst = append(dst, `,"gid":`...)
	dst = strconv.AppendUint(dst, uint64(p.GID), 10)
	dst = append(dst, `},"message":`...)
	ds := len(dst)
	if p.Type == wire.JSON {
		dst = append(dst, p.Data...)
	} else {
		dst = jsonstr.AppendQuotedBytes(dst, p.Data)
		ds++
	}
	de := len(dst)
	if p.Type != wire.JSON {
		de--
	}
	return append(dst, '}'), ds, de
}

// workLoop maps items and hands them to the committer.
func (s *Server) workLoop(ctx context.Context) {
	for it := range s.work {
		s.process(ctx, it)
		s.commits <- it
	}
}

func (s *Server) process(ctx context.Context, it *item) {
	defer func() {
		if r := recover(); r != nil {
			s.m.exceptions.Inc()
			s.log.Error().Interface("panic", r).Int("bytes", len(it.body)).Msg("channel message processing panicked")
			it.status, it.reason, it.events, it.keys = wire.Skipped, "exception", nil, nil
		}
	}()
	res := s.opts.Processor.Process(ctx, pipeline.Message{
		Body:       it.body,
		Exchange:   Exchange,
		RoutingKey: it.tag,
		DeriveID:   true,
	})
	it.eventType = res.EventType
	switch res.Outcome {
	case pipeline.Mapped:
		s.m.mapped.Inc()
		it.status, it.events, it.keys = wire.Committed, res.Events, res.Keys
	case pipeline.Skipped:
		s.m.skipped.Inc()
		it.status, it.reason = wire.Skipped, res.Reason
	case pipeline.Unparseable:
		s.m.unparseable.Inc()
		it.status, it.reason = wire.Skipped, res.Reason
	case pipeline.Failed:
		s.m.failed.Inc()
		it.status, it.reason = wire.DeadLettered, res.Reason
		detail := ""
		if res.Err != nil {
			detail = res.Err.Error()
		}
		it.letter = &outbox.DeadLetter{
			Body: it.body, Exchange: Exchange, RoutingKey: it.tag, EventType: res.EventType,
			Module: res.Module, Reason: res.Reason, Detail: detail, At: time.Now().UTC(),
		}
	}
}

// maxBatchBytes caps the events of one outbox transaction.
const maxBatchBytes = 512 << 10

// commitLoop writes items to the outbox in batches: BatchMax messages or
// maxBatchBytes of events, or BatchLinger after the first, whichever comes
// first; a commit in flight lets the next batch grow. Only after a batch is
// committed are its messages answered (and offered to the tap). A batch the
// outbox refuses is tried again, spaced RetryMin doubling to RetryMax
// (internal/backoff, no jitter: one writer, nothing to spread), until
// it is taken or the drain deadline passes; meanwhile nothing is read from
// the workers, the budget stays spent, the connections are not read and
// the clients' queues fill.
func (s *Server) commitLoop(ctx context.Context) {
	var (
		batch  []*item
		events []ledger.Keyed
		size   int
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		timer.Stop()
		if len(batch) > 0 {
			s.commit(ctx, batch, events)
		}
		clear(batch)
		batch, events, size = batch[:0], nil, 0
	}
	for {
		select {
		case it, ok := <-s.commits:
			if !ok {
				flush()
				return
			}
			if len(batch) == 0 {
				timer.Reset(s.opts.BatchLinger)
			}
			batch = append(batch, it)
			events = (&pipeline.Result{Events: it.events, Keys: it.keys}).AppendKeyed(events)
			for _, ev := range it.events {
				size += len(ev)
			}
			if len(batch) >= s.opts.BatchMax || size >= maxBatchBytes {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

func (s *Server) commit(ctx context.Context, batch []*item, events []ledger.Keyed) {
	var letters []outbox.DeadLetter
	// The ledger: each message consumed with its outcome, in the hour the
	// batch's first was read; the dead-lettered ones with the dead letters,
	// the others with the events (or, without events, with the dead
	// letters, or alone).
	taken := batch[0].taken
	tally, deadTally := &ledger.Delta{}, &ledger.Delta{}
	for _, it := range batch {
		k := ledger.Key{Hour: ledger.HourOf(taken), Source: Exchange, Type: it.eventType}
		switch {
		case it.letter != nil:
			letters = append(letters, *it.letter)
			deadTally.Row(k).DeadLetter(it.reason)
		case it.status == wire.Committed:
			tally.Row(k).Commit()
		default:
			tally.Row(k).Skip(it.reason)
		}
	}
	if len(events) == 0 && len(letters) > 0 {
		deadTally.Add(tally)
		tally = nil
	}
	n := len(events)
	retry := backoff.New(backoff.Policy{Min: s.opts.RetryMin, Max: s.opts.RetryMax})
	for {
		err := s.write(ctx, &events, &letters, taken, &tally, &deadTally)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			// Past the drain deadline: nothing of the batch is answered; the
			// clients send it again to the next daemon.
			for _, it := range batch {
				s.budget.give(it.size)
			}
			s.m.abandoned.Add(float64(len(batch)))
			s.log.Warn().Int("messages", len(batch)).Msg("channel batch not committed before the stop deadline; left to the clients to send again")
			return
		}
		s.m.retries.Inc()
		ev := s.log.Warn()
		if !errors.Is(err, outbox.ErrFull) {
			ev = s.log.Error()
		}
		wait := retry.Next()
		ev.Err(err).Int("messages", len(batch)).Dur("retry_in", wait).Msg("outbox refused a channel batch; holding it")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	s.m.eventsCommitted.Add(float64(n))

	// Answer each connection once for its part of the batch.
	var acks []wire.AckEntry
	var last *conn
	flushAcks := func() {
		if last != nil && len(acks) > 0 {
			last.q.pushAcks(acks)
		}
		acks = acks[:0]
	}
	tapping := s.hub.Active()
	var recs []Record
	for _, it := range batch {
		if it.c != last {
			flushAcks()
			last = it.c
		}
		acks = append(acks, wire.AckEntry{Seq: it.seq, Status: it.status, Reason: it.reason})
		switch it.status {
		case wire.Committed:
			s.m.committed.Inc()
		case wire.DeadLettered:
			s.m.deadLettered.Inc()
		}
		s.budget.give(it.size)
		if tapping && (it.status != wire.Skipped || it.raw != nil) {
			recs = append(recs, Record{
				Origin: OriginChannel, Exchange: Exchange, RoutingKey: it.tag, EventType: it.tag,
				Raw: it.raw, Events: it.events, UID: it.uid, GID: it.gid, Perm: it.perm, PID: it.pid,
			})
		}
	}
	flushAcks()
	if len(recs) > 0 {
		s.hub.Offer(recs)
	}
}

// write commits what is left of a batch: the events, then the dead letters,
// each with its part of the ledger and forgotten once it is in, so that a
// retry does not write it twice.
func (s *Server) write(ctx context.Context, events *[]ledger.Keyed, letters *[]outbox.DeadLetter, taken time.Time, tally, deadTally **ledger.Delta) error {
	if len(*events) > 0 || (len(*letters) == 0 && !(*tally).Empty()) {
		if err := s.opts.Outbox.AppendKeyed(ctx, *events, taken, *tally); err != nil {
			return err
		}
		*events, *tally = nil, nil
	}
	if len(*letters) > 0 {
		if err := s.opts.Outbox.AppendDeadLettersCounted(ctx, *letters, *deadTally); err != nil {
			return err
		}
		*letters, *deadTally = nil, nil
	}
	return nil
}
