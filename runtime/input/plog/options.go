package plog

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// Network of a listener.
const (
	UDP = "udp"
	TCP = "tcp"
)

// defaultHost is the host a listener address without one binds to.
const defaultHost = "127.0.0.1"

// Defaults for Settings.
const (
	defaultDefragMaxBytes  = 1 << 20
	defaultDefragMaxAge    = 10 * time.Second
	defaultReadBufferBytes = 8 << 20
	defaultMaxLineBytes    = 1 << 20
	defaultIdleTimeout     = 60 * time.Second
	defaultMaxConnections  = 256
	defaultMaxPerSource    = 16
	defaultLineBudgetBytes = 32 << 20
	defaultBatchMax        = 1000
	defaultBatchLinger     = 5 * time.Millisecond
	defaultQueueBytes      = 32 << 20
	defaultDrainTimeout    = 5 * time.Second
)

// Settings tune one listener. A zero field (nil for the switches) inherits the
// shared default; see Merge.
type Settings struct {
	// UDP
	ReadBufferBytes int           // SO_RCVBUF asked for (root may exceed net.core.rmem_max); default 8 MiB
	DefragMaxBytes  int64         // bytes the defragmenter may hold; default 1 MiB
	DefragMaxAge    time.Duration // an incomplete message is evicted after this; default 10 s
	HoleDetection   *bool         // per-client message id gap counting; default on
	AllowENVI       *bool         // answer the ENVI command (secrets redacted); default off
	AllowKILL       *bool         // KILL stops the daemon gracefully through Options.Stop; default off

	// TCP
	MaxLineBytes   int           // longest line; a longer one is skipped and counted; default 1 MiB
	IdleTimeout    time.Duration // each line must arrive within this; default 60 s
	MaxConnections int           // concurrent connections; more are closed at once; default 256
	// MaxConnectionsPerSource bounds the connections of one source address;
	// more are closed at once; default 16.
	MaxConnectionsPerSource int
	// LineBudgetBytes bounds the bytes the partial lines of all of the
	// listener's connections hold at once; default 32 MiB. Each connection
	// may hold LineBudgetBytes / (2 × MaxConnections) whatever the others do;
	// a longer line borrows the rest from what is left of the budget, and a
	// connection that cannot borrow is closed. At least 2 × MaxLineBytes.
	LineBudgetBytes int64

	// Both
	Workers     int           // goroutines calling the pipeline; default 2
	QueueBytes  int64         // bytes of received messages waiting for a worker; default 32 MiB
	BatchMax    int           // most events per outbox transaction (also capped at 512 KiB); default 1000
	BatchLinger time.Duration // longest wait to fill a batch; default 5 ms
}

// Merge returns s with every unset field taken from defaults, and every field
// still unset after that taken from the package defaults.
func Merge(s, defaults Settings) Settings {
	pickBool := func(v, d *bool, def bool) *bool {
		switch {
		case v != nil:
			b := *v
			return &b
		case d != nil:
			b := *d
			return &b
		}
		return &def
	}
	return Settings{
		ReadBufferBytes:         cmp.Or(s.ReadBufferBytes, defaults.ReadBufferBytes, defaultReadBufferBytes),
		DefragMaxBytes:          cmp.Or(s.DefragMaxBytes, defaults.DefragMaxBytes, defaultDefragMaxBytes),
		DefragMaxAge:            cmp.Or(s.DefragMaxAge, defaults.DefragMaxAge, defaultDefragMaxAge),
		HoleDetection:           pickBool(s.HoleDetection, defaults.HoleDetection, true),
		AllowENVI:               pickBool(s.AllowENVI, defaults.AllowENVI, false),
		AllowKILL:               pickBool(s.AllowKILL, defaults.AllowKILL, false),
		MaxLineBytes:            cmp.Or(s.MaxLineBytes, defaults.MaxLineBytes, defaultMaxLineBytes),
		IdleTimeout:             cmp.Or(s.IdleTimeout, defaults.IdleTimeout, defaultIdleTimeout),
		MaxConnections:          cmp.Or(s.MaxConnections, defaults.MaxConnections, defaultMaxConnections),
		MaxConnectionsPerSource: cmp.Or(s.MaxConnectionsPerSource, defaults.MaxConnectionsPerSource, defaultMaxPerSource),
		LineBudgetBytes:         cmp.Or(s.LineBudgetBytes, defaults.LineBudgetBytes, defaultLineBudgetBytes),
		Workers:                 cmp.Or(s.Workers, defaults.Workers, 2),
		QueueBytes:              cmp.Or(s.QueueBytes, defaults.QueueBytes, defaultQueueBytes),
		BatchMax:                cmp.Or(s.BatchMax, defaults.BatchMax, defaultBatchMax),
		BatchLinger:             cmp.Or(s.BatchLinger, defaults.BatchLinger, defaultBatchLinger),
	}
}

// validate reports every out-of-range field of merged settings.
func (s Settings) validate() []string {
	smallest := (&header{count: 2, length: 2}).maxCost()
	checks := []struct {
		out  bool
		what string
	}{
		{s.ReadBufferBytes < 0, "read buffer bytes < 0"},
		{s.DefragMaxBytes < smallest, "defrag max bytes too small"},
		{s.DefragMaxAge < 0, "defrag max age < 0"},
		{s.MaxLineBytes < 1, "max line bytes < 1"},
		{s.IdleTimeout < 0, "idle timeout < 0"},
		{s.MaxConnections < 1, "max connections < 1"},
		{s.MaxConnectionsPerSource < 1, "max connections per source < 1"},
		{s.LineBudgetBytes < 2*int64(s.MaxLineBytes), "line budget bytes below twice max line bytes"},
		{s.Workers < 1, "workers < 1"},
		{s.QueueBytes < 1, "queue bytes < 1"},
		{s.BatchMax < 1, "batch max < 1"},
		{s.BatchLinger < 0, "batch linger < 0"},
	}
	var bad []string
	for _, c := range checks {
		if c.out {
			bad = append(bad, c.what)
		}
	}
	return bad
}

// Listener is one socket.
type Listener struct {
	Network string // UDP or TCP
	// Address is host:port or :port (bound to defaultHost). Port 0 picks a free
	// port; Server.Addrs tells which.
	Address string
	// Settings override Options.Defaults field by field.
	Settings Settings
	// Mappers is the listener's chain, in order: a message that is not JSON goes
	// to the first; a JSON message is routed by event type among them. Empty: the
	// message is treated as a notification or a canonical event only.
	Mappers []pipeline.Mapper
}

// Options configure a Server. The package reads no configuration of its own.
type Options struct {
	Listeners []Listener
	Defaults  Settings
	Processor input.Processor // required: the shared pipeline
	Outbox    input.Outbox    // required
	// Stop is called (once) by a permitted KILL command; it should start the
	// daemon's graceful stop. Nil: KILL is refused even where allowed.
	Stop func()
	// TrustedSources are the source addresses that may receive STAT and ENVI
	// answers and send KILL (each still subject to AllowENVI and AllowKILL);
	// default loopback (127.0.0.0/8, ::1). Linux drops packets with a
	// loopback source arriving on any other interface, so loopback cannot be
	// forged from the network.
	TrustedSources []netip.Prefix
	// Version is reported by STAT; default "unknown".
	Version string
	// DrainTimeout bounds how long Run spends committing what was received once
	// its context is done; default 5 s.
	DrainTimeout time.Duration
	// Environ returns the environment for ENVI; default os.Environ.
	Environ func() []string
	// Logger receives the listeners' logs, already tagged component=plog by
	// the caller. Nothing is logged by message content.
	Logger     zerolog.Logger
	Registerer prometheus.Registerer
}

// normalizeAddress applies defaultHost to an address without a host.
func normalizeAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" {
		host = defaultHost
	}
	return net.JoinHostPort(host, port), nil
}

func (o *Options) validate() error {
	var bad []string
	if len(o.Listeners) == 0 {
		return ErrNoListeners
	}
	if o.Processor == nil {
		bad = append(bad, "processor is nil")
	}
	if o.Outbox == nil {
		bad = append(bad, "outbox is nil")
	}
	for i, l := range o.Listeners {
		if l.Network != UDP && l.Network != TCP {
			bad = append(bad, fmt.Sprintf("listener %d: network %q is neither udp nor tcp", i, l.Network))
		}
		if _, err := normalizeAddress(l.Address); err != nil {
			bad = append(bad, fmt.Sprintf("listener %d: address %q: %v", i, l.Address, err))
		}
		for _, p := range Merge(l.Settings, o.Defaults).validate() {
			bad = append(bad, fmt.Sprintf("listener %d: %s", i, p))
		}
		for j, m := range l.Mappers {
			if m == nil {
				bad = append(bad, fmt.Sprintf("listener %d: mapper %d is nil", i, j))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(bad, "; "))
	}
	return nil
}

// isFull reports whether an Append error means the outbox is at its bound.
func isFull(err error) bool { return errors.Is(err, outbox.ErrFull) }
