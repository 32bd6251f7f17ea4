package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// serve runs one connection: a writer on this goroutine, a reader beside it.
// When either ends, what was written and not settled goes back to the head
// of the queue, in order, to be sent again on the next connection.
func (c *Client) serve(conn net.Conn, r *wire.Reader) {
	c.mu.Lock()
	ids := make([]uint32, 0, len(c.subs))
	for id := range c.subs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	c.ctrl = c.ctrl[:0]
	for _, id := range ids {
		c.ctrl = append(c.ctrl, c.subs[id].frame())
	}
	if !c.closing {
		c.state = StateConnected
	}
	c.lastErr = nil
	c.dropped.Store(0)
	c.mu.Unlock()
	c.logf(slog.LevelInfo, "channel connected", "socket", c.opts.Socket)
	c.kick()

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		c.read(r)
		conn.Close()
	}()
	if c.write(conn, readDone) {
		// The daemon stopped reading (it is stopping): what it committed is
		// still answered until it closes the connection.
		<-readDone
	}
	conn.Close()
	<-readDone

	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	if len(c.inflight) > 0 {
		back := make([]*entry, 0, len(c.inflight)+len(c.queue))
		for _, e := range c.inflight {
			back = append(back, e)
		}
		sort.Slice(back, func(i, j int) bool { return back[i].seq < back[j].seq })
		c.queue = append(back, c.queue...)
		clear(c.inflight)
	}
	c.writing = 0
	// The daemon forgot this connection's subscriptions with it: an
	// unsubscription waiting for its answer is done.
	for id, s := range c.unsubs {
		s.unsubDone <- nil
		delete(c.unsubs, id)
	}
	c.broadcast()
	c.ctrl = nil
	c.mu.Unlock()
	c.logf(slog.LevelInfo, "channel disconnected", "socket", c.opts.Socket)
}

// write sends control frames and queued messages as they come, many frames
// per system call, and a PING when it has had nothing to send for a quarter
// of the daemon's idle timeout. It reports true when a write failed.
func (c *Client) write(conn net.Conn, readDone <-chan struct{}) bool {
	var bufs net.Buffers
	c.mu.Lock()
	every := c.idle / 4
	c.mu.Unlock()
	var tick <-chan time.Time
	var timer *time.Timer
	if every > 0 {
		timer = time.NewTimer(every)
		defer timer.Stop()
		tick = timer.C
	}
	ping := wire.AppendPing(nil)
	for {
		c.mu.Lock()
		bufs = append(bufs[:0], c.ctrl...)
		c.ctrl = c.ctrl[:0]
		n := 0
		for len(c.queue) > 0 && n < writeChunk {
			e := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.inflight[e.seq] = e
			if e.sent {
				c.st.Resent++
			}
			e.sent = true
			c.st.Sent++
			bufs = append(bufs, e.frame)
			n += len(e.frame)
		}
		if len(c.queue) == 0 {
			c.queue = nil
		}
		c.writing = len(bufs)
		c.mu.Unlock()
		if len(bufs) == 0 {
			select {
			case <-c.wake:
				continue
			case <-tick:
				bufs = append(bufs, ping)
				c.mu.Lock()
				c.st.Pings++
				c.writing = 1
				c.mu.Unlock()
			case <-readDone:
				return false
			case <-c.stop:
				return false
			}
		}
		w := bufs
		_, err := w.WriteTo(conn)
		if err == nil {
			// (After a failure the messages stay counted as being written
			// until serve has put them back in the queue.)
			c.mu.Lock()
			c.writing = 0
			c.broadcast()
			c.mu.Unlock()
		}
		if err != nil {
			c.logf(slog.LevelDebug, "channel write failed", "err", err)
			return true
		}
		if timer != nil {
			timer.Reset(every)
		}
	}
}

// read handles the daemon's frames until the connection ends.
func (c *Client) read(r *wire.Reader) {
	var acks []wire.AckEntry
	var dl wire.Deliver
	for {
		ft, p, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.logf(slog.LevelWarn, "channel read failed", "err", err)
			}
			return
		}
		switch ft {
		case wire.FrameAck:
			acks, err = wire.ParseAck(p, acks[:0])
			c.settle(acks)
		case wire.FrameDeliver:
			if err = wire.ParseDeliver(p, &dl); err == nil {
				c.deliver(&dl)
			}
		case wire.FrameSubStatus:
			var s wire.SubStatus
			if s, err = wire.ParseSubStatus(p); err == nil {
				c.subStatus(s)
			}
		case wire.FrameUnsubStatus:
			var s wire.SubStatus
			if s, err = wire.ParseSubStatus(p); err == nil {
				c.unsubStatus(s)
			}
		case wire.FrameError:
			text, _ := wire.ParseError(p)
			c.logf(slog.LevelError, "channel: the daemon closed the connection", "reason", text)
			return
		default:
			// A frame of a later revision: ignored.
		}
		if err != nil {
			c.logf(slog.LevelWarn, "channel: malformed frame from the daemon", "frame", ft.String(), "err", err)
			return
		}
	}
}

func (c *Client) settle(acks []wire.AckEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range acks {
		e, ok := c.inflight[a.Seq]
		if !ok {
			continue
		}
		delete(c.inflight, a.Seq)
		c.bytes -= len(e.frame)
		switch a.Status {
		case wire.Committed, wire.DeadLettered:
			c.st.Acked++
		case wire.Skipped:
			c.st.Skipped++
		default:
			c.st.Refused++
		}
		if c.opts.OnSettled != nil {
			c.settleQ = append(c.settleQ, Settlement{Seq: a.Seq, Status: a.Status, Reason: a.Reason})
			n++
		}
	}
	c.calling += n
	c.broadcast()
	if n > 0 {
		select {
		case c.settleWake <- struct{}{}:
		default:
		}
	}
}

// Delivery is one message received for a subscription.
type Delivery struct {
	// Tag is the event type: of the mapped event, or of the raw notification.
	Tag    string
	Type   wire.Type
	Raw    bool   // a redacted raw notification (or message), not a mapped event
	Origin string // "amqp" or "channel"
	// The credentials and permission bits the message carries.
	UID, GID, Perm uint32
	// PID is the publisher's process id, as the kernel reported it on the
	// publisher's connection (SO_PEERCRED); 0 for bus events.
	PID  uint32
	Data []byte // the event (JSON), or the redacted notification; shared, do not modify
	// Dropped is how many messages the daemon dropped for this connection so
	// far because it did not read them fast enough.
	Dropped uint64
	// Missed is how many deliveries this subscription dropped so far because
	// its queue (Options.DeliveryQueueBytes) was full: a callback, or a
	// poller, that did not keep up.
	Missed uint64
}

// Value decodes the data by its type: a JSON value as encoding/json
// decodes it into an any, or the text of a String message.
func (d Delivery) Value() (any, error) {
	if d.Type != wire.JSON {
		return string(d.Data), nil
	}
	var v any
	if err := json.Unmarshal(d.Data, &v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return v, nil
}

// deliver hands a delivery to each open subscription it matched: into the
// callback queue, or the subscription's own queue for polling, each bounded
// by DeliveryQueueBytes. It never runs a callback and never blocks.
func (c *Client) deliver(dl *wire.Deliver) {
	c.dropped.Store(dl.Dropped)
	d := Delivery{
		Tag: string(dl.Tag), Type: dl.Type, Raw: dl.Raw, Origin: dl.Origin,
		UID: dl.UID, GID: dl.GID, Perm: dl.Perm, PID: dl.PID, Data: append([]byte(nil), dl.Data...), Dropped: dl.Dropped,
	}
	size := len(d.Data) + len(d.Tag) + 96
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Delivered++
	queued := false
	for _, id := range dl.Subs {
		s, ok := c.subs[id]
		if !ok || s.closed {
			continue
		}
		if s.queued+size > c.opts.DeliveryQueueBytes {
			s.missed++
			c.st.LocalDropped++
			continue
		}
		s.queued += size
		s.delivered++
		dd := d
		dd.Missed = s.missed
		if s.cb != nil {
			c.cbQ = append(c.cbQ, cbItem{s: s, d: dd, size: size})
			queued = true
			continue
		}
		s.queue = append(s.queue, dd)
		close(s.arrived)
		s.arrived = make(chan struct{})
	}
	if queued {
		select {
		case c.cbWake <- struct{}{}:
		default:
		}
	}
}

// SubscribeOptions are the choices of SubscribeWith.
type SubscribeOptions struct {
	// Exact: the match is a name, compared with the tag byte for byte,
	// instead of a regular expression.
	Exact bool
	// Raw: the redacted raw notifications instead of the mapped events.
	Raw bool
	// Callback is called for each delivery, on the client's callback
	// goroutine (one for all subscriptions, in arrival order), never on the
	// goroutine that reads the connection: a slow callback delays the next
	// callbacks only; past DeliveryQueueBytes this subscription's
	// deliveries are dropped (Delivery.Missed). It may call Publish,
	// Subscribe, SetQueueLimit, Subscription.Close and Client.Close. Nil:
	// the deliveries are kept, within the same bound, for Next and Poll.
	Callback func(Delivery)
}

// Subscription is one expression (or exact name) the client subscribed to.
// It is sent again on every new connection until it is closed.
type Subscription struct {
	c        *Client
	id       uint32
	match    string
	exact    bool
	raw      bool
	cb       func(Delivery)
	answered chan struct{}
	err      error

	// Under c.mu.
	closed    bool
	queue     []Delivery // polling: what Next and Poll hand out
	queued    int        // bytes waiting, for the callback or in queue
	delivered uint64
	missed    uint64
	arrived   chan struct{} // closed and replaced when queue grows or the subscription closes
	unsubDone chan error    // Close waiting for the daemon's answer
}

// Subscribe asks the daemon for every message whose tag (for the tap: the
// event type) matches regex, a Go regular expression, unanchored. With raw
// the redacted raw notifications are asked for instead of the mapped
// events. cb, when not nil, is called for each message (see
// SubscribeOptions.Callback); nil keeps them for Next and Poll. Subscribe
// does not wait for the daemon: Wait does.
func (c *Client) Subscribe(regex string, raw bool, cb func(Delivery)) (*Subscription, error) {
	return c.SubscribeWith(regex, SubscribeOptions{Raw: raw, Callback: cb})
}

// SubscribeWith subscribes to match, a regular expression or, with
// o.Exact, a name.
func (c *Client) SubscribeWith(match string, o SubscribeOptions) (*Subscription, error) {
	if c.opts.Mode&ModeSubscribe == 0 {
		return nil, ErrMode
	}
	if len(match) > wire.MaxRegex {
		return nil, fmt.Errorf("%w: expression of %d bytes", ErrTooLarge, len(match))
	}
	if !o.Exact {
		if _, err := regexp.Compile(match); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	} else if match == "" {
		return nil, fmt.Errorf("%w: empty name", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, ErrClosed
	}
	c.subSeq++
	s := &Subscription{c: c, id: c.subSeq, match: match, exact: o.Exact, raw: o.Raw, cb: o.Callback,
		answered: make(chan struct{}), arrived: make(chan struct{})}
	c.subs[s.id] = s
	if c.conn != nil && c.state == StateConnected {
		c.ctrl = append(c.ctrl, s.frame())
		c.kickLocked()
	}
	return s, nil
}

func (c *Client) kickLocked() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (s *Subscription) frame() []byte {
	return wire.AppendSubscribe(nil, wire.Subscribe{ID: s.id, Raw: s.raw, Exact: s.exact, Regex: s.match})
}

func (c *Client) subStatus(st wire.SubStatus) {
	c.mu.Lock()
	s, ok := c.subs[st.ID]
	c.mu.Unlock()
	if !ok {
		return
	}
	var err error
	if !st.OK {
		err = fmt.Errorf("%w: %s", ErrRefused, st.Text)
		c.logf(slog.LevelError, "channel subscription refused", "match", s.match, "reason", st.Text)
	}
	s.settle(err)
}

func (c *Client) unsubStatus(st wire.SubStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.unsubs[st.ID]
	if !ok {
		return
	}
	delete(c.unsubs, st.ID)
	var err error
	if !st.OK {
		err = fmt.Errorf("%w: %s", ErrNotSubscribed, st.Text)
	}
	s.unsubDone <- err
}

func (s *Subscription) settle(err error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	select {
	case <-s.answered:
	default:
		s.err = err
		close(s.answered)
	}
}

// Wait returns once the daemon has answered the subscription the first
// time: nil when it took it, an error wrapping ErrRefused when it did not.
func (s *Subscription) Wait(ctx context.Context) error {
	select {
	case <-s.answered:
		s.c.mu.Lock()
		defer s.c.mu.Unlock()
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeLocked marks s closed and wakes its pollers. c.mu held.
func (s *Subscription) closeLocked() {
	if s.closed {
		return
	}
	s.closed = true
	s.queue = nil
	close(s.arrived)
	s.arrived = make(chan struct{})
}

// Close ends the subscription: no delivery reaches it once Close is called.
// While connected it waits, bounded by ctx, for the daemon's answer: nil
// once the daemon removed the subscription (or the connection ended, which
// removes it too), an error wrapping ErrNotSubscribed when the daemon had
// no such subscription (it had refused it). While disconnected there is
// nothing to remove and it returns nil at once. Safe from a callback.
func (s *Subscription) Close(ctx context.Context) error {
	c := s.c
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return nil
	}
	s.closeLocked()
	delete(c.subs, s.id)
	if c.conn == nil || c.state != StateConnected {
		c.mu.Unlock()
		return nil
	}
	s.unsubDone = make(chan error, 1)
	done := s.unsubDone
	c.unsubs[s.id] = s
	c.ctrl = append(c.ctrl, wire.AppendUnsubscribe(nil, s.id))
	c.kickLocked()
	c.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Poll hands out the oldest delivery kept for a subscription without a
// callback, or reports false when none waits (the seed's get_data).
func (s *Subscription) Poll() (Delivery, bool) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.popLocked()
}

func (s *Subscription) popLocked() (Delivery, bool) {
	if len(s.queue) == 0 {
		return Delivery{}, false
	}
	d := s.queue[0]
	s.queue[0] = Delivery{}
	s.queue = s.queue[1:]
	s.queued -= len(d.Data) + len(d.Tag) + 96
	return d, true
}

// Next waits for the next delivery of a subscription without a callback,
// until ctx is done. It answers ErrClosed once the subscription (or the
// client) is closed and nothing is left, and ErrMode for a subscription
// with a callback.
func (s *Subscription) Next(ctx context.Context) (Delivery, error) {
	if s.cb != nil {
		return Delivery{}, ErrMode
	}
	for {
		s.c.mu.Lock()
		d, ok := s.popLocked()
		closed, ch := s.closed, s.arrived
		s.c.mu.Unlock()
		if ok {
			return d, nil
		}
		if closed {
			return Delivery{}, ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Delivery{}, ctx.Err()
		}
	}
}

// SubscriptionInfo describes one subscription (Client.Subscriptions).
type SubscriptionInfo struct {
	ID    uint32 `json:"id"`
	Match string `json:"match"`
	Exact bool   `json:"exact"`
	Raw   bool   `json:"raw"`
	// Polling: no callback; deliveries wait for Next and Poll.
	Polling bool `json:"polling"`
	// Status: "pending" (not answered yet on this connection or any
	// before), "taken", or "refused" with Error.
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"`
	Delivered uint64 `json:"delivered"`
	Missed    uint64 `json:"missed"`
	Queued    int    `json:"queued_bytes"`
}

// Subscriptions lists the client's open subscriptions, oldest first.
func (c *Client) Subscriptions() []SubscriptionInfo {
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	sort.Slice(subs, func(i, j int) bool { return subs[i].id < subs[j].id })
	out := make([]SubscriptionInfo, 0, len(subs))
	for _, s := range subs {
		status, text := "pending", ""
		select {
		case <-s.answered:
			status = "taken"
			c.mu.Lock()
			if s.err != nil {
				status, text = "refused", s.err.Error()
			}
			c.mu.Unlock()
		default:
		}
		c.mu.Lock()
		out = append(out, SubscriptionInfo{ID: s.id, Match: s.match, Exact: s.exact, Raw: s.raw, Polling: s.cb == nil,
			Status: status, Error: text, Delivered: s.delivered, Missed: s.missed, Queued: s.queued})
		c.mu.Unlock()
	}
	return out
}

// SubscriptionsJSON is Subscriptions as a JSON array (the seed's
// subscr_json).
func (c *Client) SubscriptionsJSON() []byte {
	b, _ := json.Marshal(c.Subscriptions())
	return b
}
