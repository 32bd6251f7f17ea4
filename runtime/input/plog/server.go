package plog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// queueSlots is the capacity of a listener's two queues (received messages,
// mapped events). Received messages are bounded by Settings.QueueBytes as well;
// the slots let the queues absorb an outbox commit that stalls for a few
// hundred milliseconds at tens of thousands of messages a second.
const queueSlots = 1 << 16

// Exchange is the source exchange of every plog message.
const Exchange = "plog"

// Tag prefixes a fragmented message may carry.
const (
	tagModule     = "kt:" // kt:<module name> selects the mapper; kt:null drops the message
	tagRoutingKey = "rk:" // rk:<routing key> replaces the listener's routing key
)

// Server runs the plog listeners of one daemon.
type Server struct {
	opts      Options
	log       zerolog.Logger
	listeners []*listener
	life      *input.Serving
	killOnce  sync.Once
	closeOnce sync.Once
	trusted   []netip.Prefix // Options.TrustedSources, or loopback
}

// ListenerInfo names a bound listener.
type ListenerInfo struct {
	Network string
	Addr    net.Addr
	// Name is "<network>://<host:port>", the routing key of its messages and the
	// listener label of its metrics.
	Name string
}

type item struct {
	body []byte
	tags []string
	// received is when the whole message was in hand (enqueue): the
	// timestamp of a canonical event that carries none.
	received time.Time
}

type commitItem struct {
	events []ledger.Keyed
	letter *outbox.DeadLetter
	// For the ledger: the message's event type, and why it was skipped
	// (an item with neither events nor a letter only counts).
	eventType string
	skipped   string
	taken     time.Time
}

type listener struct {
	srv     *Server
	net     string
	name    string
	set     Settings
	chain   []pipeline.Mapper
	byName  map[string]pipeline.Mapper
	st      stats
	log     zerolog.Logger
	cmdLog  zerolog.Logger
	connLog zerolog.Logger // connections closed for the line budget, sampled

	udp    *net.UDPConn
	tcp    *net.TCPListener
	lines  *lineBudget // TCP only
	rcvbuf int         // the kernel's receive buffer, as it reports it

	queue   chan item
	queued  atomic.Int64
	commits chan commitItem

	connMu    sync.Mutex
	conns     map[net.Conn]struct{}
	perSource map[netip.Addr]int // open connections by source address
	closed    bool
}

// New validates opts and binds every listener, so that an address in use stops
// start-up. Nothing is read until Run.
func New(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Version == "" {
		opts.Version = "unknown"
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = defaultDrainTimeout
	}
	if opts.Environ == nil {
		opts.Environ = os.Environ
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		trusted: opts.TrustedSources,
	}
	s.life = input.NewServing("plog", ErrClosed, s.closeSockets)
	if len(s.trusted) == 0 {
		s.trusted = defaultTrusted
	}
	for _, lo := range opts.Listeners {
		l, err := s.bind(lo)
		if err != nil {
			s.closeSockets()
			return nil, err
		}
		s.listeners = append(s.listeners, l)
	}
	if err := imetrics.Register(opts.Registerer, &collector{srv: s}); err != nil {
		s.closeSockets()
		return nil, fmt.Errorf("plog: %w", err)
	}
	return s, nil
}

func (s *Server) bind(lo Listener) (*listener, error) {
	addr, _ := normalizeAddress(lo.Address)
	set := Merge(lo.Settings, s.opts.Defaults)
	l := &listener{
		srv:       s,
		net:       lo.Network,
		set:       set,
		chain:     lo.Mappers,
		byName:    make(map[string]pipeline.Mapper),
		queue:     make(chan item, queueSlots),
		commits:   make(chan commitItem, queueSlots),
		conns:     make(map[net.Conn]struct{}),
		perSource: make(map[netip.Addr]int),
	}
	l.st.started = time.Now()
	for _, m := range lo.Mappers {
		for _, n := range []string{m.Manifest().Name, m.ID()} {
			if _, dup := l.byName[n]; !dup && n != "" {
				l.byName[n] = m
			}
		}
	}
	switch lo.Network {
	case UDP:
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("plog: listener %s: %w", addr, err)
		}
		c, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, fmt.Errorf("plog: listener udp://%s: %w", addr, err)
		}
		setReadBuffer(c, set.ReadBufferBytes)
		enableDropCount(c)
		l.udp = c
		l.name = "udp://" + c.LocalAddr().String()
		l.rcvbuf = readBufferBytes(c)
	case TCP:
		ta, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("plog: listener %s: %w", addr, err)
		}
		c, err := net.ListenTCP("tcp", ta)
		if err != nil {
			return nil, fmt.Errorf("plog: listener tcp://%s: %w", addr, err)
		}
		l.tcp = c
		l.name = "tcp://" + c.Addr().String()
	}
	l.log = s.log.With().Str("listener", l.name).Logger()
	l.cmdLog = sampledLog(l.log)
	l.connLog = sampledLog(l.log)
	if l.tcp != nil {
		l.lines = newLineBudget(set.LineBudgetBytes, set.MaxConnections, &l.st.tcpLineBytes)
	}
	return l, nil
}

// Listeners describes the bound listeners, in the order of Options.Listeners.
func (s *Server) Listeners() []ListenerInfo {
	out := make([]ListenerInfo, len(s.listeners))
	for i, l := range s.listeners {
		out[i] = ListenerInfo{Network: l.net, Name: l.name}
		if l.udp != nil {
			out[i].Addr = l.udp.LocalAddr()
		} else {
			out[i].Addr = l.tcp.Addr()
		}
	}
	return out
}

// Stats returns the counters of listener i (the order of Options.Listeners).
func (s *Server) Stats(i int) Snapshot { return s.listeners[i].snapshot() }

func (l *listener) snapshot() Snapshot { return l.st.snapshot(l.srv.opts.Version) }

// Run serves every listener until ctx is done or Close is called. It then stops
// reading, lets the workers map what was already received and commits it,
// bounded by Options.DrainTimeout, and returns nil. It may be called once; it
// returns ErrClosed at once when Close came first.
func (s *Server) Run(ctx context.Context) error {
	return s.life.Run(func() error { return s.serve(ctx) })
}

func (s *Server) serve(ctx context.Context) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	var readers, workers, committers sync.WaitGroup
	for _, l := range s.listeners {
		committers.Add(1)
		go func() { defer committers.Done(); l.commitLoop(work) }()
		var lw sync.WaitGroup
		for range l.set.Workers {
			lw.Add(1)
			go func() { defer lw.Done(); l.workLoop(work) }()
		}
		workers.Add(1)
		go func() { defer workers.Done(); lw.Wait(); close(l.commits) }()
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer close(l.queue)
			if l.udp != nil {
				l.readUDP(work)
			} else {
				l.acceptTCP(work)
			}
		}()
		ev := l.log.Info()
		if l.udp != nil {
			ev = ev.Int("receive_buffer_bytes", l.rcvbuf)
		}
		ev.Msg("plog listener started")
	}

	defer s.life.Wait(ctx, s.opts.DrainTimeout, cancelWork)()
	s.closeSockets()
	readers.Wait()
	workers.Wait()
	committers.Wait()
	return nil
}

// Close stops the listeners. When Run is serving, Close waits for it to drain,
// bounded by ctx. It is safe to call more than once and without Run.
func (s *Server) Close(ctx context.Context) error { return s.life.Close(ctx) }

func (s *Server) closeSockets() {
	s.closeOnce.Do(func() {
		for _, l := range s.listeners {
			if l.udp != nil {
				_ = l.udp.Close()
			}
			if l.tcp != nil {
				_ = l.tcp.Close()
			}
			l.closeConns()
		}
	})
}

func (s *Server) kill() {
	s.killOnce.Do(func() {
		s.log.Warn().Msg("plog KILL command received: stopping")
		go s.opts.Stop()
	})
}

// enqueue hands a message to the workers. It blocks while the queue is full
// (for UDP the socket buffer then fills; for TCP the client is pushed back) and
// gives up only when the drain deadline has passed.
func (l *listener) enqueue(ctx context.Context, it item) bool {
	n := int64(len(it.body))
	it.received = time.Now()
	for l.queued.Load() > 0 && l.queued.Load()+n > l.set.QueueBytes {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
		}
	}
	l.queued.Add(n)
	select {
	case l.queue <- it:
		return true
	case <-ctx.Done():
		l.queued.Add(-n)
		return false
	}
}

func (l *listener) workLoop(ctx context.Context) {
	for it := range l.queue {
		l.queued.Add(-int64(len(it.body)))
		l.process(ctx, it)
	}
}

func (l *listener) process(ctx context.Context, it item) {
	defer func() {
		if r := recover(); r != nil {
			l.st.exceptions.Add(1)
			l.log.Error().Interface("panic", r).Int("bytes", len(it.body)).Msg("plog message processing panicked")
		}
	}()
	modules, rk := l.chain, l.name
	var picked []pipeline.Mapper
	for _, t := range it.tags {
		if name, ok := strings.CutPrefix(t, tagModule); ok {
			if name == "null" {
				l.st.nullRoute.Add(1)
				return
			}
			m, ok := l.byName[name]
			if !ok {
				l.st.unknownRoute.Add(1)
				l.log.Debug().Str("module", name).Msg("plog message names a module this listener does not have; dropped")
				return
			}
			picked = append(picked, m)
		} else if key, ok := strings.CutPrefix(t, tagRoutingKey); ok && key != "" {
			rk = key
		}
	}
	if len(picked) > 0 {
		modules = picked
	}
	taken := time.Now()
	res := l.srv.opts.Processor.Process(ctx, pipeline.Message{
		Body:       it.body,
		Exchange:   Exchange,
		RoutingKey: rk,
		Modules:    modules,
		Canonical:  true,
		DeriveID:   true,
		Received:   it.received,
	})
	switch res.Outcome {
	case pipeline.Mapped:
		l.st.mapped.Add(1)
		if res.Module != "" {
			m := l.st.module(res.Module)
			m.mapped.Add(1)
			m.events.Add(uint64(len(res.Events)))
		}
		if len(res.Events) > 0 {
			l.toCommit(ctx, commitItem{events: res.AppendKeyed(nil), eventType: res.EventType, taken: taken})
		}
	case pipeline.Skipped:
		l.st.skipped.Add(1)
		l.toCommit(ctx, commitItem{eventType: res.EventType, skipped: res.Reason, taken: taken})
	case pipeline.Unparseable:
		// Kept as an undeliverable dead letter, as the AMQP input keeps its
		// unparseable bodies: text in another encoding than UTF-8 (the
		// original client's send(String) writes ISO-8859-1) can be read and
		// resent from there. The outbox holds such letters within a budget of
		// their own and counts what it drops past it.
		l.st.unparseable.Add(1)
		body, truncated := it.body, 0
		if len(body) > pipeline.DefaultMaxBodyBytes {
			body, truncated = body[:pipeline.DefaultMaxBodyBytes], len(it.body)
		}
		l.toCommit(ctx, commitItem{letter: &outbox.DeadLetter{
			Body: body, Truncated: truncated, Exchange: Exchange, RoutingKey: rk, EventType: res.EventType,
			Reason: res.Reason, At: time.Now().UTC(), Undeliverable: true,
		}, eventType: res.EventType, taken: taken})
	case pipeline.Failed:
		l.st.failed.Add(1)
		if res.Module != "" {
			l.st.module(res.Module).failed.Add(1)
		}
		detail := ""
		if res.Err != nil {
			detail = res.Err.Error()
		}
		l.toCommit(ctx, commitItem{letter: &outbox.DeadLetter{
			Body: it.body, Exchange: Exchange, RoutingKey: rk, EventType: res.EventType,
			Module: res.Module, Reason: res.Reason, Detail: detail, At: time.Now().UTC(),
		}, eventType: res.EventType, taken: taken})
	}
}

func (l *listener) toCommit(ctx context.Context, c commitItem) {
	select {
	case l.commits <- c:
	case <-ctx.Done():
		l.st.failedToSend.Add(1)
	}
}

// maxBatchBytes caps the bytes of one outbox transaction, whatever BatchMax says:
// a Badger transaction has a size limit, and events may be up to 64 KiB each.
const maxBatchBytes = 512 << 10

// commitLoop batches events into outbox transactions: a batch is committed when
// it holds BatchMax events or maxBatchBytes, or BatchLinger after its first
// event. While a commit is in flight the next batch gathers in the queue, so the
// batch grows with the outbox's latency (group commit).
func (l *listener) commitLoop(ctx context.Context) {
	var (
		events  []ledger.Keyed
		letters []outbox.DeadLetter
		msgs    int
		size    int
		counted int // items held, events or not
		// The ledger: each message with its outcome, in the hour the batch's
		// first was taken; the dead-lettered ones with the dead letters,
		// the others with the events (or alone).
		taken            time.Time
		tally, deadTally *ledger.Delta
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		timer.Stop()
		if len(events) > 0 || (len(letters) == 0 && !tally.Empty()) {
			l.appendEvents(ctx, events, msgs, taken, tally)
		} else if len(letters) > 0 {
			deadTally.Add(tally)
		}
		if len(letters) > 0 {
			if err := l.srv.opts.Outbox.AppendDeadLettersCounted(ctx, letters, deadTally); err != nil {
				l.st.exceptions.Add(1)
				l.log.Error().Err(err).Int("letters", len(letters)).Msg("plog dead letters not stored")
			}
		}
		events, letters, msgs, size, counted, tally, deadTally = nil, nil, 0, 0, 0, nil, nil
	}
	for {
		select {
		case c, ok := <-l.commits:
			if !ok {
				flush()
				return
			}
			if counted == 0 {
				timer.Reset(l.set.BatchLinger)
				taken, tally, deadTally = c.taken, &ledger.Delta{}, &ledger.Delta{}
			}
			counted++
			k := ledger.Key{Hour: ledger.HourOf(taken), Source: Exchange, Type: c.eventType}
			switch {
			case c.letter != nil:
				deadTally.Row(k).DeadLetter(c.letter.Reason)
			case len(c.events) > 0:
				tally.Row(k).Commit()
			default:
				tally.Row(k).Skip(c.skipped)
			}
			if c.letter != nil {
				letters = append(letters, *c.letter)
			} else {
				events = append(events, c.events...)
				msgs++
				for _, ev := range c.events {
					size += len(ev.Bytes)
				}
			}
			if max(counted, len(events)+len(letters)) >= l.set.BatchMax || size >= maxBatchBytes {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// appendRetry is the wait between two attempts of a TCP batch the outbox
// refused (internal/backoff): 10 ms doubling to 1 s, no jitter (the retries
// are local; nothing else contends).
var appendRetry = backoff.Policy{Min: 10 * time.Millisecond, Max: time.Second}

// appendEvents commits one batch. UDP cannot push back, so a full or failing
// outbox drops the batch (counted in failed_to_send and outbox_full). TCP retries
// until the outbox takes it, which stops the workers, then the readers, then the
// clients (back-pressure), or until the drain deadline.
func (l *listener) appendEvents(ctx context.Context, events []ledger.Keyed, msgs int, taken time.Time, tally *ledger.Delta) {
	retry := backoff.New(appendRetry)
	for {
		err := l.srv.opts.Outbox.AppendKeyed(ctx, events, taken, tally)
		if err == nil {
			l.st.eventsCommitted.Add(uint64(len(events)))
			return
		}
		full := isFull(err)
		if full {
			l.st.outboxFull.Add(uint64(msgs))
		} else {
			l.st.exceptions.Add(1)
		}
		if l.net == UDP || ctx.Err() != nil {
			l.st.failedToSend.Add(uint64(msgs))
			l.log.Warn().Err(err).Int("events", len(events)).Msg("plog events dropped: outbox refused them")
			return
		}
		if !full {
			l.log.Warn().Err(err).Int("events", len(events)).Msg("plog outbox append failed; retrying")
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry.Next()):
		}
	}
}

// trackConn registers c, unless the listener is closed (closed) or its
// source already holds MaxConnectionsPerSource connections (overSource).
func (l *listener) trackConn(c net.Conn) (closed, overSource bool) {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if l.closed {
		return true, false
	}
	src := sourceOf(c)
	if l.perSource[src] >= l.set.MaxConnectionsPerSource {
		return false, true
	}
	l.perSource[src]++
	l.conns[c] = struct{}{}
	return false, false
}

func (l *listener) untrackConn(c net.Conn) {
	src := sourceOf(c)
	l.connMu.Lock()
	delete(l.conns, c)
	if l.perSource[src]--; l.perSource[src] <= 0 {
		delete(l.perSource, src)
	}
	l.connMu.Unlock()
}

// sourceOf is the remote address of a connection, without its port.
func sourceOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

func (l *listener) closeConns() {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	l.closed = true
	for c := range l.conns {
		_ = c.Close()
	}
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
