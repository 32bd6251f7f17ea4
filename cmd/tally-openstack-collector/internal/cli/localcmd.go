package cli

// The read commands on a stopped daemon: when nothing answers on HTTP_ADDR,
// ledger, reconcile, deadletter list|show and mappers read the outbox at
// BUFFER_PATH themselves, read-only (and, for mappers, the drop-in directory
// at MAPPERS_DIR). A running collector holds the outbox's lock, which refuses
// the read; the error then names the address tried.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// daemonDown reports whether err says that nothing answered on the
// daemon's address (the connection was refused, the host not found or not
// reached), as opposed to an answer the daemon gave.
func daemonDown(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// stoppedOutbox opens BUFFER_PATH read-only for a command whose daemon did
// not answer on cl.BaseURL (cause). mergeHint, when set, is how the command
// reads other outboxes or replicas, for the error when BUFFER_PATH holds
// nothing to read. The caller closes the outbox.
func stoppedOutbox(fs *pflag.FlagSet, environ []string, cl *catalog.Client, cause error, mergeHint string) (*outbox.Outbox, *settings.Config, error) {
	cfg, err := settings.Load(fs, environ, settings.ModeOffline)
	if err != nil {
		return nil, nil, err
	}
	down := fmt.Sprintf("no daemon answered on %s (%v)", cl.BaseURL, dialCause(cause))
	ob, err := outbox.Open(outbox.Options{Dir: cfg.BufferPath, Logger: zerolog.Nop(), ReadOnly: true})
	switch {
	case err == nil:
		return ob, cfg, nil
	case errors.Is(err, outbox.ErrLocked):
		return nil, nil, fmt.Errorf("%s; and the outbox at %sBUFFER_PATH %s is held by a running collector: "+
			"give that collector's address with --http-addr or %sHTTP_ADDR", down, settings.EnvPrefix, cfg.BufferPath, settings.EnvPrefix)
	case errors.Is(err, outbox.ErrNoStore):
		hint := ""
		if mergeHint != "" {
			hint = "; or name outboxes and replicas with " + mergeHint
		}
		return nil, nil, fmt.Errorf("%s; and %sBUFFER_PATH %s holds no outbox to read instead: "+
			"give the running daemon's address with --http-addr or %sHTTP_ADDR, or the stopped one's outbox with --buffer-path%s",
			down, settings.EnvPrefix, cfg.BufferPath, settings.EnvPrefix, hint)
	default:
		return nil, nil, fmt.Errorf("%s; and the outbox at %sBUFFER_PATH cannot be read instead: %w", down, settings.EnvPrefix, err)
	}
}

// dialCause is the innermost network error of a failed request, without
// the request's method and route repeated.
func dialCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op
	}
	return err
}

// noteStopped says on stderr where a command read instead of the daemon.
func noteStopped(stderr io.Writer, cl *catalog.Client, what string) {
	fmt.Fprintf(stderr, "no daemon answered on %s: %s\n", cl.BaseURL, what)
}

// savedDecisions hands the catalogue the mapper decisions a stopped daemon
// saved in its outbox. What the catalogue would save back is dropped: the
// command reads, and the daemon makes the same decisions at its next start.
type savedDecisions struct{ ob *outbox.Outbox }

func (s savedDecisions) LoadRecord(name string) ([]byte, error) { return s.ob.LoadRecord(name) }
func (s savedDecisions) SaveRecord(string, []byte) error        { return nil }

// stoppedStatus is the mapper catalogue of a stopped daemon: its drop-in
// directory as its next start would take it, with the decisions it saved.
func stoppedStatus(ctx context.Context, fs *pflag.FlagSet, environ []string, cl *catalog.Client, cause error, stderr io.Writer) (catalog.Status, error) {
	ob, cfg, err := stoppedOutbox(fs, environ, cl, cause, "")
	if err != nil {
		return catalog.Status{}, err
	}
	defer func() { _ = ob.Close() }() // read only
	level := zerolog.WarnLevel
	if cfg.LogLevel > level {
		level = cfg.LogLevel
	}
	ms, err := daemon.StoppedMappers(ctx, cfg, daemon.NewLogger(stderr, cfg.LogFormat, level), savedDecisions{ob})
	if err != nil {
		return catalog.Status{}, fmt.Errorf("the stopped daemon's mappers (%sMAPPERS_DIR %q): %w", settings.EnvPrefix, cfg.MappersDir, err)
	}
	defer func() { _ = ms.Close(ctx) }() // the modules hold nothing to keep
	dir := "the built-in modules only (no MAPPERS_DIR)"
	if cfg.MappersDir != "" {
		dir = "the drop-in directory " + cfg.MappersDir
	}
	noteStopped(stderr, cl, fmt.Sprintf("the catalogue its next start makes of %s and the decisions saved in %s; shadow counters start at zero, as after a restart",
		dir, cfg.BufferPath))
	return ms.Catalog.Status(), nil
}
