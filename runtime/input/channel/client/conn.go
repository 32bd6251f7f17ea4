package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"sort"

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
	c.broadcast()
	c.ctrl = nil
	c.mu.Unlock()
	c.logf(slog.LevelInfo, "channel disconnected", "socket", c.opts.Socket)
}

// write sends control frames and queued messages as they come, many frames
// per system call. It reports true when a write failed.
func (c *Client) write(conn net.Conn, readDone <-chan struct{}) bool {
	var bufs net.Buffers
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
	var done []Settlement
	c.mu.Lock()
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
			done = append(done, Settlement{Seq: a.Seq, Status: a.Status, Reason: a.Reason})
		}
	}
	c.calling += len(done)
	c.broadcast()
	c.mu.Unlock()
	if len(done) == 0 {
		return
	}
	for _, s := range done {
		c.opts.OnSettled(s)
	}
	c.mu.Lock()
	c.calling -= len(done)
	c.broadcast()
	c.mu.Unlock()
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
	Data           []byte // the event (JSON), or the redacted notification
	// Dropped is how many messages the daemon dropped for this connection so
	// far because it did not read them fast enough.
	Dropped uint64
}

func (c *Client) deliver(dl *wire.Deliver) {
	c.dropped.Store(dl.Dropped)
	var cbs []func(Delivery)
	c.mu.Lock()
	c.st.Delivered++
	for _, id := range dl.Subs {
		if s, ok := c.subs[id]; ok && s.cb != nil {
			cbs = append(cbs, s.cb)
		}
	}
	c.mu.Unlock()
	if len(cbs) == 0 {
		return
	}
	d := Delivery{
		Tag: string(dl.Tag), Type: dl.Type, Raw: dl.Raw, Origin: dl.Origin,
		UID: dl.UID, GID: dl.GID, Perm: dl.Perm, Data: append([]byte(nil), dl.Data...), Dropped: dl.Dropped,
	}
	for _, cb := range cbs {
		cb(d)
	}
}

// Subscription is one regular expression the client subscribed to. It is
// sent again on every new connection until Close.
type Subscription struct {
	c        *Client
	id       uint32
	regex    string
	raw      bool
	cb       func(Delivery)
	answered chan struct{}
	err      error
}

// Subscribe asks the daemon for every message whose tag (for the tap: the
// event type) matches regex, a Go regular expression, unanchored. With raw
// the redacted raw notifications are asked for instead of the mapped
// events. cb is called on the client's reading goroutine for each message;
// it must not block for long: while it runs nothing else is read, and the
// daemon drops what this client cannot take in time (Delivery.Dropped).
// Subscribe does not wait for the daemon: Wait does.
func (c *Client) Subscribe(regex string, raw bool, cb func(Delivery)) (*Subscription, error) {
	if c.opts.Mode&ModeSubscribe == 0 {
		return nil, ErrMode
	}
	if len(regex) > wire.MaxRegex {
		return nil, fmt.Errorf("%w: expression of %d bytes", ErrTooLarge, len(regex))
	}
	if _, err := regexp.Compile(regex); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, ErrClosed
	}
	c.subSeq++
	s := &Subscription{c: c, id: c.subSeq, regex: regex, raw: raw, cb: cb, answered: make(chan struct{})}
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
	return wire.AppendSubscribe(nil, wire.Subscribe{ID: s.id, Raw: s.raw, Regex: s.regex})
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
		c.logf(slog.LevelError, "channel subscription refused", "regex", s.regex, "reason", st.Text)
	}
	s.settle(err)
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

// Close ends the subscription.
func (s *Subscription) Close() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[s.id]; !ok {
		return
	}
	delete(c.subs, s.id)
	if c.conn != nil && c.state == StateConnected {
		c.ctrl = append(c.ctrl, wire.AppendUnsubscribe(nil, s.id))
		c.kickLocked()
	}
}
