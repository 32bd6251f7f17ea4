package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// Processor maps one received message; *pipeline.Pipeline implements it.
type Processor interface {
	Process(ctx context.Context, msg pipeline.Message) pipeline.Result
}

// Outbox is the durable store a batch is committed to before it is
// acknowledged; *outbox.Outbox implements it. Append returns an error wrapping
// outbox.ErrFull at the bound (nothing written) and outbox.ErrRefused when the
// store cannot write.
type Outbox interface {
	Append(ctx context.Context, events [][]byte) error
	AppendDeadLetters(ctx context.Context, letters []outbox.DeadLetter) error
}

var (
	_ Processor = (*pipeline.Pipeline)(nil)
	_ Outbox    = (*outbox.Outbox)(nil)
)

// Consumer consumes the collector's queue: it maps each delivery, commits the
// events of a batch to the outbox, and only then acknowledges the batch.
// Run drives it; Ready reports whether a session is consuming. Run must be
// called at most once; Ready is safe for concurrent use.
type Consumer struct {
	opts Options
	eps  []endpoint
	proc Processor
	box  Outbox
	log  zerolog.Logger
	m    *metrics

	ready   atomic.Pointer[readyState]
	tagSeq  atomic.Uint64
	running atomic.Bool

	// afterCommit, when set (tests), runs after a batch is committed and
	// before it is acknowledged.
	afterCommit func()
}

type readyState struct{ err error }

// New checks the options and returns a Consumer. Nothing is dialled before Run.
func New(proc Processor, box Outbox, opts Options) (*Consumer, error) {
	if proc == nil || box == nil {
		return nil, fmt.Errorf("%w: processor and outbox are required", ErrOptions)
	}
	opts.setDefaults()
	eps, err := opts.validate()
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		opts: opts,
		eps:  eps,
		proc: proc,
		box:  box,
		log:  componentLogger(opts.Logger),
		m:    newMetrics(opts.Registerer),
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

// Run consumes until ctx is done, reconnecting forever with capped exponential
// backoff and jitter. It returns nil when ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: run called twice", ErrOptions)
	}
	bo := backoff{min: c.opts.ReconnectMin, max: c.opts.ReconnectMax, jitter: true}
	for {
		consumed, err := c.session(ctx)
		if ctx.Err() != nil {
			c.setReady(ErrNotConsuming)
			return nil
		}
		c.setReady(fmt.Errorf("%w: %w", ErrNotConsuming, err))
		if consumed {
			bo.reset()
		}
		d := bo.next()
		ev := c.log.Warn()
		if errors.Is(err, ErrQuorumUnsupported) || errors.Is(err, ErrQueueTypeMismatch) || errors.Is(err, ErrNoExchanges) {
			ev = c.log.Error()
		}
		ev.Err(err).Dur("retry_in", d).Msg("broker session ended; reconnecting")
		c.m.reconnects.Inc()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			c.setReady(ErrNotConsuming)
			return nil
		case <-t.C:
		}
	}
}

// session is one connection's life: connect, check, declare, probe, bind,
// consume. It reports whether it reached consuming.
func (c *Consumer) session(ctx context.Context) (consumed bool, err error) {
	cn, err := dial(&c.opts, c.eps, connectionName("consumer"), c.log)
	if err != nil {
		return false, err
	}
	defer cn.Close()
	c.m.blocked.Set(0)
	c.m.paused.Set(0)
	log := c.log.With().Str("broker", cn.ep.redact).Logger()
	log.Info().Str("version", cn.version).Msg("connected to broker")

	s := &sess{c: c, cn: cn, log: log}
	s.connClosed = cn.NotifyClose(make(chan *amqp.Error, 1))
	s.blocked = cn.NotifyBlocked(make(chan amqp.Blocking, 4))

	if c.opts.QueueType == QueueQuorum {
		if err := checkQuorumSupport(cn); err != nil {
			return false, err
		}
	}
	if s.ch, err = cn.Channel(); err != nil {
		return false, fmt.Errorf("open channel: %w", err)
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
		s.missing[m] = &probeState{bo: backoff{min: c.opts.ProbeMin, max: c.opts.ProbeMax}}
		s.missing[m].next = time.Now().Add(s.missing[m].bo.next())
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
		if _, err := s.bind.bindExchange(e); err != nil {
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
	bo   backoff
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
	deliveries <-chan amqp.Delivery

	// the batch: deliveries taken and not yet settled
	events  [][]byte
	letters []outbox.DeadLetter
	lastTag uint64
	held    int

	lingerT  *time.Timer
	lingerC  <-chan time.Time
	probeT   *time.Timer
	probeC   <-chan time.Time
	resumeC  <-chan time.Time // pause at the bound ends
	refuseC  <-chan time.Time // wait after a refused insert ends
	pauseBo  backoff
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
				return fmt.Errorf("%w: connection closed: %v", errSessionLost, e)
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
			st.next = time.Now().Add(st.bo.next())
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
			d := st.bo.next()
			st.next = time.Now().Add(d)
			s.log.Debug().Str("exchange", name).Dur("next_probe", d).Msg("exchange still missing")
			continue
		}
		if _, err := s.bind.bindExchange(name); err != nil {
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

func (s *sess) consume() error {
	s.tag = fmt.Sprintf("tally-openstack-collector-%d-%d", os.Getpid(), s.c.tagSeq.Add(1))
	d, err := s.ch.Consume(s.c.opts.Queue, s.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %q: %w", s.c.opts.Queue, err)
	}
	s.deliveries = d
	return nil
}

func (s *sess) loop(ctx context.Context) error {
	s.lingerT = time.NewTimer(time.Hour)
	s.lingerT.Stop()
	defer s.lingerT.Stop()
	s.armProbe()
	defer func() {
		if s.probeT != nil {
			s.probeT.Stop()
		}
	}()
	s.pauseBo = backoff{min: s.c.opts.PauseMin, max: s.c.opts.PauseMax}
	for {
		var dch <-chan amqp.Delivery
		if s.refuseC == nil {
			dch = s.deliveries
		}
		select {
		case <-ctx.Done():
			s.shutdown()
			return ctx.Err()
		case e := <-s.connClosed:
			return fmt.Errorf("%w: connection closed: %v", errSessionLost, e)
		case e := <-s.chClosed:
			return fmt.Errorf("%w: channel closed: %v", errSessionLost, e)
		case b := <-s.blocked:
			s.noteBlocked(b)
		case d, ok := <-dch:
			if !ok {
				return fmt.Errorf("%w: the broker cancelled the consumer", errSessionLost)
			}
			s.take(d)
			if s.held >= s.c.opts.BatchMax {
				if err := s.commit(ctx); err != nil {
					return err
				}
			} else if s.held == 1 {
				s.lingerT.Reset(s.c.opts.BatchLinger)
				s.lingerC = s.lingerT.C
			}
		case <-s.lingerC:
			s.lingerC = nil
			if err := s.commit(ctx); err != nil {
				return err
			}
		case <-s.probeC:
			s.probeC = nil
			if err := s.probeDue(); err != nil {
				return err
			}
		case <-s.refuseC:
			s.refuseC = nil
		case <-s.resumeC:
			s.resumeC = nil
			if err := s.consume(); err != nil {
				return err
			}
			s.c.m.paused.Set(0)
			s.log.Info().Msg("resuming consumption")
		}
	}
}

// take maps one delivery into the batch.
func (s *sess) take(d amqp.Delivery) {
	m := s.c.m
	m.consumed.Inc()
	s.held++
	s.lastTag = d.DeliveryTag
	size := len(d.Body)
	// The mapping gets a context that shutdown does not cancel: an interrupted
	// call would otherwise read as a mapper failure. The runtime bounds each call.
	res := s.c.proc.Process(context.WithoutCancel(context.Background()), pipeline.Message{
		Body: d.Body, Exchange: d.Exchange, RoutingKey: d.RoutingKey,
	})
	switch res.Outcome {
	case pipeline.Mapped:
		s.events = append(s.events, res.Events...)
	case pipeline.Skipped:
		ev := s.log.Debug()
		if res.Reason == "event_too_large" {
			ev = s.log.Warn()
		}
		ev.Str("reason", res.Reason).Str("event_type", res.EventType).Int("size", size).
			Str("exchange", d.Exchange).Str("routing_key", d.RoutingKey).Msg("notification skipped")
	case pipeline.Unparseable:
		// The pipeline counts and logs it (size, exchange, routing key; never
		// the content); it is acknowledged with the batch.
	case pipeline.Failed:
		// Never lost: the body goes to the dead-letter area with the batch and
		// is acknowledged only once that is committed. The pipeline logs it.
		dl := outbox.DeadLetter{
			Body: d.Body, Exchange: d.Exchange, RoutingKey: d.RoutingKey,
			EventType: res.EventType, Module: res.Module, Reason: res.Reason, At: time.Now().UTC(),
		}
		if res.Err != nil {
			dl.Detail = res.Err.Error()
		}
		s.letters = append(s.letters, dl)
	}
}

func (s *sess) resetBatch() {
	s.events = s.events[:0]
	clear(s.letters)
	s.letters = s.letters[:0]
	s.held = 0
	s.lastTag = 0
	s.lingerT.Stop()
	s.lingerC = nil
}

// commit writes the batch to the outbox and then acknowledges every delivery
// of it with one multiple ack on the channel that delivered them. On a full
// outbox it requeues what is held and pauses; on a refused insert it requeues
// and waits RefusedRetry before taking deliveries again.
func (s *sess) commit(ctx context.Context) error {
	if s.held == 0 {
		return nil
	}
	err := s.write(ctx)
	if err == nil {
		if s.c.afterCommit != nil {
			s.c.afterCommit()
		}
		if err := s.ch.Ack(s.lastTag, true); err != nil {
			return fmt.Errorf("%w: ack: %w", errSessionLost, err)
		}
		s.c.m.acked.Add(float64(s.held))
		s.pauseBo.reset()
		s.resetBatch()
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, outbox.ErrFull) {
		return s.pause()
	}
	// Refused (disk full, I/O error) or anything else: requeue and wait.
	s.log.Error().Err(err).Int("deliveries", s.held).Dur("retry_in", s.c.opts.RefusedRetry).
		Msg("outbox refused the batch; requeued")
	if err := s.nack(s.lastTag, s.held); err != nil {
		return err
	}
	s.resetBatch()
	t := time.NewTimer(s.c.opts.RefusedRetry)
	s.refuseC = t.C
	return nil
}

func (s *sess) write(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.c.opts.CommitTimeout)
	defer cancel()
	start := time.Now()
	defer func() { s.c.m.commitSeconds.Observe(time.Since(start).Seconds()) }()
	// Events first: at the bound nothing is written and the whole batch is
	// requeued. Dead letters do not count against the bound.
	if len(s.events) > 0 {
		if err := s.c.box.Append(cctx, s.events); err != nil {
			return err
		}
	}
	if len(s.letters) > 0 {
		if err := s.c.box.AppendDeadLetters(cctx, s.letters); err != nil {
			return err
		}
	}
	return nil
}

func (s *sess) nack(tag uint64, n int) error {
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

// pause stops taking deliveries at the outbox bound: the consumer is
// cancelled, every delivery held is requeued with one nack, and consumption
// resumes after a pause that doubles while the bound persists. Nothing stays
// unacknowledged during a pause, so consumer_timeout cannot fire.
func (s *sess) pause() error {
	maxTag, n := s.lastTag, s.held
	if err := s.ch.Cancel(s.tag, false); err != nil {
		return fmt.Errorf("%w: cancel: %w", errSessionLost, err)
	}
	for d := range s.deliveries {
		maxTag = max(maxTag, d.DeliveryTag)
		n++
	}
	s.deliveries = nil
	if err := s.nack(maxTag, n); err != nil {
		return err
	}
	s.resetBatch()
	d := s.pauseBo.next()
	s.c.m.paused.Set(1)
	s.log.Warn().Int("requeued", n).Dur("pause", d).Msg("outbox at its bound; consumption paused")
	t := time.NewTimer(d)
	s.resumeC = t.C
	return nil
}

// shutdown commits what is held (with a short deadline of its own) and lets
// the deferred close return anything else to the queue.
func (s *sess) shutdown() {
	if s.held == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.write(ctx); err != nil {
		_ = s.nack(s.lastTag, s.held)
		return
	}
	if s.c.afterCommit != nil {
		s.c.afterCommit()
	}
	if err := s.ch.Ack(s.lastTag, true); err == nil {
		s.c.m.acked.Add(float64(s.held))
	}
	s.resetBatch()
}
