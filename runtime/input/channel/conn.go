package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

const (
	// maxUnsettled bounds the messages of one connection read and not yet
	// answered: past it the connection is not read until answers are
	// written (a client that publishes without reading its answers).
	maxUnsettled = 1 << 16
	// ackChunk is the most entries per Ack frame.
	ackChunk = 4096
	// finishTimeout bounds the last writes to a connection at its end.
	finishTimeout = 2 * time.Second
)

// conn is one client connection. Its reader (serve) decodes frames; its
// writer (writeLoop) sends what outQueue gathers: control frames, answers
// and tap deliveries.
type conn struct {
	srv  *Server
	nc   *net.UnixConn
	cred peerCred
	log  zerolog.Logger
	q    *outQueue
	sub  *subscriber

	modes     uint8
	unsettled atomic.Int64
	wdone     chan struct{}
	finished  sync.Once
}

func newConn(s *Server, nc *net.UnixConn, cred peerCred) *conn {
	c := &conn{
		srv:   s,
		nc:    nc,
		cred:  cred,
		q:     newOutQueue(s.hub.opts.SubscriberQueueBytes),
		wdone: make(chan struct{}),
	}
	c.sub = &subscriber{cred: cred, queue: c.q}
	c.log = s.log.With().Uint32("uid", cred.uid).Uint32("gid", cred.gid).Int32("pid", cred.pid).Logger()
	return c
}

// serve reads the connection until it ends. A connection the peer ended is
// finished once every message it published is answered; at the server's
// stop, Run finishes the connections after the last commit.
func (c *conn) serve(ctx context.Context) {
	go c.writeLoop()
	r := wire.NewReader(c.nc, wire.MaxFrame)
	if !c.handshake(r) {
		c.finish()
		return
	}
	var pub wire.Publish
	idle := c.srv.opts.IdleTimeout
	for {
		// Each frame, from its first byte to its last, must arrive within
		// the idle timeout: a silent connection and a stalled frame end alike.
		_ = c.nc.SetReadDeadline(time.Now().Add(idle))
		ft, p, err := r.Next()
		if err != nil {
			if errors.Is(err, wire.ErrVersion) || errors.Is(err, wire.ErrFrameTooLarge) || errors.Is(err, wire.ErrMalformed) {
				c.fail(err.Error())
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.srv.stopping() {
				c.idleEnd(ctx)
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !c.srv.stopping() {
				c.log.Debug().Err(err).Msg("channel connection read ended")
			}
			break
		}
		switch ft {
		case wire.FramePublish:
			if err := wire.ParsePublish(p, &pub); err != nil {
				c.fail(err.Error())
				return
			}
			if !c.publish(ctx, &pub) {
				return
			}
		case wire.FrameSubscribe:
			s, err := wire.ParseSubscribe(p)
			if err != nil {
				c.fail(err.Error())
				return
			}
			c.subscribe(s)
		case wire.FrameUnsubscribe:
			id, err := wire.ParseUnsubscribe(p)
			if err != nil {
				c.fail(err.Error())
				return
			}
			st := wire.SubStatus{ID: id, OK: c.srv.hub.unsubscribe(c.sub, id)}
			if !st.OK {
				st.Text = "no subscription with this id"
			}
			c.q.pushCtrl(wire.AppendUnsubStatus(nil, st))
		case wire.FramePing:
			// Nothing to do: the frame has moved the idle deadline.
		default:
			// Hello again, or a frame of a later revision: ignored.
		}
	}
	c.srv.hub.remove(c.sub)
	if c.srv.stopping() {
		return
	}
	// The peer is done sending (it may still read): answer what it
	// published, then end.
	c.q.waitUntil(ctx, func() bool { return c.unsettled.Load() == 0 })
	c.finish()
}

// idleEnd ends a connection on which no frame arrived within the idle
// timeout: what it published is answered first, then an Error frame says
// why it is closed.
func (c *conn) idleEnd(ctx context.Context) {
	c.srv.m.idleTimeouts.Inc()
	c.log.Info().Dur("idle_timeout", c.srv.opts.IdleTimeout).Msg("channel connection closed: no frame within the idle timeout")
	c.srv.hub.remove(c.sub)
	c.q.waitUntil(ctx, func() bool { return c.unsettled.Load() == 0 })
	c.q.pushCtrl(wire.AppendError(nil, fmt.Sprintf("idle timeout: no frame within %s", c.srv.opts.IdleTimeout)))
	c.finish()
}

func (c *conn) handshake(r *wire.Reader) bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.HelloTimeout))
	ft, p, err := r.Next()
	if err != nil {
		if errors.Is(err, wire.ErrVersion) {
			c.fail(fmt.Sprintf("unsupported protocol version; this daemon speaks version %d", wire.Version))
		}
		return false
	}
	if ft != wire.FrameHello {
		c.fail(fmt.Sprintf("expected HELLO, got %s", ft))
		return false
	}
	h, err := wire.ParseHello(p)
	if err != nil {
		c.fail(err.Error())
		return false
	}
	c.modes = h.Modes
	c.log = c.log.With().Str("client", h.Name).Logger()
	c.q.pushCtrl(wire.AppendWelcome(nil, wire.Welcome{MaxData: wire.MaxData, UID: c.cred.uid, GID: c.cred.gid,
		IdleTimeoutMillis: uint32(min(c.srv.opts.IdleTimeout.Milliseconds(), 1<<32-1))})) //nolint:gosec // G115: cut to 1<<32-1 by the min
	c.log.Debug().Uint8("modes", h.Modes).Msg("channel client connected")
	return true
}

// fail ends the connection on a protocol error: counted, logged, and told
// to the client in an Error frame.
func (c *conn) fail(text string) {
	c.srv.m.protocolErrors.Inc()
	c.log.Warn().Str("reason", text).Msg("channel connection closed on a protocol error")
	c.q.pushCtrl(wire.AppendError(nil, text))
	c.srv.hub.remove(c.sub)
	c.finish()
}

// finish lets the writer send what is queued (bounded by finishTimeout) and
// closes the connection. Safe to call more than once.
func (c *conn) finish() {
	c.finished.Do(func() {
		c.q.close()
		_ = c.nc.SetWriteDeadline(time.Now().Add(finishTimeout))
		<-c.wdone
		_ = c.nc.Close()
		c.srv.hub.remove(c.sub)
		c.srv.dropConn(c)
	})
}

// publish checks one message and hands it to the workers. It reports false
// when the server is stopping past its drain deadline.
func (c *conn) publish(ctx context.Context, p *wire.Publish) bool {
	if c.unsettled.Load() >= maxUnsettled &&
		!c.q.waitUntil(ctx, func() bool { return c.unsettled.Load() < maxUnsettled }) {
		return false
	}
	c.unsettled.Add(1)
	c.srv.m.received.Inc()
	if reason := c.check(p); reason != "" {
		c.srv.m.dropped.WithLabelValues(reason).Inc()
		c.q.pushAck(wire.AckEntry{Seq: p.Seq, Status: wire.Refused, Reason: reason})
		return true
	}
	it := newItem(c, p, c.srv.hub.Active())
	if !c.srv.budget.take(ctx, it.size) {
		return false
	}
	select {
	case c.srv.work <- it:
		return true
	case <-ctx.Done():
		c.srv.budget.give(it.size)
		return false
	}
}

// check returns why a message must be dropped, or "".
func (c *conn) check(p *wire.Publish) string {
	switch {
	case c.modes&wire.ModePublish == 0:
		return dropMode
	case p.Type != wire.String && p.Type != wire.JSON:
		return dropInvalidType
	case !validTag(p.Tag):
		return dropInvalidTag
	case len(p.Data) > wire.MaxData:
		return dropTooLarge
	case c.cred.uid != 0 && (p.UID != c.cred.uid || !c.cred.inGroup(p.GID)):
		// Impersonation: only root may publish as someone else.
		return dropCredentials
	case p.Type == wire.JSON && !json.Valid(p.Data):
		return dropInvalidJSON
	}
	return ""
}

// validTag: 1..MaxTag bytes, no control characters or spaces.
func validTag(t []byte) bool {
	if len(t) == 0 || len(t) > wire.MaxTag {
		return false
	}
	for _, b := range t {
		if b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

func (c *conn) subscribe(s wire.Subscribe) {
	var err error
	if c.modes&wire.ModeSubscribe == 0 {
		err = errors.New("the connection was opened to publish only")
	} else if len(s.Regex) > wire.MaxRegex {
		err = fmt.Errorf("expression longer than %d bytes", wire.MaxRegex)
	} else {
		err = c.srv.hub.subscribe(c.sub, s)
	}
	st := wire.SubStatus{ID: s.ID, OK: err == nil}
	if err != nil {
		st.Text = err.Error()
		c.srv.m.refusedSubscriptions.Inc()
	} else {
		c.log.Debug().Str("match", s.Regex).Bool("exact", s.Exact).Bool("raw", s.Raw).Msg("channel subscription")
	}
	c.q.pushCtrl(wire.AppendSubStatus(nil, st))
}

// writeLoop writes what the queue gathers until it is closed and empty.
// After a failed write the connection is broken: what follows is discarded
// (and answers count as written, so that nothing waits for them).
func (c *conn) writeLoop() {
	defer close(c.wdone)
	q := c.q
	var out []byte
	var bufs net.Buffers
	for {
		ctrl, acks, dels, closed := q.take()
		if !q.isBroken() && (len(ctrl) > 0 || len(acks) > 0 || len(dels) > 0) {
			out = out[:0]
			for _, f := range ctrl {
				out = append(out, f...)
			}
			for i := 0; i < len(acks); i += ackChunk {
				out = wire.AppendAck(out, acks[i:min(i+ackChunk, len(acks))])
			}
			bufs = append(bufs[:0], out, dels)
			if _, err := bufs.WriteTo(c.nc); err != nil {
				q.setBroken()
			}
		}
		if n := len(acks); n > 0 {
			c.unsettled.Add(-int64(n))
		}
		q.written(acks, dels)
		if closed {
			return
		}
	}
}

// outQueue gathers what a connection's writer sends. Deliveries are bounded
// in bytes: past the bound a delivery is dropped and counted for this
// connection alone.
type outQueue struct {
	mu        sync.Mutex
	limit     int64
	ctrl      [][]byte
	acks      []wire.AckEntry
	acksSpare []wire.AckEntry
	dels      []byte
	delsSpare []byte
	dropped   uint64
	closed    bool
	broken    atomic.Bool
	wake      chan struct{}
	wrote     chan struct{} // closed and replaced after every write round
}

func newOutQueue(limit int64) *outQueue {
	return &outQueue{limit: limit, wake: make(chan struct{}, 1), wrote: make(chan struct{})}
}

func (q *outQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *outQueue) pushCtrl(f []byte) {
	q.mu.Lock()
	q.ctrl = append(q.ctrl, f)
	q.mu.Unlock()
	q.signal()
}

func (q *outQueue) pushAck(e wire.AckEntry) {
	q.mu.Lock()
	q.acks = append(q.acks, e)
	q.mu.Unlock()
	q.signal()
}

func (q *outQueue) pushAcks(es []wire.AckEntry) {
	q.mu.Lock()
	q.acks = append(q.acks, es...)
	q.mu.Unlock()
	q.signal()
}

// pushDeliver encodes d onto the queue unless that would pass the bound; it
// reports false when it dropped d. d.Dropped is set to this connection's
// running count.
func (q *outQueue) pushDeliver(d *wire.Deliver) bool {
	need := int64(len(d.Data) + len(d.Tag) + len(d.Origin) + 4*len(d.Subs) + 48)
	q.mu.Lock()
	if q.closed || q.broken.Load() {
		q.mu.Unlock()
		return true
	}
	if int64(len(q.dels))+need > q.limit {
		q.dropped++
		q.mu.Unlock()
		return false
	}
	d.Dropped = q.dropped
	q.dels = wire.AppendDeliver(q.dels, d)
	q.mu.Unlock()
	q.signal()
	return true
}

// take waits for something to write (or the close) and takes it all.
func (q *outQueue) take() (ctrl [][]byte, acks []wire.AckEntry, dels []byte, closed bool) {
	for {
		q.mu.Lock()
		if len(q.ctrl) > 0 || len(q.acks) > 0 || len(q.dels) > 0 || q.closed {
			ctrl, q.ctrl = q.ctrl, nil
			acks, q.acks = q.acks, q.acksSpare[:0]
			q.acksSpare = nil
			dels, q.dels = q.dels, q.delsSpare[:0]
			q.delsSpare = nil
			closed = q.closed && len(ctrl) == 0 && len(acks) == 0 && len(dels) == 0
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		<-q.wake
	}
}

// written hands the buffers back and wakes whoever waits for a round.
func (q *outQueue) written(acks []wire.AckEntry, dels []byte) {
	q.mu.Lock()
	if q.acksSpare == nil {
		q.acksSpare = acks[:0]
	}
	if q.delsSpare == nil {
		q.delsSpare = dels[:0]
	}
	close(q.wrote)
	q.wrote = make(chan struct{})
	q.mu.Unlock()
}

// waitUntil waits, round after round of the writer, until cond holds. It
// reports false when the connection is closed or broken first, or ctx ends.
func (q *outQueue) waitUntil(ctx context.Context, cond func() bool) bool {
	for {
		q.mu.Lock()
		ch := q.wrote
		closed := q.closed
		q.mu.Unlock()
		if cond() {
			return true
		}
		if closed || q.broken.Load() {
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	close(q.wrote)
	q.wrote = make(chan struct{})
	q.mu.Unlock()
	q.signal()
}

func (q *outQueue) setBroken() {
	q.broken.Store(true)
}

func (q *outQueue) isBroken() bool { return q.broken.Load() }
