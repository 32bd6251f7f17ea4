package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// conn is one AMQP connection with the broker it reached.
type conn struct {
	*amqp.Connection
	ep      endpoint
	version string // server property "version", "" when absent
}

// dial tries each endpoint in order and returns the first connection made.
func dial(opts *Options, eps []endpoint, name string, log zerolog.Logger) (*conn, error) {
	var errs []error
	for _, ep := range eps {
		var attempt *tlsfiles.Attempt
		cfg := amqp.Config{
			Heartbeat: opts.Heartbeat,
			Locale:    "en_US",
			Properties: amqp.Table{
				"connection_name": name,
				"product":         "tally-openstack-collector",
			},
			Dial: amqp.DefaultDial(opts.DialTimeout),
		}
		if ep.tls {
			// Read now: a rotated file is used from this connection on.
			a, err := opts.TLS.Attempt(ep.hostname)
			if err != nil {
				log.Warn().Str("broker", ep.redact).Err(err).Msg("broker connection not tried: the TLS files cannot be used")
				errs = append(errs, fmt.Errorf("%s: %w", ep.host, err))
				continue
			}
			cfg.TLSClientConfig = a.Config
			attempt = a
		}
		c, err := amqp.DialConfig(ep.url, cfg)
		if err != nil {
			// amqp091 errors never carry the URL, so the password stays out.
			if attempt != nil {
				err = attempt.Explain(err, TLSSettings)
			}
			log.Warn().Str("broker", ep.redact).Err(err).Msg("broker connection failed")
			errs = append(errs, fmt.Errorf("%s: %w", ep.host, err))
			continue
		}
		v, _ := c.Properties["version"].(string)
		return &conn{Connection: c, ep: ep, version: v}, nil
	}
	return nil, errors.Join(errs...)
}

// dialSession dials the connection of one session (dial) and guards it
// (guard, with bound); the session defers end, which releases the guard and
// closes the connection (closeWithin, Options.CloseTimeout).
func dialSession(ctx context.Context, opts *Options, eps []endpoint, name string, log zerolog.Logger, bound time.Duration) (cn *conn, end func(), err error) {
	cn, err = dial(opts, eps, connectionName(name), log)
	if err != nil {
		return nil, nil, err
	}
	release := cn.guard(ctx, bound)
	return cn, func() {
		release()
		cn.closeWithin(opts.CloseTimeout, log)
	}, nil
}

// closeWithin closes the connection, waiting at most timeout for the
// broker's connection.close-ok: past it the socket is closed (its I/O
// deadline passes), whatever the broker does. A broker that blocked the
// connection under a resource alarm reads nothing more from it and never
// answers. The connection is closed either way, and what it held
// unacknowledged returns to the queue; a close without the answer is
// logged.
func (c *conn) closeWithin(timeout time.Duration, log zerolog.Logger) {
	err := c.CloseDeadline(time.Now().Add(timeout))
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		log.Warn().Err(err).Dur("close_timeout", timeout).Msg("broker connection closed without the broker's answer")
	}
}

// guard bounds every wait on the connection once ctx has ended: bound after
// that, unless released first, it closes the socket, so that a call waiting
// for the broker's answer (a basic.cancel, a declare, a close) returns with
// an error instead of waiting for a broker that stopped answering. The
// session releases it when it returns.
func (c *conn) guard(ctx context.Context, bound time.Duration) (release func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			_ = c.CloseDeadline(time.Now()) // a deadline passed: every I/O fails at once
		}
	}()
	return func() { close(done) }
}

// majorVersion reads the major number of a RabbitMQ version string ("3.10.8").
func majorVersion(v string) (int, bool) {
	head, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(head)
	if err != nil {
		return 0, false
	}
	return n, true
}

// checkQuorumSupport refuses a quorum queue on a broker older than 4.0: there
// x-delivery-limit -1 is read as a limit and a message is dropped on its first
// requeue. It runs before anything is declared.
func checkQuorumSupport(c *conn) error {
	major, ok := majorVersion(c.version)
	if !ok {
		return fmt.Errorf("%w: the broker did not report its version (%q); set QUEUE_TYPE=classic", ErrQuorumUnsupported, c.version)
	}
	if major < 4 {
		return fmt.Errorf("%w: broker is RabbitMQ %s; set QUEUE_TYPE=classic (TALLY_OSC_QUEUE_TYPE=classic) or upgrade the broker to 4.0 or later", ErrQuorumUnsupported, c.version)
	}
	return nil
}

// openChannel opens a session's channel, once the broker is known to hold
// the queue type (checkQuorumSupport).
func (c *conn) openChannel(queueType string) (*amqp.Channel, error) {
	if queueType == QueueQuorum {
		if err := checkQuorumSupport(c); err != nil {
			return nil, err
		}
	}
	ch, err := c.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, nil
}

// queueArgs are the declare arguments for the queue type. classic sends no
// queue type at all (the declare of every collector up to v0.2.0).
func queueArgs(queueType string) amqp.Table {
	if queueType == QueueQuorum {
		return amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(-1)}
	}
	return nil
}

// declareQueue declares the durable queue. A queue that exists with another
// type (or other arguments) is reported as ErrQueueTypeMismatch; nothing is
// deleted. The channel is closed by the broker in that case.
func declareQueue(ch *amqp.Channel, opts *Options) error {
	_, err := ch.QueueDeclare(opts.Queue, true, false, false, false, queueArgs(opts.QueueType))
	if err == nil {
		return nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return fmt.Errorf("%w: queue %q was not declared as %s: %s; nothing was deleted: set QUEUE_TYPE to the type the queue has, or move the queue (docs/broker.md)",
			ErrQueueTypeMismatch, opts.Queue, opts.QueueType, ae.Reason)
	}
	return fmt.Errorf("declare queue %q: %w", opts.Queue, err)
}

// probeExchange answers whether the exchange exists, with a passive declare on
// a throwaway channel (a 404 closes the channel it was made on).
func probeExchange(c *conn, name string) (bool, error) {
	ch, err := c.Channel()
	if err != nil {
		return false, fmt.Errorf("open probe channel: %w", err)
	}
	err = ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, false, false, false, false, nil)
	if err == nil {
		_ = ch.Close()
		return true, nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, nil
	}
	_ = ch.Close()
	if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
		// Treated as missing: the account cannot see it.
		return false, nil
	}
	return false, fmt.Errorf("probe exchange %q: %w", name, err)
}

// probeAll splits the listed exchanges into present and missing.
func probeAll(c *conn, names []string) (present, missing []string, err error) {
	for _, n := range names {
		ok, err := probeExchange(c, n)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			present = append(present, n)
		} else {
			missing = append(missing, n)
		}
	}
	return present, missing, nil
}

// binder makes bindings one at a time on a channel of its own, so that a
// refused binding (which closes the channel) leaves the consuming channel and
// the other bindings alone.
type binder struct {
	c       *conn
	ch      *amqp.Channel
	queue   string
	keys    []string
	log     zerolog.Logger
	refused []string // "exchange/key"
}

// bindExchange binds every notification key of one exchange. It returns an
// error only when the connection failed; refused bindings are recorded.
func (b *binder) bindExchange(exchange string) error {
	for _, key := range b.keys {
		if b.ch == nil || b.ch.IsClosed() {
			var err error
			if b.ch, err = b.c.Channel(); err != nil {
				return fmt.Errorf("open binding channel: %w", err)
			}
		}
		err := b.ch.QueueBind(b.queue, key, exchange, false, nil)
		if err == nil {
			continue
		}
		var ae *amqp.Error
		if errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotFound) {
			b.refused = append(b.refused, exchange+"/"+key)
			b.log.Warn().Str("exchange", exchange).Str("routing_key", key).Str("reason", ae.Reason).
				Msg("binding refused by the broker; the other bindings stay")
			b.ch = nil
			continue
		}
		return fmt.Errorf("bind %s/%s: %w", exchange, key, err)
	}
	return nil
}

func (b *binder) close() {
	if b.ch != nil {
		_ = b.ch.Close()
	}
}

// The retry schedules (internal/backoff). Reconnecting waits a full-jitter
// delay, uniform in [0, step], the step doubling from ReconnectMin to
// ReconnectMax, so many collectors cut off by one broker restart do not come
// back together. Probes of a missing exchange and pauses at the outbox bound
// are deterministic: the step itself, doubling to its cap.
func (o *Options) reconnectBackoff() *backoff.Backoff {
	return backoff.New(backoff.Policy{Min: o.ReconnectMin, Max: o.ReconnectMax, Jitter: true})
}

func (o *Options) probeBackoff() *backoff.Backoff {
	return backoff.New(backoff.Policy{Min: o.ProbeMin, Max: o.ProbeMax})
}

func (o *Options) pauseBackoff() *backoff.Backoff {
	return backoff.New(backoff.Policy{Min: o.PauseMin, Max: o.PauseMax})
}

func connectionName(kind string) string {
	h, _ := os.Hostname()
	return fmt.Sprintf("tally-openstack-collector %s %s pid %d", kind, h, os.Getpid())
}
