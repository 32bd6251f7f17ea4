package daemon

// The systemd notification protocol (Type=notify): READY=1, STOPPING=1 and
// WATCHDOG=1 on the socket named by NOTIFY_SOCKET. Without that variable
// (not under systemd) every call is a no-op.

import (
	"context"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// notifier speaks to systemd for the daemon.
type notifier struct {
	log zerolog.Logger
	// watchdog is WatchdogSec as systemd passed it (WATCHDOG_USEC); 0: off.
	watchdog time.Duration
	withheld bool // pings withheld since the last failed liveness check (heartbeat's goroutine)
}

func newNotifier(log zerolog.Logger) *notifier {
	n := &notifier{log: log}
	wd, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn().Err(err).Msg("systemd watchdog settings unreadable; no watchdog pings")
	}
	n.watchdog = wd
	return n
}

func (n *notifier) send(state string) {
	sent, err := sddaemon.SdNotify(false, state)
	if err != nil {
		n.log.Warn().Err(err).Str("state", state).Msg("systemd notification failed")
		return
	}
	if sent {
		n.log.Debug().Str("state", state).Msg("systemd notified")
	}
}

// ready waits until check passes (polled every 100 ms) and sends READY=1
// once; it gives up when ctx is done.
func (n *notifier) ready(ctx context.Context, check func() error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for check() != nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	n.send(sddaemon.SdNotifyReady)
}

// stopping sends STOPPING=1.
func (n *notifier) stopping() { n.send(sddaemon.SdNotifyStopping) }

// pingWatchdog sends WATCHDOG=1 when live passes; called every half
// watchdog interval by the daemon's heartbeat (watchdog.go), which stops with
// the Go runtime. A failing liveness check withholds the ping, so systemd
// restarts the service when it lasts longer than WatchdogSec (and the
// liveness threshold).
func (n *notifier) pingWatchdog(live func() error) {
	if err := live(); err == nil {
		n.send(sddaemon.SdNotifyWatchdog)
		n.withheld = false
	} else if !n.withheld {
		n.log.Error().Err(err).Msg("not live: systemd watchdog pings withheld")
		n.withheld = true
	}
}
