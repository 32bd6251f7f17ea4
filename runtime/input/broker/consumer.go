package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
)

// Tap is shown the deliveries the consumer settles. Active is called once
// per batch from the session goroutine and must be cheap (an atomic load):
// while it answers false the consumer keeps nothing for the tap. Committed
// receives a batch's deliveries in delivery order, once the batch is
// committed and acknowledged; it must not block, and owns the slice.
type Tap interface {
	Active() bool
	Committed(items []Committed)
}

// Committed is one delivery as the tap sees it: the body as received (not
// redacted: the tap redacts what it shows) and the events committed for it.
type Committed struct {
	Exchange   string
	RoutingKey string
	EventType  string // of the notification; "" when it had none
	Body       []byte
	Events     [][]byte
}

// Consumer consumes the collector's queue: it maps each delivery, commits the
// events of a batch to the outbox, and only then acknowledges the batch.
// Run drives it; Ready reports whether it is consuming and Backlogged
// whether it is draining a backlog. Run must be called at most once; Ready
// and Backlogged are safe for concurrent use.
type Consumer struct {
	opts Options
	eps  []endpoint
	proc input.Processor
	box  input.Outbox
	pipe input.PipelinedOutbox // box, when it has the pipelined append and CommitPipeline > 1
	log  zerolog.Logger
	m    *metrics

	ready   atomic.Pointer[readyState]
	tagSeq  atomic.Uint64
	running atomic.Bool

	// epoch is when New made the consumer; fullAt is the time, in
	// nanoseconds after epoch on the monotonic clock, of the last delivery
	// taken with the prefetch window full (0: never).
	epoch  time.Time
	fullAt atomic.Int64

	// Test hooks, nil in production. afterCommit runs on the session
	// goroutine after a batch is committed and before it is acknowledged;
	// beforeAck runs right before each basic.ack with its delivery tag.
	afterCommit func()
	beforeAck   func(tag uint64)
	// handedOff runs on the committer goroutine after each batch is handed
	// to the outbox, with its number (from 1) and channels closed once it,
	// and the batch before it, settled in the outbox.
	handedOff func(n uint64, settled, prevSettled <-chan struct{})
	// beforeHandOff runs on the committer goroutine before batch n is
	// handed to the outbox.
	beforeHandOff func(n uint64, prevSettled <-chan struct{})
}

type readyState struct{ err error }

// New checks the options and returns a Consumer. Nothing is dialled before Run.
func New(proc input.Processor, box input.Outbox, opts Options) (*Consumer, error) {
	if proc == nil || box == nil {
		return nil, fmt.Errorf("%w: processor and outbox are required", ErrOptions)
	}
	opts.setDefaults()
	eps, err := opts.validate()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		opts: opts,
		eps:  eps,
		proc: proc,
		box:  box,
		log:  componentLogger(opts.Logger),
		m:    m,

		epoch: time.Now(),
	}
	if p, ok := box.(input.PipelinedOutbox); ok && opts.CommitPipeline > 1 {
		c.pipe = p
	}
	c.setReady(ErrNotConsuming)
	return c, nil
}

func componentLogger(l zerolog.Logger) zerolog.Logger {
	return l.With().Str("component", "broker").Logger()
}

// Ready returns nil while a session is consuming (including while consumption
// is paused at the outbox bound, which is back-pressure and not a fault), and
// the reason otherwise. It carries no credential.
func (c *Consumer) Ready() error {
	if s := c.ready.Load(); s != nil {
		return s.err
	}
	return ErrNotConsuming
}

func (c *Consumer) setReady(err error) { c.ready.Store(&readyState{err: err}) }

// backlogWindow is how long after the last delivery taken with the prefetch
// window full the consumer still reports a backlog.
const backlogWindow = 500 * time.Millisecond

// Backlogged reports whether the consumer is draining a backlog: within the
// last half second a worker took a delivery Prefetch tags past the last
// one acknowledged or requeued, that is, the broker kept the prefetch window
// full and had more for the consumer than it acknowledged. It turns false half a second after the
// window last ran full: when the queue is drained, while consumption is
// paused at the outbox bound, and while disconnected. It costs one
// atomic load and a clock reading, and is safe for concurrent use.
func (c *Consumer) Backlogged() bool {
	at := c.fullAt.Load()
	return at != 0 && c.sinceEpoch()-at < int64(backlogWindow)
}

// sinceEpoch is the monotonic time since New, in nanoseconds, at least 1.
func (c *Consumer) sinceEpoch() int64 { return max(int64(time.Since(c.epoch)), 1) }

// Run consumes until ctx is done, reconnecting forever with capped exponential
// backoff and full jitter (a delay uniform in [0, step], the step doubling
// from ReconnectMin to ReconnectMax). It returns nil when ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	return reconnectLoop{
		running: &c.running,
		bo:      c.opts.reconnectBackoff(),
		session: c.session,
		ended: func(ctx context.Context, err error) {
			if ctx.Err() != nil {
				c.setReady(ErrNotConsuming)
				return
			}
			c.setReady(fmt.Errorf("%w: %w", ErrNotConsuming, err))
			c.m.reconnects.Inc()
		},
		stopped: func() { c.setReady(ErrNotConsuming) },
		log:     &c.log,
		msg:     "broker session ended; reconnecting",
		severe:  []error{ErrQuorumUnsupported, ErrQueueTypeMismatch, ErrNoExchanges},
	}.run(ctx)
}

// session is one connection's life: connect, check, declare, probe, bind,
// consume. It reports whether it reached consuming.
func (c *Consumer) session(ctx context.Context) (consumed bool, err error) {
	cn, end, err := dialSession(ctx, &c.opts, c.eps, "consumer", c.log, c.opts.StopBudget+c.opts.CloseTimeout)
	if err != nil {
		return false, err
	}
	defer end()
	c.m.blocked.Set(0)
	c.m.paused.Set(0)
	log := c.log.With().Str("broker", cn.ep.redact).Logger()
	log.Info().Str("version", cn.version).Msg("connected to broker")

	s := &sess{c: c, cn: cn, log: log}
	s.connClosed = cn.NotifyClose(make(chan *amqp.Error, 1))
	s.blocked = cn.NotifyBlocked(make(chan amqp.Blocking, 4))

	if s.ch, err = cn.openChannel(c.opts.QueueType); err != nil {
		return false, err
	}
	s.chClosed = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := s.ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	if err := declareQueue(s.ch, &c.opts); err != nil {
		return false, err
	}
	present, missing, err := probeAll(cn, c.opts.Exchanges)
	if err != nil {
		return false, err
	}
	c.m.missingExchanges.Set(float64(len(missing)))
	if len(present) == 0 {
		return false, fmt.Errorf("%w: %s on vhost %q (probed again on reconnect)", ErrNoExchanges, strings.Join(missing, ","), cn.ep.vhost)
	}
	s.bind = &binder{c: cn, queue: c.opts.Queue, keys: c.opts.bindingKeys(), log: log}
	defer s.bind.close()
	s.missing = make(map[string]*probeState)
	for _, m := range missing {
		s.missing[m] = &probeState{bo: c.opts.probeBackoff()}
		s.missing[m].next = time.Now().Add(s.missing[m].bo.Next())
	}
	if len(missing) > 0 {
		log.Warn().Strs("missing", missing).Strs("present", present).
			Msg("exchanges missing on the broker; probing them again with backoff")
	}
	if c.opts.RequireExchanges && len(missing) > 0 {
		c.setReady(fmt.Errorf("%w: %s", ErrExchangesMissing, strings.Join(missing, ",")))
		if err := s.waitAllExchanges(ctx); err != nil {
			return false, err
		}
		present = c.opts.Exchanges
	}
	for _, e := range present {
		if err := s.bind.bindExchange(e); err != nil {
			return false, err
		}
	}
	c.m.refusedBindings.Set(float64(len(s.bind.refused)))
	log.Info().Strs("exchanges", present).Strs("keys", c.opts.bindingKeys()).Str("queue", c.opts.Queue).
		Msg("queue bound")
	if err := s.consume(); err != nil {
		return false, err
	}
	c.setReady(nil)
	log.Info().Str("queue", c.opts.Queue).Int("prefetch", c.opts.Prefetch).Msg("consuming")
	return true, s.loop(ctx)
}

type probeState struct {
	bo   *backoff.Backoff
	next time.Time
}

// sess holds the state of one session. Every delivery tag it holds belongs to
// s.ch; nothing is ever acknowledged on another channel.
type sess struct {
	c          *Consumer
	cn         *conn
	ch         *amqp.Channel
	log        zerolog.Logger
	bind       *binder
	missing    map[string]*probeState
	connClosed chan *amqp.Error
	chClosed   chan *amqp.Error
	blocked    chan amqp.Blocking

	tag        string
	deliveries <-chan amqp.Delivery // nil while the consumer is cancelled

	// The delivery flow (flow.go). Workers take deliveries from src and
	// hold them; mu guards what they share with the session goroutine:
	// pending to held below, lastTake (workers write it), and lingerC and
	// stopping (the session goroutine writes them; it reads them without
	// the lock). The rest only the session goroutine touches; the
	// committer and the settler talk to it through commitReq and
	// commitDone.
	src        atomic.Pointer[source]
	quit       chan struct{} // closed when the workers are to end
	kick       chan struct{} // a commit group is ready, or the channel closed (cap 1, never blocks)
	commitReq  chan *batch
	commitWait chan commitWait   // committer to settler: batches handed to the outbox, in order
	commitDone chan commitResult // settler to session: each batch durable or failed, in order
	inflight   []*batch          // handed to the committer and not settled, in tag order (at most CommitPipeline)

	mu        sync.Mutex
	pending   []*item // held, not yet handed to the committer, in tag order
	doneN     int     // items of pending mapped
	next      uint64  // lowest tag neither cut into a batch nor requeued
	epoch     uint64  // raised by every requeue: items held before it are dropped
	unsettled int     // batches handed to the committer whose result has not come back (requeued ones too)
	maxTag    uint64  // highest delivery tag held and not yet settled
	settled   uint64  // highest tag acknowledged or requeued
	held      int     // deliveries held and not yet settled
	wg        sync.WaitGroup

	// The commit linger (see Options.CommitLinger).
	lastTake time.Time   // when the last delivery was taken
	lingerT  *time.Timer // armed while a short batch waits
	lingerC  <-chan time.Time
	stopping bool // shutting down: nothing more arrives, never linger

	probeT   *time.Timer
	probeC   <-chan time.Time
	resumeC  <-chan time.Time // pause at the bound ends
	refuseC  <-chan time.Time // wait after a refused insert ends
	pauseBo  *backoff.Backoff
	lastNack time.Time
}

// waitAllExchanges probes the missing exchanges on their schedule until all
// exist (REQUIRE_EXCHANGES), or the session ends.
func (s *sess) waitAllExchanges(ctx context.Context) error {
	for len(s.missing) > 0 {
		d := time.Until(s.nextProbe())
		t := time.NewTimer(max(d, 0))
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case e := <-s.connClosed:
				t.Stop()
				return fmt.Errorf("%w: connection closed: %w", errSessionLost, e)
			case b := <-s.blocked:
				s.noteBlocked(b)
			case <-t.C:
				break wait
			}
		}
		for name, st := range s.missing {
			if time.Now().Before(st.next) {
				continue
			}
			ok, err := probeExchange(s.cn, name)
			if err != nil {
				return err
			}
			if ok {
				delete(s.missing, name)
				s.log.Info().Str("exchange", name).Msg("exchange appeared")
				continue
			}
			st.next = time.Now().Add(st.bo.Next())
		}
		s.c.m.missingExchanges.Set(float64(len(s.missing)))
		if len(s.missing) > 0 {
			s.c.setReady(fmt.Errorf("%w: %s", ErrExchangesMissing, strings.Join(s.missingNames(), ",")))
		}
	}
	return nil
}

// noteBlocked records connection.blocked / unblocked. The channel must be
// drained: the client library delivers these synchronously.
func (s *sess) noteBlocked(b amqp.Blocking) {
	if b.Active {
		s.c.m.blocked.Set(1)
		s.log.Warn().Str("reason", b.Reason).Msg("broker blocked the connection (resource alarm)")
		return
	}
	s.c.m.blocked.Set(0)
	s.log.Info().Msg("broker unblocked the connection")
}

func (s *sess) missingNames() []string {
	var out []string
	for _, e := range s.c.opts.Exchanges {
		if _, ok := s.missing[e]; ok {
			out = append(out, e)
		}
	}
	return out
}

func (s *sess) nextProbe() time.Time {
	var n time.Time
	for _, st := range s.missing {
		if n.IsZero() || st.next.Before(n) {
			n = st.next
		}
	}
	return n
}

func (s *sess) armProbe() {
	if len(s.missing) == 0 {
		s.probeC = nil
		return
	}
	d := max(time.Until(s.nextProbe()), 0)
	if s.probeT == nil {
		s.probeT = time.NewTimer(d)
	} else {
		s.probeT.Reset(d)
	}
	s.probeC = s.probeT.C
}

// probeDue probes the missing exchanges whose time has come and binds those
// that appeared.
func (s *sess) probeDue() error {
	for _, name := range s.missingNames() {
		st := s.missing[name]
		if time.Now().Before(st.next) {
			continue
		}
		ok, err := probeExchange(s.cn, name)
		if err != nil {
			return err
		}
		if !ok {
			d := st.bo.Next()
			st.next = time.Now().Add(d)
			s.log.Debug().Str("exchange", name).Dur("next_probe", d).Msg("exchange still missing")
			continue
		}
		if err := s.bind.bindExchange(name); err != nil {
			return err
		}
		delete(s.missing, name)
		s.c.m.refusedBindings.Set(float64(len(s.bind.refused)))
		s.log.Info().Str("exchange", name).Msg("exchange appeared and is bound")
	}
	s.c.m.missingExchanges.Set(float64(len(s.missing)))
	s.armProbe()
	return nil
}
