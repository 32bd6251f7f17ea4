package cli

// The commands that talk to a running daemon over its HTTP server: mappers
// (status, promote, abort) and deadletter (list, show, replay, purge).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

const mappersUsage = `Usage: tally-openstack-collector mappers [promote NAME | abort NAME]

Without arguments: every event type pattern of the running daemon, its module,
version and migration state, and the last reload. promote and abort end the
shadow migration of the module NAME, on this replica at once and, through the
broker, on every other replica (CONTROL_EXCHANGE); when the broker cannot take
the decision yet, the command says so and the daemon keeps sending it. The daemon is reached on HTTP_ADDR; every
command sends the control token (CONTROL_TOKEN or CONTROL_TOKEN_FILE) when one
is set.

When no daemon answers on HTTP_ADDR, the status is that of the stopped daemon:
the catalogue its next start makes of MAPPERS_DIR, with the decisions saved in
its outbox at BUFFER_PATH (read-only; refused while a collector holds it).
promote and abort need the running daemon.

Flags:
`

const deadletterUsage = `Usage: tally-openstack-collector deadletter list [--after SEQ] [--limit N]
       tally-openstack-collector deadletter show SEQ
       tally-openstack-collector deadletter replay [SEQ...]
       tally-openstack-collector deadletter purge [--from SEQ] [--to SEQ] [--mapper NAME] [--older-than DURATION] [--all]

Notifications a mapper failed on, and events the Reporting API refused, kept
in the running daemon's outbox. replay maps them again through the current
modules (all of them without SEQ) and commits the events. purge removes for
good the letters matching every criterion given (--all: every letter), to make
room in the dead-letter area. The daemon is reached on HTTP_ADDR; every command sends the
control token (CONTROL_TOKEN or CONTROL_TOKEN_FILE) when one is set.

When no daemon answers on HTTP_ADDR, list and show read the stopped daemon's
outbox at BUFFER_PATH themselves (read-only; refused while a collector holds
it). replay and purge need the running daemon.

Flags:
`

func controlFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	settings.AddFlags(fs, func(key string) bool {
		return key == "http_addr" || key == "control_token" || key == "control_token_file" || key == "buffer_path"
	})
	return fs
}

// controlClient reads HTTP_ADDR and CONTROL_TOKEN or CONTROL_TOKEN_FILE; an unspecified listen host
// (0.0.0.0, ::) is reached on loopback.
func controlClient(fs *pflag.FlagSet, environ []string) (*catalog.Client, error) {
	cfg, err := settings.Load(fs, environ, settings.ModeOffline)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", cfg.NameOf("http_addr"), cfg.HTTPAddr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	token := strings.TrimSpace(cfg.ControlToken)
	if cfg.ControlTokenFile != "" {
		if token != "" {
			return nil, fmt.Errorf("%s and %s are both set: set one", cfg.NameOf("control_token"), cfg.NameOf("control_token_file"))
		}
		if token, _, err = tokenfile.Read(cfg.ControlTokenFile); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.NameOf("control_token_file"), err)
		}
	}
	return &catalog.Client{BaseURL: "http://" + net.JoinHostPort(host, port), Token: token}, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runMappers(args, environ []string, stdout, stderr io.Writer) int {
	fs := controlFlags("mappers")
	for _, k := range []string{"mappers_dir", "mappers_promote"} {
		if fl := fs.Lookup(settings.FlagName(k)); fl != nil {
			fl.Hidden = false
		}
	}
	if code := parseFlags(fs, mappersUsage, args, stdout, stderr); code >= 0 {
		return code
	}
	cl, err := controlClient(fs, environ)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case fs.NArg() == 0:
		st, err := cl.Status(ctx)
		if daemonDown(err) {
			st, err = stoppedStatus(ctx, fs, environ, cl, err, stderr)
		}
		if err != nil {
			fmt.Fprintf(stderr, "mappers: %v\n", controlError(err, fs, environ))
			return 1
		}
		if err := st.WriteText(stdout); err != nil {
			return 1
		}
		return 0
	case fs.NArg() == 2 && (fs.Arg(0) == "promote" || fs.Arg(0) == "abort"):
		var out catalog.MigrationOutcome
		if fs.Arg(0) == "promote" {
			out, err = cl.Promote(ctx, fs.Arg(1))
		} else {
			out, err = cl.Abort(ctx, fs.Arg(1))
		}
		if err != nil {
			fmt.Fprintf(stderr, "mappers %s: %v%s\n", fs.Arg(0), controlError(err, fs, environ), needsDaemon(err, fs.Arg(0)))
			return 1
		}
		_ = printJSON(stdout, out)
		if out.Replicas == catalog.ReplicasPending {
			fmt.Fprintf(stderr, "mappers %s: in effect on this replica only for now: %s\n"+
				"The other replicas get it once the broker confirms it; the decision is kept and sent again until then.\n",
				fs.Arg(0), out.ReplicasError)
		}
		return 0
	}
	fmt.Fprint(stderr, mappersUsage)
	return 2
}

func runDeadletter(args, environ []string, stdout, stderr io.Writer) int {
	fs := controlFlags("deadletter")
	after := fs.Uint64("after", 0, "list dead letters after this sequence number")
	limit := fs.Int("limit", 100, "list at most this many")
	var purge catalog.PurgeOptions
	fs.Uint64Var(&purge.From, "from", 0, "purge: from this sequence number on")
	fs.Uint64Var(&purge.To, "to", 0, "purge: up to this sequence number")
	fs.StringVar(&purge.Mapper, "mapper", "", "purge: letters of this module (name, or name@version)")
	fs.StringVar(&purge.OlderThan, "older-than", "", "purge: letters written longer ago than this (72h)")
	fs.BoolVar(&purge.All, "all", false, "purge: every letter")
	if code := parseFlags(fs, deadletterUsage, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, deadletterUsage)
		return 2
	}
	cl, err := controlClient(fs, environ)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var seqs []uint64
	for _, a := range fs.Args()[1:] {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "deadletter: %q is not a sequence number\n", a)
			return 2
		}
		seqs = append(seqs, n)
	}
	var out any
	switch {
	case fs.Arg(0) == "list" && len(seqs) == 0:
		out, err = cl.ListDeadLetters(ctx, *after, *limit)
		if daemonDown(err) {
			out, err = stoppedDeadLetters(fs, environ, cl, err, stderr, func(ob *outbox.Outbox) (any, error) {
				return catalog.ListDeadLetters(ctx, ob, *after, *limit)
			})
		}
	case fs.Arg(0) == "show" && len(seqs) == 1:
		out, err = cl.ShowDeadLetter(ctx, seqs[0])
		if daemonDown(err) {
			out, err = stoppedDeadLetters(fs, environ, cl, err, stderr, func(ob *outbox.Outbox) (any, error) {
				return catalog.ShowDeadLetter(ctx, ob, seqs[0])
			})
		}
	case fs.Arg(0) == "replay":
		out, err = cl.Replay(ctx, catalog.ReplayOptions{Seqs: seqs})
	case fs.Arg(0) == "purge" && len(seqs) == 0:
		out, err = cl.Purge(ctx, purge)
		if errors.Is(err, catalog.ErrInvalidPurge) {
			fmt.Fprintf(stderr, "deadletter purge: %v\n", err)
			return 2
		}
	default:
		fmt.Fprint(stderr, deadletterUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "deadletter %s: %v%s\n", fs.Arg(0), controlError(err, fs, environ), needsDaemon(err, fs.Arg(0)))
		return 1
	}
	_ = printJSON(stdout, out)
	if rep, ok := out.(catalog.ReplayReport); ok && rep.Remaining > 0 {
		// Some letters still fail: not a success, for a script or a job.
		fmt.Fprintf(stderr, "deadletter replay: %d of %d letters still fail and stay dead letters (their reasons are above); "+
			"fix the mapper and replay again, or purge them\n", rep.Remaining, rep.Examined)
		return 1
	}
	return 0
}

// stoppedDeadLetters reads the dead letters of a stopped daemon's outbox
// with read, after the daemon did not answer on cl.BaseURL (cause).
func stoppedDeadLetters(fs *pflag.FlagSet, environ []string, cl *catalog.Client, cause error, stderr io.Writer,
	read func(*outbox.Outbox) (any, error)) (any, error) {
	ob, cfg, err := stoppedOutbox(fs, environ, cl, cause, "")
	if err != nil {
		return nil, err
	}
	defer func() { _ = ob.Close() }() // read only
	noteStopped(stderr, cl, "read from the stopped daemon's outbox at "+cfg.BufferPath)
	return read(ob)
}

// needsDaemon adds, to the error of a command that changes the daemon's
// state (mappers promote|abort, deadletter replay|purge) when no daemon
// answered, that it has no stopped form.
func needsDaemon(err error, sub string) string {
	if !daemonDown(err) {
		return ""
	}
	return fmt.Sprintf(" (%s changes the running daemon's state and has no form for a stopped one: start the daemon, or give its address with --http-addr or %sHTTP_ADDR)",
		sub, settings.EnvPrefix)
}
