package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// Mode is the direction of a client.
type Mode uint8

const (
	// ModePublish: the client publishes messages to the daemon.
	ModePublish Mode = Mode(wire.ModePublish)
	// ModeSubscribe: the client receives what its subscriptions match.
	ModeSubscribe Mode = Mode(wire.ModeSubscribe)
	// ModeBidir: both.
	ModeBidir Mode = ModePublish | ModeSubscribe
)

func (m Mode) String() string {
	switch m {
	case ModePublish:
		return "PUBLISH"
	case ModeSubscribe:
		return "SUBSCRIBE"
	case ModeBidir:
		return "BIDIR"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// State is where the client's connection stands.
type State int32

const (
	StateDisconnected State = iota // waiting for the next attempt
	StateConnecting                // dialling, or waiting for the daemon's Welcome
	StateConnected
	StateClosing // Close is draining the queue
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateDisconnected:
		return "disconnected"
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateClosing:
		return "closing"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Message types.
const (
	String = wire.String
	JSON   = wire.JSON
)

// Settlement statuses (docs/channel.md, the ACK frame).
const (
	Committed    = wire.Committed    // the events are in the daemon's outbox
	DeadLettered = wire.DeadLettered // the mapper failed; kept in the dead-letter area
	Skipped      = wire.Skipped      // nothing to commit (a tag no module claims ...)
	Refused      = wire.Refused      // dropped by the channel (credentials, invalid ...)
)

// Defaults.
const (
	DefaultQueueLimitBytes    = 1 << 20
	DefaultDeliveryQueueBytes = 1 << 20
	DefaultReconnectInterval  = time.Second
	DefaultPerm               = 0o440
	handshakeTimeout          = 10 * time.Second
	writeChunk                = 256 << 10
)

// Options configure a Client.
type Options struct {
	// Socket is the path of the daemon's channel socket (CHANNEL_SOCKET).
	Socket string
	// Mode: ModePublish (the default), ModeSubscribe or ModeBidir.
	Mode Mode
	// Name identifies the client in the daemon's log; default the program's
	// file name.
	Name string
	// ReconnectInterval is the wait between connection attempts; default 1 s.
	ReconnectInterval time.Duration
	// QueueLimitBytes bounds the messages held until the daemon settles them
	// (queued, and sent but not yet acknowledged), counted as their encoded
	// frames; default 1 MiB (CHANNEL_QUEUE_LIMIT_BYTES).
	QueueLimitBytes int
	// OnSettled, when set, is called once for every message the daemon
	// settles, in the order the daemon's answers arrive, on a goroutine of
	// its own: a slow OnSettled delays the next OnSettled only, never the
	// reading of answers or deliveries. It may call Publish, Subscribe,
	// SetQueueLimit and Close, but not Flush (which waits for OnSettled).
	OnSettled func(Settlement)
	// DeliveryQueueBytes bounds, for each subscription, the deliveries
	// received and not yet handed over (to its callback, or to Next and
	// Poll); past it a delivery is dropped for that subscription and
	// counted (Stats.LocalDropped, Delivery.Missed). Default 1 MiB.
	DeliveryQueueBytes int
	// Logger receives connection events; nil: none.
	Logger *slog.Logger
}

// Cred is a pair of credentials a message carries.
type Cred struct{ UID, GID uint32 }

// Message is one message to publish.
type Message struct {
	// Tag routes the message to a mapper module (1..255 bytes).
	Tag string
	// Type is String or JSON; zero infers it: from Value when Value is set
	// (a string or []byte is String, a json.RawMessage JSON as it is, any
	// other value JSON as encoding/json encodes it), String otherwise.
	Type wire.Type
	Data []byte // copied by Publish
	// Value, when set, is the message instead of Data: see Type.
	Value any
	// Perm is who may see the message and the events made of it on a tap,
	// as a file's read bits: 0400 owner, 0040 group, 0004 others. Zero means
	// DefaultPerm (0440).
	Perm uint32
	// Cred, when set, is the credentials the message carries instead of the
	// process's own. The daemon drops a message whose credentials differ
	// from the connection's unless the peer is root.
	Cred *Cred
}

// Settlement is the daemon's final answer about one message.
type Settlement struct {
	Seq    uint64 // as Publish returned it
	Status wire.Status
	Reason string
}

// Stats are the client's counters.
type Stats struct {
	Name           string // Options.Name: the application's name (Find, List)
	State          State
	Mode           Mode
	QueuedBytes    int    // held until settled: queued and in flight
	QueuedMessages int    // of which not yet written on the current connection
	InFlight       int    // written, not yet settled
	Published      uint64 // accepted by Publish
	Sent           uint64 // frames written, resends included
	Resent         uint64 // written again after a reconnect
	Acked          uint64 // settled Committed or DeadLettered
	Skipped        uint64 // settled Skipped (nothing to commit)
	Refused        uint64 // settled Refused by the daemon (credentials, invalid ...)
	Dropped        uint64 // abandoned by Close with cancel
	NoBufs         uint64 // Publish calls answered ErrNoBufs
	Delivered      uint64 // messages received for subscriptions
	DeliverDropped uint64 // what the daemon reported this client missed (slow reading), on the latest connection
	LocalDropped   uint64 // deliveries dropped here: a subscription's queue was at DeliveryQueueBytes
	Subscriptions  int    // open subscriptions
	Pings          uint64 // PING frames sent to keep an idle connection open
	Reconnects     uint64 // connections made after the first
}

type entry struct {
	seq   uint64
	frame []byte
	sent  bool // written at least once
}

// Client is one end of the local message channel. It connects to the daemon
// by itself and connects again after the interval whenever the connection
// is lost; published messages wait in a bounded queue meanwhile and are sent
// again if the connection was lost before the daemon settled them. All
// methods are safe for concurrent use.
type Client struct {
	opts Options
	cred Cred

	mu       sync.Mutex
	state    State
	queue    []*entry // not written on the current connection, in seq order
	inflight map[uint64]*entry
	bytes    int
	changed  chan struct{} // closed and replaced whenever something settles
	wake     chan struct{} // cap 1: the writer has work
	subs     map[uint32]*Subscription
	ctrl     [][]byte // control frames for the current connection
	conn     net.Conn
	closing  bool
	seq      uint64
	subSeq   uint32
	calling  int           // settlements whose OnSettled has not returned yet
	idle     time.Duration // the daemon's idle timeout (WELCOME); 0: none
	writing  int           // messages taken by the writer whose write has not returned
	lastErr  error
	st       Stats
	unsubs   map[uint32]*Subscription // Close waiting for UNSUB_STATUS

	// Callbacks run on two goroutines of their own, never on the reader:
	// settleQ feeds OnSettled, cbQ the subscriptions' callbacks.
	settleQ    []Settlement
	settleWake chan struct{}
	cbQ        []cbItem
	cbWake     chan struct{}
	cbStop     bool // Close: start no further subscription callback
	settleStop bool // Close: OnSettled ends once settleQ is empty

	stop     chan struct{} // closed by Close: stop connecting
	stopOnce sync.Once
	done     chan struct{} // the connection loop returned
	dropped  atomic.Uint64
}

// New starts a client. It returns at once: the connection is made in the
// background, and Publish queues until it is.
func New(opts Options) (*Client, error) {
	if opts.Socket == "" {
		return nil, fmt.Errorf("%w: socket path is empty", ErrOptions)
	}
	if opts.Mode == 0 {
		opts.Mode = ModePublish
	}
	if opts.Mode&^ModeBidir != 0 {
		return nil, fmt.Errorf("%w: mode %d", ErrOptions, opts.Mode)
	}
	if opts.ReconnectInterval <= 0 {
		opts.ReconnectInterval = DefaultReconnectInterval
	}
	if opts.QueueLimitBytes <= 0 {
		opts.QueueLimitBytes = DefaultQueueLimitBytes
	}
	if opts.DeliveryQueueBytes <= 0 {
		opts.DeliveryQueueBytes = DefaultDeliveryQueueBytes
	}
	if opts.Name == "" {
		opts.Name = filepath.Base(os.Args[0])
	}
	c := &Client{
		opts:       opts,
		cred:       Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}, //nolint:gosec // G115: Linux user and group ids are 32-bit
		inflight:   make(map[uint64]*entry),
		changed:    make(chan struct{}),
		wake:       make(chan struct{}, 1),
		subs:       make(map[uint32]*Subscription),
		unsubs:     make(map[uint32]*Subscription),
		stop:       make(chan struct{}),
		settleWake: make(chan struct{}, 1),
		cbWake:     make(chan struct{}, 1),
		done:       make(chan struct{}),
		state:      StateConnecting,
	}
	register(c)
	go c.run()
	go c.settleLoop()
	go c.callbackLoop()
	return c, nil
}

// Publish queues m and returns its sequence number at once; it never
// blocks. The daemon settles the message later (OnSettled, Stats, Flush):
// Committed only once its events are durably in the daemon's outbox. With
// the queue at its bound Publish returns ErrNoBufs and queues nothing.
func (c *Client) Publish(m Message) (uint64, error) {
	if c.opts.Mode&ModePublish == 0 {
		return 0, ErrMode
	}
	if m.Tag == "" {
		return 0, fmt.Errorf("%w: empty tag", ErrInvalid)
	}
	if err := m.infer(); err != nil {
		return 0, err
	}
	if len(m.Tag) > wire.MaxTag || len(m.Data) > wire.MaxData {
		return 0, fmt.Errorf("%w: tag of %d bytes, data of %d bytes", ErrTooLarge, len(m.Tag), len(m.Data))
	}
	switch m.Type {
	case wire.String:
	case wire.JSON:
		if !json.Valid(m.Data) {
			return 0, fmt.Errorf("%w: data of type JSON does not parse", ErrInvalid)
		}
	default:
		return 0, fmt.Errorf("%w: type %d", ErrInvalid, m.Type)
	}
	perm := m.Perm
	if perm == 0 {
		perm = DefaultPerm
	}
	cred := c.cred
	if m.Cred != nil {
		cred = *m.Cred
	}
	p := wire.Publish{
		PublishedAt: time.Now().UnixNano(),
		UID:         cred.UID, GID: cred.GID, Perm: perm & 0o777,
		Type: m.Type, Tag: []byte(m.Tag), Data: m.Data,
	}
	size := len(m.Tag) + len(m.Data) + 48

	c.mu.Lock() // the bound too: SetQueueLimit changes it under c.mu
	if limit := c.opts.QueueLimitBytes; size > limit {
		// Larger than the whole queue: ENOBUFS, as the seed answers for any
		// message that would take the queue past its bound, and ErrTooLarge,
		// since no amount of waiting makes room for it (ErrNoBufs would send
		// PublishWait waiting for ever).
		c.st.NoBufs++
		c.mu.Unlock()
		return 0, fmt.Errorf("%w: %d bytes, queue bound %d: %w", ErrTooLarge, size, limit, syscall.ENOBUFS)
	}
	if c.closing {
		c.mu.Unlock()
		return 0, ErrClosed
	}
	if c.bytes+size > c.opts.QueueLimitBytes {
		c.st.NoBufs++
		c.mu.Unlock()
		return 0, ErrNoBufs
	}
	c.seq++
	p.Seq = c.seq
	e := &entry{seq: p.Seq, frame: wire.AppendPublish(make([]byte, 0, size), &p)}
	c.queue = append(c.queue, e)
	c.bytes += len(e.frame)
	c.st.Published++
	c.mu.Unlock()
	c.kick()
	return p.Seq, nil
}

// PublishWait is Publish for callers that prefer to wait: while the queue is
// at its bound it waits for room, until ctx is done.
func (c *Client) PublishWait(ctx context.Context, m Message) (uint64, error) {
	for {
		ch := c.changedCh()
		seq, err := c.Publish(m)
		if !errors.Is(err, ErrNoBufs) {
			return seq, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Flush waits until the daemon has settled every message published so far
// (and OnSettled has returned for each), or ctx is done. It must not be
// called from OnSettled, which it would wait for.
func (c *Client) Flush(ctx context.Context) error {
	return c.waitFor(ctx, func() bool { return len(c.queue) == 0 && len(c.inflight) == 0 && c.calling == 0 })
}

// waitFor waits until cond (called with c.mu held) holds, or ctx is done.
func (c *Client) waitFor(ctx context.Context, cond func() bool) error {
	for {
		c.mu.Lock()
		ok := cond()
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitSent waits until every message published so far has been written to
// a connection (not necessarily answered), or ctx is done. A program that
// exits right after it leaves the written messages to the daemon; what the
// daemon then fails to commit is lost, as nobody is left to send it again.
func (c *Client) WaitSent(ctx context.Context) error {
	return c.waitFor(ctx, func() bool { return len(c.queue) == 0 && c.writing == 0 })
}

// Close ends the client. With cancel false it first waits, bounded by ctx,
// until the daemon has settled every queued message (what is still queued
// when ctx ends is abandoned and the context's error returned); with cancel
// true it abandons the queue at once. Abandoned messages count in
// Stats.Dropped. Publish answers ErrClosed from the moment Close is called.
//
// Close may be called from a callback (a subscription's, or OnSettled),
// with either value of cancel: it does not wait for callbacks. No
// subscription callback starts once Close has returned (one under way may
// finish after it); OnSettled is still called for what the daemon settled
// before the connection was closed. Use Flush first to wait for those.
func (c *Client) Close(ctx context.Context, cancel bool) error {
	c.mu.Lock()
	if c.state == StateClosed {
		c.mu.Unlock()
		return nil
	}
	c.closing = true
	c.state = StateClosing
	c.mu.Unlock()

	var err error
	if !cancel {
		err = c.drain(ctx)
	}
	c.stopOnce.Do(func() { close(c.stop) })
	c.mu.Lock()
	if c.conn != nil {
		_ = c.conn.Close()
	}
	c.mu.Unlock()
	<-c.done

	c.mu.Lock()
	n := uint64(len(c.queue) + len(c.inflight))
	c.st.Dropped += n
	c.queue, c.inflight, c.bytes = nil, map[uint64]*entry{}, 0
	c.state = StateClosed
	c.broadcast()
	subs := c.subs
	c.subs = map[uint32]*Subscription{}
	for _, s := range c.unsubs {
		s.unsubDone <- nil
	}
	clear(c.unsubs)
	c.cbStop, c.settleStop = true, true
	c.cbQ = nil
	for _, s := range subs {
		s.closeLocked()
	}
	c.mu.Unlock()
	c.kickLoops()
	for _, s := range subs {
		s.settle(ErrClosed)
	}
	unregister(c)
	return err
}

// drain waits until the daemon has settled every queued message (not for
// OnSettled: Close may be called from it), or ctx is done.
func (c *Client) drain(ctx context.Context) error {
	return c.waitFor(ctx, func() bool { return len(c.queue) == 0 && len(c.inflight) == 0 })
}

// Stats returns a copy of the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.Name = c.opts.Name
	s.State = c.state
	s.Mode = c.opts.Mode
	s.Subscriptions = len(c.subs)
	s.QueuedBytes = c.bytes
	s.QueuedMessages = len(c.queue)
	s.InFlight = len(c.inflight)
	s.DeliverDropped = c.dropped.Load()
	return s
}

// State reports the connection's state.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// LastError is why the last connection attempt failed (the socket missing,
// permission denied, the daemon refusing), or nil once connected.
func (c *Client) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// SetQueueLimit changes the queue bound (n <= 0: the default); messages
// already queued stay, and Publish answers ErrNoBufs until they are settled
// below the new bound. Safe from a callback.
func (c *Client) SetQueueLimit(n int) {
	if n <= 0 {
		n = DefaultQueueLimitBytes
	}
	c.mu.Lock()
	c.opts.QueueLimitBytes = n
	c.mu.Unlock()
}

// broadcast wakes every waiter of Flush and PublishWait. c.mu held.
func (c *Client) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Client) changedCh() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *Client) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) logf(level slog.Level, msg string, args ...any) {
	if c.opts.Logger != nil {
		c.opts.Logger.Log(context.Background(), level, msg, args...)
	}
}

// run connects, serves the connection until it is lost, and connects again
// after the interval, until Close.
func (c *Client) run() {
	defer close(c.done)
	connected := 0
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		c.setState(StateConnecting)
		conn, r, err := c.dial()
		if err == nil {
			if connected > 0 {
				c.mu.Lock()
				c.st.Reconnects++
				c.mu.Unlock()
			}
			connected++
			c.serve(conn, r)
		} else {
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			c.logf(slog.LevelDebug, "channel connection failed", "socket", c.opts.Socket, "err", err)
		}
		c.setState(StateDisconnected)
		t := time.NewTimer(c.opts.ReconnectInterval)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (c *Client) setState(s State) {
	c.mu.Lock()
	if !c.closing {
		c.state = s
	}
	c.mu.Unlock()
}

// Name is the application name the client was created with.
func (c *Client) Name() string { return c.opts.Name }

// infer sets m.Type and m.Data from m.Value (see Message.Type).
func (m *Message) infer() error {
	if m.Value != nil {
		switch v := m.Value.(type) {
		case string:
			m.Data = []byte(v)
			if m.Type == 0 {
				m.Type = wire.String
			}
		case []byte:
			m.Data = v
			if m.Type == 0 {
				m.Type = wire.String
			}
		case json.RawMessage:
			m.Data = v
			if m.Type == 0 {
				m.Type = wire.JSON
			}
		default:
			b, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			m.Data = b
			if m.Type == 0 {
				m.Type = wire.JSON
			}
		}
	}
	if m.Type == 0 {
		m.Type = wire.String
	}
	return nil
}

func (c *Client) kickLoops() {
	for _, ch := range []chan struct{}{c.settleWake, c.cbWake} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// settleLoop calls OnSettled for each settlement, in order, until Close
// and the queue is empty.
func (c *Client) settleLoop() {
	for {
		c.mu.Lock()
		if len(c.settleQ) == 0 {
			stop := c.settleStop
			c.mu.Unlock()
			if stop {
				return
			}
			<-c.settleWake
			continue
		}
		batch := c.settleQ
		c.settleQ = nil
		c.mu.Unlock()
		for _, s := range batch {
			c.opts.OnSettled(s)
			c.mu.Lock()
			c.calling--
			c.broadcast()
			c.mu.Unlock()
		}
	}
}

// cbItem is one delivery waiting for its subscription's callback.
type cbItem struct {
	s    *Subscription
	d    Delivery
	size int
}

// callbackLoop calls the subscriptions' callbacks, in the order the
// deliveries arrived, until Close.
func (c *Client) callbackLoop() {
	for {
		c.mu.Lock()
		if c.cbStop {
			c.mu.Unlock()
			return
		}
		if len(c.cbQ) == 0 {
			c.mu.Unlock()
			<-c.cbWake
			continue
		}
		it := c.cbQ[0]
		c.cbQ[0] = cbItem{}
		c.cbQ = c.cbQ[1:]
		it.s.queued -= it.size
		skip := it.s.closed
		c.mu.Unlock()
		if !skip {
			it.s.cb(it.d)
		}
	}
}

func (c *Client) dial() (net.Conn, *wire.Reader, error) {
	d := net.Dialer{Timeout: handshakeTimeout}
	conn, err := d.Dial("unix", c.opts.Socket)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	if c.stopped() {
		c.mu.Unlock()
		conn.Close()
		return nil, nil, ErrClosed
	}
	c.conn = conn
	c.mu.Unlock()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := conn.Write(wire.AppendHello(nil, wire.Hello{Modes: uint8(c.opts.Mode), Name: c.opts.Name})); err != nil {
		c.dropConn(conn)
		return nil, nil, err
	}
	r := wire.NewReader(conn, 0)
	ft, p, err := r.Next()
	if err == nil && ft == wire.FrameError {
		text, _ := wire.ParseError(p)
		err = fmt.Errorf("daemon refused the connection: %s", text)
	} else if err == nil && ft != wire.FrameWelcome {
		err = fmt.Errorf("%w: %s before WELCOME", wire.ErrMalformed, ft)
	}
	if err != nil {
		c.dropConn(conn)
		return nil, nil, err
	}
	w, err := wire.ParseWelcome(p)
	if err != nil {
		c.dropConn(conn)
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	c.mu.Lock()
	c.idle = time.Duration(w.IdleTimeoutMillis) * time.Millisecond
	c.mu.Unlock()
	return conn, r, nil
}

func (c *Client) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *Client) dropConn(conn net.Conn) {
	conn.Close()
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	c.mu.Unlock()
}
