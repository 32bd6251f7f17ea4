package cli

// The evidence commands: ledger (the completeness ledger of a running
// daemon, of stopped replicas' outboxes, or of several replicas added up)
// and reconcile (the ledger's delivered counts against the Reporting API's
// stored counts).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

const ledgerUsage = `Usage: tally-openstack-collector ledger [--from T] [--to T] [--by source|type|hour] [--json]
       tally-openstack-collector ledger --merge DIR|URL... [--from T] [--to T] [--by source|type|hour] [--json]

The durable completeness ledger, per hour: notifications consumed, committed,
skipped and dead-lettered (by reason), events committed, delivered, refused
and still pending, and the events delivered per hour of their timestamp,
project and resource type. A line follows for every hour that does not
balance and every hour with events still in the outbox (docs/evidence.md).

Without --merge the running daemon is asked on HTTP_ADDR (with the control
token); when none answers there, the stopped daemon's outbox at BUFFER_PATH is
read (read-only; refused while a collector holds it). --merge adds up several replicas: each argument is an outbox
directory of a stopped replica, or the http://host:port of a running one.
T is an RFC 3339 time, or a duration meaning that long ago (24h).

Flags:
`

const reconcileUsage = `Usage: tally-openstack-collector reconcile --from T --to T [--merge DIR|URL...] [--json]

Compares the events delivered, per hour of their timestamp, project and
resource type, less the duplicates the Reporting API recognised, with the
counts the API stores (GET /api/v1/events/counts). Names every hour that
differs. Exit 0 when none does, 1 when one does, 2 when the comparison cannot
be made (an API without the count route, a daemon out of reach).

The ledger is read as by the ledger command; the API with REPORTING_URL and
its token.

Flags:
`

// parseWhen reads an RFC 3339 time or a duration meaning that long before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
}

type ledgerFlags struct {
	from, to, by string
	json, merge  bool
}

// parseLedgerArgs parses the flags of ledger and reconcile and their times;
// code >= 0 is the exit code when the command stops here.
func parseLedgerArgs(fs *pflag.FlagSet, f *ledgerFlags, usage string, args []string, stdout, stderr io.Writer) (from, to time.Time, code int) {
	if code := parseFlags(fs, usage, args, stdout, stderr); code >= 0 {
		return from, to, code
	}
	now := time.Now()
	from, err1 := parseWhen(f.from, now)
	to, err2 := parseWhen(f.to, now)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return from, to, 2
	}
	return from, to, -1
}

func addLedgerFlags(fs *pflag.FlagSet, f *ledgerFlags, by bool) {
	fs.StringVar(&f.from, "from", "", "first hour (RFC 3339, or a duration: that long ago)")
	fs.StringVar(&f.to, "to", "", "end, exclusive (RFC 3339, or a duration: that long ago)")
	if by {
		fs.StringVar(&f.by, "by", "", "add up per hour and source, per hour and event type, or per hour (source, type, hour)")
	}
	fs.BoolVar(&f.json, "json", false, "print JSON")
	fs.BoolVar(&f.merge, "merge", false, "add up the replicas given as arguments (outbox directories, or http://host:port)")
}

// readLedger reads the ledger of [from, to): of the running daemon, or with
// merge, of every argument added up.
func readLedger(ctx context.Context, fs *pflag.FlagSet, environ []string, merge bool, from, to time.Time, stderr io.Writer) (*ledger.Delta, error) {
	cl, err := controlClient(fs, environ)
	if err != nil {
		return nil, err
	}
	if !merge {
		if fs.NArg() > 0 {
			return nil, fmt.Errorf("unexpected argument %q (replicas are given with --merge)", fs.Arg(0))
		}
		rep, err := cl.Ledger(ctx, from, to)
		if daemonDown(err) {
			return stoppedLedger(ctx, fs, environ, cl, err, from, to, stderr)
		}
		if err != nil {
			return nil, fmt.Errorf("the daemon on %s: %w", cl.BaseURL, err)
		}
		return rep.Delta(), nil
	}
	if fs.NArg() == 0 {
		return nil, errors.New("--merge needs outbox directories or replica addresses")
	}
	sum := &ledger.Delta{}
	for _, arg := range fs.Args() {
		if strings.HasPrefix(arg, "http://") || strings.HasPrefix(arg, "https://") {
			rc := &catalog.Client{BaseURL: arg, Token: cl.Token}
			rep, err := rc.Ledger(ctx, from, to)
			if err != nil {
				return nil, fmt.Errorf("replica %s: %w", arg, err)
			}
			sum.Add(rep.Delta())
			continue
		}
		d, err := readOutboxLedger(ctx, arg, from, to)
		if err != nil {
			return nil, err
		}
		sum.Add(d)
	}
	return sum, nil
}

// stoppedLedger reads the ledger of the stopped daemon's outbox at
// BUFFER_PATH, after the daemon did not answer on cl.BaseURL (cause).
func stoppedLedger(ctx context.Context, fs *pflag.FlagSet, environ []string, cl *catalog.Client, cause error, from, to time.Time, stderr io.Writer) (*ledger.Delta, error) {
	ob, cfg, err := stoppedOutbox(fs, environ, cl, cause, "--merge DIR|URL...")
	if err != nil {
		return nil, err
	}
	defer func() { _ = ob.Close() }() // read only
	noteStopped(stderr, cl, "read from the stopped daemon's outbox at "+cfg.BufferPath)
	return ob.Ledger(ctx, from, to)
}

// readOutboxLedger opens the outbox in dir (its daemon stopped) read-only and
// reads its ledger.
func readOutboxLedger(ctx context.Context, dir string, from, to time.Time) (*ledger.Delta, error) {
	ob, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), ReadOnly: true})
	if errors.Is(err, outbox.ErrLocked) {
		return nil, fmt.Errorf("%s is in use by a running collector: give its control address (http://HTTP_ADDR) instead: %w", dir, err)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = ob.Close() }() // read only
	return ob.Ledger(ctx, from, to)
}

func runLedger(args, environ []string, stdout, stderr io.Writer) int {
	fs := controlFlags("ledger")
	var f ledgerFlags
	addLedgerFlags(fs, &f, true)
	from, to, code := parseLedgerArgs(fs, &f, ledgerUsage, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, err := readLedger(ctx, fs, environ, f.merge, from, to, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ledger: %v\n", controlError(err, fs, environ))
		return 2
	}
	rep, err := ledger.NewReport(d, from, to, f.by)
	if err != nil {
		fmt.Fprintf(stderr, "ledger: %v\n", err)
		return 2
	}
	if f.json {
		_ = printJSON(stdout, rep)
		return 0
	}
	if err := rep.WriteText(stdout); err != nil {
		return 1
	}
	return 0
}

func runReconcile(args, environ []string, stdout, stderr io.Writer) int {
	fs := controlFlags("reconcile")
	for _, k := range []string{"reporting_url", "reporting_token", "reporting_token_file", "reporting_insecure", "reporting_timeout",
		"reporting_ca_file", "reporting_cert_file", "reporting_key_file"} {
		if fl := fs.Lookup(settings.FlagName(k)); fl != nil {
			fl.Hidden = false
		}
	}
	var f ledgerFlags
	addLedgerFlags(fs, &f, false)
	from, to, code := parseLedgerArgs(fs, &f, reconcileUsage, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	if from.IsZero() || to.IsZero() || !from.Before(to) {
		fmt.Fprintln(stderr, "reconcile: --from and --to are required, --from before --to")
		return 2
	}
	cfg, err := settings.Load(fs, environ, settings.ModeOffline)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, err := readLedger(ctx, fs, environ, f.merge, from, to, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "reconcile: %v\n", err)
		return 2
	}
	if cfg.ReportingURL == "" {
		fmt.Fprintf(stderr, "reconcile: %sREPORTING_URL (or --reporting-url) is not set: it names the Reporting API to compare with\n", settings.EnvPrefix)
		return 2
	}
	counts, err := sender.Counts(ctx, sender.Options{URL: cfg.ReportingURL, Token: cfg.ReportingToken, TokenFile: cfg.ReportingTokenFile,
		Insecure: cfg.ReportingInsecure, TLS: cfg.ReportingTLS, RequestTimeout: cfg.ReportingTimeout}, from, to)
	if errors.Is(err, sender.ErrNoCountRoute) {
		fmt.Fprintf(stderr, "reconcile: cannot compare: the Reporting API does not count its stored events "+
			"(GET /api/v1/events/counts answered 404; the route is optional, see docs/evidence.md)\n")
		return 2
	}
	if err != nil {
		// Which peer failed: the ledger was read, the API was not.
		fmt.Fprintf(stderr, "reconcile: Reporting API at %s (%s): %v\n", peerURL(cfg.ReportingURL), cfg.NameOf("reporting_url"), err)
		return 2
	}
	api := make(map[ledger.StoredKey]int64, len(counts))
	for _, c := range counts {
		api[ledger.StoredKey{Hour: ledger.HourOf(c.Hour), Project: c.ProjectID, ResourceType: c.ResourceType}] += c.Events
	}
	res := ledger.Reconcile(d, api, from, to)
	if f.json {
		_ = printJSON(stdout, res)
	} else if err := res.WriteText(stdout); err != nil {
		return 2
	}
	if len(res.DifferingHours) > 0 {
		return 1
	}
	return 0
}

// peerURL is a URL as an error may show it: no password (redact.URL), no
// query or fragment.
func peerURL(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	return redact.URL(raw)
}
