package channel

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime/input"
)

// Exchange is the source exchange of every channel message; the routing key
// is its tag.
const Exchange = "channel"

// Defaults of Options.
const (
	defaultSocketMode     = 0o660
	defaultQueueBytes     = 32 << 20
	defaultBatchMax       = 1000
	defaultBatchLinger    = 2 * time.Millisecond
	defaultDrainTimeout   = 5 * time.Second
	defaultMaxConnections = 256
	// defaultMaxConnectionsPerUID bounds one user's share of the slots.
	defaultMaxConnectionsPerUID = 16
	defaultIdleTimeout          = 60 * time.Second
	defaultHelloTimeout         = 10 * time.Second
	defaultRetryMin             = 100 * time.Millisecond
	defaultRetryMax             = 5 * time.Second
)

// Options configure a Server. The package reads no configuration itself.
type Options struct {
	// Socket is the path of the Unix socket (CHANNEL_SOCKET). A stale socket
	// file nobody serves is replaced; the parent directory is created
	// (0755) when missing.
	Socket string
	// SocketMode is the socket's file mode: who may connect at all. Default
	// 0660: the daemon's user and group.
	SocketMode os.FileMode
	Processor  input.Processor // required: the shared pipeline
	Outbox     input.Outbox    // required
	// Workers call the pipeline; default GOMAXPROCS.
	Workers int
	// QueueBytes bounds the received messages not yet settled, across all
	// connections; a connection is not read while it is reached. Default
	// 32 MiB.
	QueueBytes int64
	// BatchMax is the most messages per outbox transaction (also capped at
	// 512 KiB of events); BatchLinger the longest wait to fill one. Defaults
	// 1000 and 2 ms; a commit in flight lets the next batch grow.
	BatchMax    int
	BatchLinger time.Duration
	// RetryMin and RetryMax space the attempts to commit a batch the outbox
	// refused (full, or failing): nothing is acknowledged meanwhile and the
	// clients' queues fill. Defaults 100 ms and 5 s.
	RetryMin, RetryMax time.Duration
	// DrainTimeout bounds how long Run spends settling what it received once
	// its context is done; default 5 s. What is not settled then is not
	// acknowledged, and the clients send it again to the next daemon.
	DrainTimeout time.Duration
	// MaxConnections bounds concurrent connections; more are refused with
	// an Error frame. Default 256.
	MaxConnections int
	// MaxConnectionsPerUID bounds the concurrent connections of one uid
	// (as SO_PEERCRED reports it, root included), so that one local user
	// cannot take every slot; more are refused with an Error frame.
	// Default 16 (CHANNEL_MAX_CONNECTIONS_PER_UID).
	MaxConnectionsPerUID int
	// IdleTimeout bounds the wait for each frame once the handshake is
	// done: a connection on which no complete frame arrives within it is
	// answered an Error frame and closed. Clients send PING frames when they
	// have nothing else to send (WELCOME tells them the bound). Default 60 s
	// (CHANNEL_IDLE_TIMEOUT).
	IdleTimeout time.Duration
	// HelloTimeout bounds the wait for the HELLO frame after connecting;
	// default 10 s.
	HelloTimeout time.Duration
	// Hub configures the tap.
	Hub HubOptions
	// Logger receives the channel's logs, already tagged component=channel
	// by the caller. Nothing is logged by message content.
	Logger     zerolog.Logger
	Registerer prometheus.Registerer
}

func (o *Options) setDefaults() {
	if o.SocketMode == 0 {
		o.SocketMode = defaultSocketMode
	}
	setDefault(&o.Workers, runtime.GOMAXPROCS(0))
	setDefault(&o.QueueBytes, defaultQueueBytes)
	setDefault(&o.BatchMax, defaultBatchMax)
	if o.BatchLinger == 0 {
		o.BatchLinger = defaultBatchLinger
	}
	setDefault(&o.RetryMin, defaultRetryMin)
	setDefault(&o.RetryMax, defaultRetryMax)
	setDefault(&o.DrainTimeout, defaultDrainTimeout)
	setDefault(&o.MaxConnections, defaultMaxConnections)
	setDefault(&o.MaxConnectionsPerUID, defaultMaxConnectionsPerUID)
	setDefault(&o.IdleTimeout, defaultIdleTimeout)
	setDefault(&o.HelloTimeout, defaultHelloTimeout)
	o.Hub.Logger = o.Logger
}

// setDefault sets an option that is zero or negative to its default.
func setDefault[T int | int64 | time.Duration](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

func (o *Options) validate() error {
	var bad []string
	if o.Socket == "" {
		bad = append(bad, "socket path is empty")
	}
	if o.Processor == nil {
		bad = append(bad, "processor is nil")
	}
	if o.Outbox == nil {
		bad = append(bad, "outbox is nil")
	}
	if o.SocketMode&^0o777 != 0 {
		bad = append(bad, fmt.Sprintf("socket mode %o has bits beyond 0777", o.SocketMode))
	}
	if o.RetryMax < o.RetryMin {
		bad = append(bad, "retry maximum below its minimum")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrOptions, strings.Join(bad, "; "))
	}
	return nil
}
