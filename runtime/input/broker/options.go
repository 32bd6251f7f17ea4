package broker

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// Queue types accepted in Options.QueueType.
const (
	QueueQuorum  = "quorum"
	QueueClassic = "classic"
)

// priorities are the oslo notification priorities, in the order bindings are
// made. Each topic is bound once per priority as "<topic>.<priority>".
var priorities = []string{"audit", "debug", "info", "warn", "error", "critical", "sample"}

// Defaults applied by New and Dump to zero fields of Options.
const (
	defaultQueue         = "tally-notifications"
	defaultPrefetch      = 100
	defaultCommitTimeout = 2 * time.Minute
	defaultCommitLinger  = 2 * time.Millisecond
	// DefaultCommitPipeline: the next batch is handed to the outbox while
	// the previous one syncs.
	DefaultCommitPipeline = 2
	defaultReconnectMin   = 1 * time.Second
	defaultReconnectMax   = 30 * time.Second
	defaultProbeMin       = 1 * time.Second
	defaultProbeMax       = 60 * time.Second
	defaultRefusedRetry   = 1 * time.Second
	defaultPauseMin       = 1 * time.Second
	defaultPauseMax       = 10 * time.Second
	defaultHeartbeat      = 10 * time.Second
	defaultDialTimeout    = 10 * time.Second
	// defaultStopBudget and DefaultCloseTimeout: the graceful stop of a
	// session finishes what it holds within 10s, then its connection's
	// close waits at most 5s for the broker's answer.
	defaultStopBudget   = 10 * time.Second
	DefaultCloseTimeout = 5 * time.Second
)

// Options configure a Consumer (New) and the dump (Dump). The package reads no
// configuration itself: cmd/ fills this from its settings.
type Options struct {
	// TransportURL is amqp://, amqps:// (TLS, certificate verified) or oslo's
	// rabbit://u:p@h1:5672,u:p@h2:5672/vhost (hosts tried in order), read by
	// ParseTransportURL.
	TransportURL string
	// TLS names the files of an amqps link: the CA file that replaces the
	// system's trust store, the client certificate and key, the server name
	// (TRANSPORT_CA_FILE, TRANSPORT_CERT_FILE, TRANSPORT_KEY_FILE,
	// TRANSPORT_SERVER_NAME). They are read again at every connection, so
	// rotated files are used without a restart. The broker's certificate is
	// always verified.
	TLS tlsfiles.Files

	Exchanges        []string // service exchanges to bind (probed, never created)
	Topics           []string // oslo notification topics; default ["notifications"]
	Queue            string   // default "tally-notifications"
	QueueType        string   // "quorum" (default) or "classic"
	RequireExchanges bool     // any missing exchange stops consumption
	Prefetch         int      // unacknowledged deliveries held; default 100

	// Workers is the number of goroutines mapping deliveries; default
	// GOMAXPROCS. The Processor must be safe for concurrent use.
	Workers int
	// BatchMax caps the deliveries committed in one outbox append and
	// acknowledged with one ack; default Prefetch/2 (at least 1, at most
	// Prefetch), so that at least two commits' worth of deliveries fit in
	// the prefetch window. A commit starts as soon as the previous one is
	// done and BatchMax deliveries are mapped, or the prefetch window is
	// full, or no delivery arrived for CommitLinger (group commit).
	BatchMax int
	// CommitLinger is how long a commit shorter than BatchMax waits for
	// deliveries that are still arriving; default 2ms, negative: none. The
	// wait restarts with each delivery but ends, at the latest,
	// 4 × CommitLinger after the oldest delivery held was taken. Fewer,
	// larger commits cost fewer syncs and fewer acknowledgements, which the
	// broker handles more cheaply.
	CommitLinger time.Duration
	// CommitPipeline is how many batches may be committing at once: with 2
	// (the default) the next batch is handed to the outbox while the
	// previous one syncs, and each is acknowledged, in order, once it is
	// durable. 1 commits one batch at a time. Above 1 it needs an outbox
	// with the pipelined append (input.PipelinedOutbox); without one, batches are
	// committed one at a time.
	CommitPipeline int
	// CommitTimeout bounds one outbox append; on expiry the batch is requeued.
	// It stays far below RabbitMQ's consumer_timeout (30 min by default).
	CommitTimeout time.Duration
	// Retry schedules (zero = default). Reconnect: capped exponential backoff
	// with full jitter (each wait uniform in [0, step]). Probe: a missing
	// exchange is probed again after ProbeMin, doubling to ProbeMax.
	// RefusedRetry: the nack interval while the outbox refuses inserts. Pause:
	// how long consumption stops at the buffer bound before trying again
	// (doubling to PauseMax).
	ReconnectMin, ReconnectMax time.Duration
	ProbeMin, ProbeMax         time.Duration
	RefusedRetry               time.Duration
	PauseMin, PauseMax         time.Duration
	Heartbeat                  time.Duration
	DialTimeout                time.Duration

	// StopBudget bounds the graceful stop of a session once Run's context
	// ended: the basic.cancel, the commit in flight, and mapping, committing
	// and acknowledging what is held; what is not acknowledged by then is
	// requeued (or returned by the closing connection). Default 10s.
	StopBudget time.Duration
	// CloseTimeout bounds how long closing a connection waits for the
	// broker's answer (connection.close-ok), and how long the basic.cancel
	// of a stop may wait beyond StopBudget; past it the socket is closed,
	// and the broker returns what the connection held to the queue. A
	// broker under a resource alarm never answers a connection it blocked.
	// Default 5s. Run returns within StopBudget + CloseTimeout of its
	// context ending.
	CloseTimeout time.Duration

	// Tap, when set, is shown what the consumer commits (the local channel's
	// live tap). It is asked once per batch whether anyone listens; only then
	// is the batch's record kept, and handed over after the batch is
	// committed and acknowledged.
	Tap Tap

	// Logger, tagged with its component by the caller (or by New when the
	// caller did not).
	Logger zerolog.Logger
	// Registerer receives the metrics; nil means do not register.
	Registerer prometheus.Registerer
}

func (o *Options) setDefaults() {
	if o.Queue == "" {
		o.Queue = defaultQueue
	}
	if o.QueueType == "" {
		o.QueueType = QueueQuorum
	}
	o.QueueType = strings.ToLower(o.QueueType)
	if len(o.Topics) == 0 {
		o.Topics = []string{"notifications"}
	}
	if o.Prefetch == 0 {
		o.Prefetch = defaultPrefetch
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.BatchMax <= 0 {
		o.BatchMax = max(1, o.Prefetch/2)
	}
	if o.BatchMax > o.Prefetch && o.Prefetch > 0 {
		o.BatchMax = o.Prefetch
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.CommitPipeline <= 0 {
		o.CommitPipeline = DefaultCommitPipeline
	}
	def(&o.CommitTimeout, defaultCommitTimeout)
	if o.CommitLinger == 0 {
		o.CommitLinger = defaultCommitLinger
	}
	def(&o.ReconnectMin, defaultReconnectMin)
	def(&o.ReconnectMax, defaultReconnectMax)
	def(&o.ProbeMin, defaultProbeMin)
	def(&o.ProbeMax, defaultProbeMax)
	def(&o.RefusedRetry, defaultRefusedRetry)
	def(&o.PauseMin, defaultPauseMin)
	def(&o.PauseMax, defaultPauseMax)
	def(&o.Heartbeat, defaultHeartbeat)
	def(&o.DialTimeout, defaultDialTimeout)
	def(&o.StopBudget, defaultStopBudget)
	def(&o.CloseTimeout, DefaultCloseTimeout)
}

// validate lists every problem at once.
func (o *Options) validate() ([]endpoint, error) {
	var problems []string
	eps, err := linkEndpoints(o.TransportURL, o.TLS)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(o.Exchanges) == 0 {
		problems = append(problems, "no exchanges listed")
	}
	for _, e := range o.Exchanges {
		if strings.TrimSpace(e) == "" || strings.HasPrefix(e, "amq.") {
			problems = append(problems, fmt.Sprintf("exchange %q not allowed", e))
		}
	}
	for _, t := range o.Topics {
		if t == "" || strings.ContainsAny(t, "#* ") {
			problems = append(problems, fmt.Sprintf("topic %q not allowed (no wildcards)", t))
		}
	}
	if o.QueueType != QueueQuorum && o.QueueType != QueueClassic {
		problems = append(problems, fmt.Sprintf("queue type %q (want quorum or classic)", o.QueueType))
	}
	if strings.HasPrefix(o.Queue, "amq.") {
		problems = append(problems, fmt.Sprintf("queue name %q is reserved", o.Queue))
	}
	if o.Prefetch < 1 || o.Prefetch > 65535 {
		problems = append(problems, fmt.Sprintf("prefetch %d out of range 1..65535", o.Prefetch))
	}
	if o.ReconnectMax < o.ReconnectMin || o.ProbeMax < o.ProbeMin || o.PauseMax < o.PauseMin {
		problems = append(problems, "a retry maximum is below its minimum")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrOptions, strings.Join(problems, "; "))
	}
	return eps, nil
}

// bindingKeys lists the routing keys bound on every exchange, in order.
func (o *Options) bindingKeys() []string {
	keys := make([]string, 0, len(o.Topics)*len(priorities))
	for _, t := range o.Topics {
		for _, p := range priorities {
			keys = append(keys, t+"."+p)
		}
	}
	return keys
}
