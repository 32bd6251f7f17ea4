package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// The control link carries the mapper decisions (promote, abort) between the
// replicas of one deployment. See the package documentation, "Control link".

// Defaults of ControlOptions.
const (
	DefaultControlExchange = "tally-collector-control"
	defaultConfirmTimeout  = 5 * time.Second
	defaultApplyRetry      = time.Second
	// maxUnsent bounds the decisions kept until the broker confirms them;
	// past it the oldest is dropped (and logged).
	maxUnsent = 100
)

// unsentRecord is the name the link keeps its unconfirmed decisions under in
// its RecordStore.
const unsentRecord = "control-unsent"

// controlFormat is the version of the message body (and of the unsent
// record).
const controlFormat = 1

// Decision is a mapper decision as the control link carries it: one
// operator's promote or abort of a candidate on one replica, for every
// replica to apply. The body of a message is its JSON with "format": 1.
type Decision struct {
	Action    string    `json:"action"`    // "promote" or "abort"
	Module    string    `json:"module"`    // the mapper module name
	Candidate string    `json:"candidate"` // name@version, for people
	SHA256    string    `json:"sha256"`    // hex SHA-256 of the candidate's bytes
	By        string    `json:"by"`        // the replica that took the decision
	At        time.Time `json:"at"`        // when it took effect there
}

type controlMessage struct {
	Format int `json:"format"`
	Decision
}

// RecordStore keeps small named records across restarts; *outbox.Outbox
// implements it. LoadRecord answers nil and no error when nothing is saved.
type RecordStore interface {
	LoadRecord(name string) ([]byte, error)
	SaveRecord(name string, value []byte) error
}

// ControlOptions configure a Control link (NewControl). cmd fills them.
type ControlOptions struct {
	// TransportURL and TLS are those of Options: the same broker.
	TransportURL string
	TLS          tlsfiles.Files
	// Exchange is the durable fanout exchange every replica publishes its
	// decisions to; default DefaultControlExchange.
	Exchange string
	// Replica names this collector, unique among the replicas (in a
	// StatefulSet, the pod name). Its queue is Exchange + "." + Replica.
	// Required.
	Replica string
	// QueueType of the replica's queue, as Options.QueueType: quorum
	// (default) or classic.
	QueueType string
	// Apply is called with every decision received, in order, one at a time,
	// on the link's goroutine; it receives this replica's own decisions too.
	// nil: the delivery is acknowledged. An error: the delivery is held and
	// Apply called again after ApplyRetry, so nothing is acknowledged before
	// it is recorded. Required.
	Apply func(ctx context.Context, d Decision) error
	// Store keeps the decisions the broker has not confirmed yet across
	// restarts (the daemon's outbox); nil keeps them in memory only.
	Store RecordStore
	// ConfirmTimeout bounds how long Publish waits for the broker's
	// confirm; default 5s.
	ConfirmTimeout time.Duration
	// ApplyRetry is the wait before a failed Apply is tried again;
	// default 1s.
	ApplyRetry time.Duration
	// Reconnect schedule, heartbeat and dial timeout, as in Options.
	ReconnectMin, ReconnectMax time.Duration
	Heartbeat, DialTimeout     time.Duration
	// CloseTimeout bounds how long closing the link's connection waits for
	// the broker's answer, as in Options; default 5s. The link publishes,
	// so a broker under a resource alarm blocks its connection and never
	// answers its close: the socket is then closed. Run returns within
	// CloseTimeout of its context ending.
	CloseTimeout time.Duration

	Logger     zerolog.Logger
	Registerer prometheus.Registerer // nil: no metrics are registered
}

// Control is the control link of one replica: a connection of its own to
// the broker, its queue bound to the control exchange, an exclusive consumer
// on it, and a publisher with confirms. Publish hands a decision over; Run
// keeps the link up and delivers what arrives to ControlOptions.Apply.
type Control struct {
	opts  ControlOptions
	dopts Options // what dial and declareQueue read
	eps   []endpoint
	queue string
	log   zerolog.Logger
	m     *controlMetrics

	running atomic.Bool
	kick    chan struct{} // something to publish (cap 1)

	mu      sync.Mutex
	unsent  []*outgoing // oldest first
	up      bool        // a session is consuming and may publish
	lastErr error       // why the last session ended, or did not start
}

// outgoing is a decision waiting for the broker's confirm. done is closed
// when it is settled: err nil, confirmed; err set, dropped.
type outgoing struct {
	d    Decision
	done chan struct{}
	err  error
}

// NewControl checks the options and loads the decisions a previous run left
// unconfirmed. Nothing is dialled before Run.
func NewControl(opts ControlOptions) (*Control, error) {
	if opts.Exchange == "" {
		opts.Exchange = DefaultControlExchange
	}
	if opts.QueueType == "" {
		opts.QueueType = QueueQuorum
	}
	opts.QueueType = strings.ToLower(opts.QueueType)
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = defaultConfirmTimeout
	}
	if opts.ApplyRetry <= 0 {
		opts.ApplyRetry = defaultApplyRetry
	}
	d := Options{TransportURL: opts.TransportURL, TLS: opts.TLS, ReconnectMin: opts.ReconnectMin,
		ReconnectMax: opts.ReconnectMax, Heartbeat: opts.Heartbeat, DialTimeout: opts.DialTimeout,
		CloseTimeout: opts.CloseTimeout, QueueType: opts.QueueType, Queue: opts.Exchange + "." + opts.Replica}
	d.setDefaults()
	var problems []string
	eps, err := linkEndpoints(opts.TransportURL, opts.TLS)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if err := CheckControlName(opts.Replica); err != nil {
		problems = append(problems, fmt.Sprintf("replica name %q: %v", opts.Replica, err))
	}
	if err := CheckControlName(opts.Exchange); err != nil {
		problems = append(problems, fmt.Sprintf("control exchange %q: %v", opts.Exchange, err))
	}
	if opts.QueueType != QueueQuorum && opts.QueueType != QueueClassic {
		problems = append(problems, fmt.Sprintf("queue type %q (want quorum or classic)", opts.QueueType))
	}
	if opts.Apply == nil {
		problems = append(problems, "no Apply function")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrOptions, strings.Join(problems, "; "))
	}
	m, err := newControlMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	l := &Control{
		opts: opts, dopts: d, eps: eps, queue: d.Queue,
		log:  opts.Logger.With().Str("component", "control").Logger(),
		m:    m,
		kick: make(chan struct{}, 1),
	}
	l.lastErr = errors.New("not connected yet")
	if err := l.loadUnsent(); err != nil {
		l.log.Error().Err(err).Msg("decisions left unconfirmed by the last run unreadable; they are not sent")
	}
	return l, nil
}

// CheckControlName checks a replica name or a control exchange name: the
// control queue is named <exchange>.<replica>, so both are 1 to 200
// letters, digits, '.', '_' or '-' (a host name, a pod name). The settings
// check and NewControl share it.
func CheckControlName(s string) error {
	if !controlName(s) {
		return errors.New("1 to 200 letters, digits, '.', '_' or '-'")
	}
	if strings.HasPrefix(s, "amq.") {
		return errors.New("the amq. prefix is reserved by the broker")
	}
	return nil
}

// controlName accepts the names the link builds its queue from.
func controlName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Publish hands d over for every replica: it is kept (in the Store, so a
// restart keeps it) and sent; Publish returns nil once the broker confirmed
// it. Otherwise it returns an error wrapping ErrNotShared as soon as the
// link is known to be down, or after ConfirmTimeout or when ctx ends; the
// decision stays kept and is sent again, in order, whenever the link is up.
// Safe for concurrent use.
func (l *Control) Publish(ctx context.Context, d Decision) error {
	o := &outgoing{d: d, done: make(chan struct{})}
	l.mu.Lock()
	l.unsent = append(l.unsent, o)
	if n := len(l.unsent) - maxUnsent; n > 0 {
		for _, old := range l.unsent[:n] {
			l.log.Warn().Str("mapper", old.d.Module).Str("candidate", old.d.Candidate).Str("action", old.d.Action).
				Int("max", maxUnsent).Msg("unconfirmed mapper decision dropped: too many wait for the broker")
			old.err = errors.New("dropped: too many decisions wait for the broker")
			close(old.done)
		}
		l.unsent = append([]*outgoing(nil), l.unsent[n:]...)
	}
	saveErr := l.saveUnsent()
	up, last := l.up, l.lastErr
	l.m.unsent.Set(float64(len(l.unsent)))
	l.mu.Unlock()
	kept := "it is kept and sent again whenever the broker link is up"
	if saveErr != nil {
		kept = "it is kept in memory only (" + saveErr.Error() + ") and sent again whenever the broker link is up, unless the collector stops first"
	}
	if !up {
		return fmt.Errorf("%w: the broker link is down (%v); %s", ErrNotShared, last, kept) //nolint:errorlint // last is nil before the first dial ends; ErrNotShared is the error callers test, the cause is text for the operator
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
	t := time.NewTimer(l.opts.ConfirmTimeout)
	defer t.Stop()
	select {
	case <-o.done:
		if o.err != nil {
			return fmt.Errorf("%w: %w", ErrNotShared, o.err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%w: no confirm within %s; %s", ErrNotShared, l.opts.ConfirmTimeout, kept)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w; %s", ErrNotShared, ctx.Err(), kept)
	}
}

type unsentState struct {
	Format int        `json:"format"`
	Unsent []Decision `json:"unsent"`
}

// loadUnsent reads what a previous run left unconfirmed.
func (l *Control) loadUnsent() error {
	if l.opts.Store == nil {
		return nil
	}
	b, err := l.opts.Store.LoadRecord(unsentRecord)
	if err != nil || b == nil {
		return err
	}
	var st unsentState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if st.Format != controlFormat {
		return fmt.Errorf("unknown format %d", st.Format)
	}
	for _, d := range st.Unsent {
		l.unsent = append(l.unsent, &outgoing{d: d, done: make(chan struct{})})
	}
	l.m.unsent.Set(float64(len(l.unsent)))
	if len(l.unsent) > 0 {
		l.log.Info().Int("decisions", len(l.unsent)).Msg("mapper decisions of the last run not confirmed by the broker; sent once connected")
	}
	return nil
}

// saveUnsent records the unsent list. l.mu held.
func (l *Control) saveUnsent() error {
	if l.opts.Store == nil {
		return nil
	}
	st := unsentState{Format: controlFormat, Unsent: make([]Decision, 0, len(l.unsent))}
	for _, o := range l.unsent {
		st.Unsent = append(st.Unsent, o.d)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := l.opts.Store.SaveRecord(unsentRecord, b); err != nil {
		l.log.Error().Err(err).Msg("could not save the unconfirmed mapper decisions")
		return err
	}
	return nil
}

func (l *Control) setUp(up bool, err error) {
	l.mu.Lock()
	l.up = up
	if err != nil {
		l.lastErr = err
	}
	l.mu.Unlock()
	if up {
		l.m.up.Set(1)
	} else {
		l.m.up.Set(0)
	}
}

// Run keeps the link up until ctx is done, reconnecting with the backoff of
// Options (full jitter, ReconnectMin doubling to ReconnectMax). It returns
// nil when ctx is done. A link that fails does not affect the consumer:
// decisions then wait, on both sides, until it is back.
func (l *Control) Run(ctx context.Context) error {
	return reconnectLoop{
		running: &l.running,
		bo:      l.dopts.reconnectBackoff(),
		session: l.session,
		ended:   func(_ context.Context, err error) { l.setUp(false, err) },
		log:     &l.log,
		msg:     "control link ended; reconnecting (mapper decisions wait meanwhile)",
		severe:  []error{ErrReplicaNameTaken, ErrQuorumUnsupported, ErrQueueTypeMismatch},
	}.run(ctx)
}

// session is one connection of the link: declare, bind, consume, then
// publish and deliver until the connection ends.
func (l *Control) session(ctx context.Context) (consumed bool, err error) {
	cn, end, err := dialSession(ctx, &l.dopts, l.eps, "control", l.log, l.dopts.CloseTimeout)
	if err != nil {
		return false, err
	}
	defer end()
	log := l.log.With().Str("broker", cn.ep.redact).Logger()
	connClosed := cn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := cn.openChannel(l.dopts.QueueType)
	if err != nil {
		return false, err
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.ExchangeDeclare(l.opts.Exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return false, fmt.Errorf("declare the control exchange %q: %w", l.opts.Exchange, err)
	}
	if err := declareQueue(ch, &l.dopts); err != nil {
		return false, err
	}
	if err := ch.QueueBind(l.queue, "", l.opts.Exchange, false, nil); err != nil {
		return false, fmt.Errorf("bind %q to %q: %w", l.queue, l.opts.Exchange, err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return false, fmt.Errorf("confirm mode: %w", err)
	}
	deliveries, err := ch.Consume(l.queue, "", false, true, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.AccessRefused && strings.Contains(ae.Reason, "exclusive") {
			return false, fmt.Errorf("%w: queue %q; every replica needs a REPLICA_NAME of its own", ErrReplicaNameTaken, l.queue)
		}
		return false, fmt.Errorf("consume %q: %w", l.queue, err)
	}
	l.setUp(true, nil)
	log.Info().Str("exchange", l.opts.Exchange).Str("queue", l.queue).Msg("control link up: mapper decisions are shared")

	if err := l.flush(ctx, ch); err != nil {
		return true, err
	}
	var held *amqp.Delivery
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case e := <-connClosed:
			return true, fmt.Errorf("%w: connection closed: %w", errSessionLost, e)
		case e := <-chClosed:
			return true, fmt.Errorf("%w: channel closed: %w", errSessionLost, e)
		case <-l.kick:
			if err := l.flush(ctx, ch); err != nil {
				return true, err
			}
		case dv, ok := <-deliveries:
			if !ok {
				return true, fmt.Errorf("%w: deliveries ended", errSessionLost)
			}
			held = &dv
			retry = nil
			if !l.deliver(ctx, held) {
				retry = time.After(l.opts.ApplyRetry)
				continue
			}
			held = nil
		case <-retry:
			retry = nil
			if !l.deliver(ctx, held) {
				retry = time.After(l.opts.ApplyRetry)
				continue
			}
			held = nil
		}
	}
}

// deliver decodes one delivery and applies it; it acknowledges it and
// reports true unless Apply failed (the delivery is then held and offered
// again). A body that cannot be read is acknowledged and dropped.
func (l *Control) deliver(ctx context.Context, dv *amqp.Delivery) bool {
	var msg controlMessage
	err := json.Unmarshal(dv.Body, &msg)
	if err == nil && msg.Format != controlFormat {
		err = fmt.Errorf("format %d, this collector reads %d", msg.Format, controlFormat)
	}
	if err != nil {
		l.m.unreadable.Inc()
		l.log.Error().Err(err).Int("bytes", len(dv.Body)).Msg("control message unreadable; dropped")
		l.ack(dv)
		return true
	}
	if err := l.opts.Apply(ctx, msg.Decision); err != nil {
		l.log.Warn().Err(err).Str("mapper", msg.Module).Str("candidate", msg.Candidate).Str("by", msg.By).
			Dur("retry_in", l.opts.ApplyRetry).Msg("mapper decision not recorded; held and tried again")
		return false
	}
	l.ack(dv)
	return true
}

func (l *Control) ack(dv *amqp.Delivery) {
	if err := dv.Ack(false); err != nil {
		// The session notices the closed channel; the broker delivers the
		// decision again, and applying it twice changes nothing.
		l.log.Warn().Err(err).Msg("control message not acknowledged")
	}
}

// flush publishes the unsent decisions in order, each waiting for its
// confirm. An error ends the session; what is left is sent by the next.
func (l *Control) flush(ctx context.Context, ch *amqp.Channel) error {
	for {
		l.mu.Lock()
		if len(l.unsent) == 0 {
			l.mu.Unlock()
			return nil
		}
		o := l.unsent[0]
		l.mu.Unlock()
		body, err := json.Marshal(controlMessage{Format: controlFormat, Decision: o.d})
		if err != nil {
			return err
		}
		id := sha256.Sum256(body)
		pctx, cancel := context.WithTimeout(ctx, l.opts.ConfirmTimeout)
		dc, err := ch.PublishWithDeferredConfirmWithContext(pctx, l.opts.Exchange, "", false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, AppId: "tally-openstack-collector",
			Type: "mapper-decision", MessageId: hex.EncodeToString(id[:16]), Timestamp: o.d.At, Body: body,
		})
		if err != nil {
			cancel()
			return fmt.Errorf("publish a decision: %w", err)
		}
		ok, err := dc.WaitContext(pctx)
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("publish a decision: no confirm: %w", err)
		case !ok:
			return errors.New("publish a decision: the broker refused it (nack)")
		}
		l.m.published.Inc()
		l.log.Info().Str("mapper", o.d.Module).Str("candidate", o.d.Candidate).Str("action", o.d.Action).
			Str("sha256", o.d.SHA256).Msg("mapper decision sent to every replica")
		l.mu.Lock()
		for i, u := range l.unsent {
			if u == o {
				l.unsent = append(l.unsent[:i:i], l.unsent[i+1:]...)
				break
			}
		}
		_ = l.saveUnsent() // logged; a decision sent twice changes nothing
		l.m.unsent.Set(float64(len(l.unsent)))
		select {
		case <-o.done: // dropped meanwhile (closed under l.mu)
		default:
			close(o.done)
		}
		l.mu.Unlock()
	}
}

type controlMetrics struct {
	up         prometheus.Gauge
	unsent     prometheus.Gauge
	published  prometheus.Counter
	unreadable prometheus.Counter
}

// newControlMetrics builds the link's metrics and registers them on reg
// (nil: nowhere), all or none.
func newControlMetrics(reg prometheus.Registerer) (*controlMetrics, error) {
	m := &controlMetrics{
		up: imetrics.Gauge("tally_collector_control_link_up",
			"1 while the control link to the other replicas is up (mapper decisions are shared)."),
		unsent: imetrics.Gauge("tally_collector_control_unsent_decisions",
			"Mapper decisions taken here and not yet confirmed by the broker."),
		published: imetrics.Counter("tally_collector_control_published_total",
			"Mapper decisions sent to the other replicas (confirmed by the broker)."),
		unreadable: imetrics.Counter("tally_collector_control_unreadable_total",
			"Control messages dropped because their body could not be read."),
	}
	if err := imetrics.Register(reg, m.up, m.unsent, m.published, m.unreadable); err != nil {
		return nil, fmt.Errorf("broker: control link: %w", err)
	}
	return m, nil
}
