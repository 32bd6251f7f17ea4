package main

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

// pingWatchdog sends WATCHDOG=1 every half watchdog interval while live
// passes, until ctx is done. A failing liveness check withholds the ping, so
// systemd restarts the service when it lasts longer than WatchdogSec (and
// the liveness threshold).
func (n *notifier) pingWatchdog(ctx context.Context, live func() error) {
	if n.watchdog <= 0 {
		return
	}
	t := time.NewTicker(n.watchdog / 2)
	defer t.Stop()
	withheld := false
	for {
		if err := live(); err == nil {
			n.send(sddaemon.SdNotifyWatchdog)
			withheld = false
		} else if !withheld {
			n.log.Error().Err(err).Msg("not live: systemd watchdog pings withheld")
			withheld = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
