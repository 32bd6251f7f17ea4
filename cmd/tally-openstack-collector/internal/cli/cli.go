// Package cli is the command line of tally-openstack-collector: it parses the
// arguments and runs the daemon (package daemon) or one of the commands. The
// program's main only stamps the build and calls Run, so a test runs any
// command in-process:
//
//	code := cli.Run([]string{"map", "notification.json"}, os.Environ(), os.Stdin, os.Stdout, os.Stderr, cli.Stamp{})
//
// The commands and their flags are listed once, in usageHead, which --help
// prints.
//
// Settings come from defaults, then the YAML file given with --config, then
// TALLY_OSC_* variables, then flags (docs/settings.md).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
)

const usageHead = `tally-openstack-collector: OpenStack notifications to Tally usage events.

Usage:
  tally-openstack-collector [flags]                         run the daemon
  tally-openstack-collector --dump [flags]                  print what the broker carries, one JSON line per delivery
  tally-openstack-collector map [--mappers DIR] [FILE...]   map notifications offline (stdin without FILE)
  tally-openstack-collector mapper test [--mappers DIR] [DIR...]
                                                            run mapper fixture pairs (*.in.json -> *.out.json)
  tally-openstack-collector mapper new NAME [--exchange EXCHANGE] [--event-type GLOB]... [--from CAPTURE]
                                                            write a new mapper's directory (mappers/NAME of a clone)
  tally-openstack-collector version                         version, commit, mapper ABI versions
  tally-openstack-collector mappers [promote|abort NAME]    the daemon's mapper catalogue (a stopped one's: from its outbox)
  tally-openstack-collector deadletter list|show|replay|purge
                                                            the daemon's dead letters (list, show: a stopped one's too)
  tally-openstack-collector ledger [--from T] [--to T] [--by source|type|hour] [--json] [--merge DIR|URL...]
                                                            the durable completeness ledger
  tally-openstack-collector reconcile --from T --to T       delivered counts against the Reporting API's
  tally-openstack-collector map --diff OLD NEW [CAPTURE...] what a new module version changes
  tally-openstack-collector publish [--channel SOCKET] [--type STRING|JSON] [--perm 0440] [--no-wait] TAG [FILE...]
                                                            hand messages to the daemon's local channel, one per line
  tally-openstack-collector tap [--channel SOCKET] [--raw] REGEX
                                                            print the daemon's events live, one JSON line each
  tally-openstack-collector livez                           exit 0 when the running daemon's /livez answers ok

Every flag can also be set as TALLY_OSC_<NAME> (dashes as underscores) or in
the --config file; flags win over the environment, which wins over the file.
See docs/settings.md.

Flags:
`

// Run runs the command line args (without the program's name) and returns
// the exit code: 0 on success, 2 for a usage error, 1 (or a command's own
// code, given in its usage) otherwise. environ holds KEY=value pairs, as
// os.Environ returns them; stamp is what the build stamped into the binary.
func Run(args, environ []string, stdin io.Reader, stdout, stderr io.Writer, stamp Stamp) int {
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd = args[0]
		args = args[1:]
	}
	switch cmd {
	case "":
		return runRoot(args, environ, stdout, stderr, stamp)
	case "version":
		if len(args) > 0 && args[0] != "--help" && args[0] != "-h" {
			fmt.Fprintf(stderr, "version takes no arguments\n")
			return 2
		}
		printVersion(stdout, stamp.buildInfo())
		return 0
	case "map":
		return runMap(args, environ, stdin, stdout, stderr)
	case "mapper":
		switch {
		case len(args) > 0 && args[0] == "test":
			return runMapperTest(args[1:], environ, stdout, stderr)
		case len(args) > 0 && args[0] == "new":
			return runMapperNew(args[1:], stdout, stderr)
		}
		fmt.Fprintf(stderr, "usage: tally-openstack-collector mapper test [--mappers DIR] [DIR...] | mapper new NAME [--exchange EXCHANGE] [--event-type GLOB]... [--from CAPTURE]\n")
		return 2
	case "mappers":
		return runMappers(args, environ, stdout, stderr)
	case "deadletter":
		return runDeadletter(args, environ, stdout, stderr)
	case "ledger":
		return runLedger(args, environ, stdout, stderr)
	case "reconcile":
		return runReconcile(args, environ, stdout, stderr)
	case "publish":
		return runPublish(args, environ, stdin, stdout, stderr)
	case "tap":
		return runTap(args, environ, stdout, stderr)
	case "livez":
		return runLivez(args, environ, stdout, stderr)
	case daemon.WatchdogCommand: // hidden: the daemon's watchdog process (watchdog.go)
		return daemon.RunWatchdog(args, stdin, stderr)
	case "help":
		fs := rootFlags()
		fmt.Fprint(stdout, usageHead+fs.FlagUsages())
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q (try --help)\n", cmd)
		return 2
	}
}

func rootFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("tally-openstack-collector", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Bool("dump", false, "print what the broker carries, one JSON line per delivery (needs only the AMQP settings)")
	fs.Bool("print-config", false, "print the effective settings (secrets redacted) and exit")
	settings.AddFlags(fs, nil)
	return fs
}

// shortFlags are the flags of a command of mode m: first its own flag
// short, which stands for the setting key (takeShortFlag), then the settings
// m uses but key; the other settings are hidden.
func shortFlags(name string, m settings.Mode, short, key, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.String(short, "", usage)
	settings.AddFlags(fs, func(k string) bool { return m.Uses(k) && k != key })
	return fs
}

// takeShortFlag gives the setting key the value of the short flag
// (shortFlags), when the command line sets it.
func takeShortFlag(fs *pflag.FlagSet, short, key string) {
	if v, _ := fs.GetString(short); v != "" {
		_ = fs.Set(settings.FlagName(key), v)
	}
}

// parseFlags parses args into fs. It answers -1 when the command is to run,
// or else the status to exit with: 0 once --help printed the usage (head and
// the flags) on stdout, 2 once stderr says what is wrong.
func parseFlags(fs *pflag.FlagSet, head string, args []string, stdout, stderr io.Writer) int {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, head+fs.FlagUsages())
			return 0
		}
		fmt.Fprintf(stderr, "%v (try --help)\n", err)
		return 2
	}
	return -1
}

// printConfig prints the effective settings, secrets redacted, with what is
// missing or invalid marked on its line (--print-config). It prints them
// even when the daemon would refuse to start, to show what it read: the
// exit status is 0 once printed, and standard error says how many problems
// would stop a start.
func printConfig(fs *pflag.FlagSet, environ []string, m settings.Mode, stdout, stderr io.Writer) int {
	in, err := settings.Inspect(fs, environ, m)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	for _, l := range in.Lines {
		fmt.Fprintln(stdout, l)
	}
	for _, w := range in.Warnings {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	if n := len(in.Problems); n > 0 {
		fmt.Fprintf(stderr, "%d setting problem(s), marked above: the %s would refuse to start with these settings\n", n, m)
	}
	return 0
}

func runRoot(args, environ []string, stdout, stderr io.Writer, stamp Stamp) int {
	fs := rootFlags()
	if code := parseFlags(fs, usageHead, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q (try --help)\n", fs.Arg(0))
		return 2
	}
	dump, _ := fs.GetBool("dump")
	printCfg, _ := fs.GetBool("print-config")
	m := settings.ModeDaemon
	if dump {
		m = settings.ModeDump
	}
	if printCfg {
		return printConfig(fs, environ, m, stdout, stderr)
	}
	cfg, err := settings.Load(fs, environ, m)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	log := daemon.NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	mlog := log.With().Str("component", "main").Logger()
	daemon.WarnSettings(cfg, mlog)
	if dump {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := daemon.Dump(ctx, cfg, log, stdout); err != nil {
			mlog.Error().Err(err).Msg("dump failed")
			return 1
		}
		return 0
	}
	// The daemon stops gracefully on the first signal and exits at once on
	// the second.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	err = daemon.Run(cfg, log, daemon.Options{
		Build:   stamp.buildInfo(),
		Signals: sig,
		Exit:    os.Exit,
	})
	if err != nil {
		mlog.Error().Err(err).Msg("stopped with an error")
		return 1
	}
	return 0
}
