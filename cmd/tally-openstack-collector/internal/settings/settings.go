package settings

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
)

// EnvPrefix is the prefix of every environment variable the collector reads.
const EnvPrefix = "TALLY_OSC_"

// Mode says what the process is about to do; it decides which settings must be
// valid. The daemon needs all of them, the dump only the AMQP ones, the
// offline tools (map, mapper test) only the mapper ones, the channel's
// clients (publish, tap) only the channel ones.
type Mode int

const (
	ModeDaemon Mode = iota
	ModeDump
	ModeOffline
	ModeChannel
)

func (m Mode) String() string {
	switch m {
	case ModeDaemon:
		return "daemon"
	case ModeDump:
		return "dump"
	case ModeChannel:
		return "channel client"
	}
	return "offline"
}

var (
	allModes     = []Mode{ModeDaemon, ModeDump, ModeOffline, ModeChannel}
	channelModes = []Mode{ModeDaemon, ModeChannel}
	amqpModes    = []Mode{ModeDaemon, ModeDump}
	daemonOnly   = []Mode{ModeDaemon}
	mapperModes  = []Mode{ModeDaemon, ModeOffline}
)

// setting describes one key: its name in the config file (lower case), in the
// environment (TALLY_OSC_ + upper case) and as a flag (dashes), its default,
// what it means, and how its text becomes a Config field. The table is the
// single source for defaults, flags, the environment, decoding, the checks of
// a single value, the effective-settings dump and docs/settings.md (a test
// holds the page to it). A new setting is a row here and a field of Config.
type setting struct {
	key    string
	def    string
	usage  string
	secret bool // never shown: the value is replaced by the redaction marker
	// privateKey: the value is the path of a private key file, warned about
	// at start when group or others may read it (Config.KeyFiles).
	privateKey bool
	modes      []Mode

	// field points at the Config field the text decodes into: *string,
	// *[]string, *bool, *int, *int64 or *time.Duration. Its type decides the
	// parsing, and whether the flag is a switch.
	field func(*Config) any
	// min and max bound a whole number when either is set (a row with
	// parse states the bounds its parse applies, for the docs' test).
	min, max int64
	// zeroOff admits a duration of 0, which turns the feature off; any
	// other duration must be positive.
	zeroOff bool
	// minDur is the shortest duration that can work (0: any positive one);
	// docs/settings.md states it with the setting.
	minDur time.Duration
	// oneOf lists the accepted words of a string (compared in lower case).
	oneOf []string
	// parse replaces the decoding by field, for text that needs a conversion
	// (levels, units, modes).
	parse func(c *Config, raw string) error
	// check validates the decoded value alone; rules between settings are in
	// (*Config).validate.
	check func(c *Config) error
}

func (s setting) env() string  { return EnvPrefix + strings.ToUpper(s.key) }
func (s setting) flag() string { return strings.ReplaceAll(s.key, "_", "-") }

// isBool tells whether the setting is a switch (a flag without a value).
func (s setting) isBool() bool {
	if s.field == nil {
		return false
	}
	_, ok := s.field(&Config{}).(*bool)
	return ok
}

// The minimums of the settings whose small values cannot work. A value under
// one stops start-up with a message naming the setting and the minimum;
// docs/settings.md states each (a test holds the page to them).
const (
	// MinReportingTimeout bounds REPORTING_TIMEOUT: a POST is a TLS handshake
	// and a batch of up to BATCH_MAX events; a deadline under a second fails
	// every batch as soon as the API or the network slows down a little, and
	// the outbox only grows.
	MinReportingTimeout = time.Second
	// MinMapperCallTimeout bounds MAPPER_CALL_TIMEOUT: a built-in module maps
	// a notification in 10 to 45 µs and a drop-in guarded one in about 100 µs
	// (docs/performance.md), but a watched built-in call past its deadline
	// ends the daemon (docs/abi.md), so the deadline must hold a loaded host's
	// scheduling delays and a garbage collection of the guest as well: 50 ms is
	// 500 times the slowest call measured, a fifth of the default.
	MinMapperCallTimeout = 50 * time.Millisecond
	// MinMapperBudget bounds MAPPER_BUDGET: the built-in modules' calls
	// over the fixture corpus are charged up to 6.4 million instructions
	// (docs/abi.md, "Metering"); a budget below 10 million would
	// dead-letter ordinary notifications.
	MinMapperBudget = 10_000_000
	// MinFlushTimeout bounds FLUSH_TIMEOUT: at least one POST of the outbox's
	// head must fit.
	MinFlushTimeout = time.Second
	// MinInputsStop is the least part of STOP_TIMEOUT left beyond
	// FLUSH_TIMEOUT: the inputs' stop (basic.cancel, the last commit, the
	// acknowledgements) takes broker round trips.
	MinInputsStop = time.Second
	// MinStopTimeout bounds STOP_TIMEOUT: the least flush and the inputs'
	// stop.
	MinStopTimeout = MinFlushTimeout + MinInputsStop
	// MinHTTPConnections bounds HTTP_MAX_CONNECTIONS: an eighth of them, two
	// at the minimum, is kept for the probes.
	MinHTTPConnections = 16
)

// table is every key the collector reads. The first block is the contract
// (CONTRACT §2); the rest tunes the packages.
var table = []setting{
	{key: "transport_url", def: "amqp://guest:guest@127.0.0.1:5672/", modes: amqpModes, //nolint:gosec // G101: RabbitMQ's documented local default, not a secret
		usage: "broker URL: amqp://, amqps:// or rabbit://user:pass@h1:5672,user:pass@h2:5672/vhost (hosts tried in order); the password is never shown",
		field: func(c *Config) any { return &c.TransportURL },
		check: func(c *Config) error { return checkTransportURL(c.TransportURL) }},
	{key: "transport_ca_file", modes: amqpModes,
		usage: "CA certificates (PEM) the broker's certificate must chain to, instead of the system's trust store (oslo's ssl_ca_file); re-read at every connection",
		field: func(c *Config) any { return &c.TransportTLS.CAFile }},
	{key: "transport_cert_file", modes: amqpModes,
		usage: "client certificate (PEM) presented to the broker, with transport_key_file (oslo's ssl_cert_file); re-read at every connection",
		field: func(c *Config) any { return &c.TransportTLS.CertFile }},
	{key: "transport_key_file", modes: amqpModes, privateKey: true,
		usage: "private key (PEM, unencrypted) of transport_cert_file (oslo's ssl_key_file); the path is shown, never the content",
		field: func(c *Config) any { return &c.TransportTLS.KeyFile }},
	{key: "transport_server_name", modes: amqpModes,
		usage: "name the broker's certificate must hold, when the URL names the broker by an address or another name",
		field: func(c *Config) any { return &c.TransportTLS.ServerName }},
	{key: "exchanges", def: "nova,neutron,openstack,glance", modes: amqpModes,
		usage: "service exchanges to bind, comma-separated (add designate, swift, trove, ironic or octavia where they run; a listed exchange that never appears keeps tally_collector_missing_exchanges above 0)",
		field: func(c *Config) any { return &c.Exchanges },
		check: func(c *Config) error { return checkNames(c.Exchanges, "exchange") }},
	{key: "topics", def: "notifications", modes: amqpModes,
		usage: "oslo notification topics, comma-separated; routing keys are <topic>.<priority>",
		field: func(c *Config) any { return &c.Topics },
		check: func(c *Config) error { return checkNames(c.Topics, "topic") }},
	{key: "queue", def: "tally-notifications", modes: daemonOnly,
		usage: "the collector's own durable queue",
		field: func(c *Config) any { return &c.Queue }, check: func(c *Config) error { return notEmpty(c.Queue) }},
	{key: "queue_type", def: "quorum", modes: daemonOnly, oneOf: []string{"quorum", "classic"},
		usage: "quorum or classic (classic for RabbitMQ older than 4.0)",
		field: func(c *Config) any { return &c.QueueType }},
	{key: "require_exchanges", def: "false", modes: amqpModes,
		usage: "consume nothing until every listed exchange exists",
		field: func(c *Config) any { return &c.RequireExchanges }},
	{key: "prefetch", def: "100", modes: amqpModes, min: 1, max: 65535,
		usage: "unacknowledged deliveries held at most (basic.qos)",
		field: func(c *Config) any { return &c.Prefetch }},
	{key: "buffer_path", def: "/var/lib/tally-openstack-collector/outbox", modes: daemonOnly,
		usage: "directory of the outbox (a volume that outlives the process)",
		field: func(c *Config) any { return &c.BufferPath }, check: func(c *Config) error { return notEmpty(c.BufferPath) }},
	{key: "buffer_max_events", def: "1000000", modes: daemonOnly, min: 1,
		usage: "outbox depth at which consumption pauses",
		field: func(c *Config) any { return &c.BufferMaxEvents }},
	{key: "deadletter_max_events", def: "100000", modes: daemonOnly, min: 1,
		usage: "dead letters held at most; past it the input pauses until some are replayed or purged",
		field: func(c *Config) any { return &c.DeadLetterMaxEvents }},
	{key: "deadletter_max_bytes", def: "268435456", modes: daemonOnly, min: 1 << 20,
		usage: "bytes of dead letters held at most (as stored); past it the input pauses until some are replayed or purged",
		field: func(c *Config) any { return &c.DeadLetterMaxBytes }},
	{key: "ledger_retention_days", def: "90", modes: daemonOnly, min: 1, max: 3650,
		usage: "days of hours the completeness ledger keeps (docs/evidence.md)",
		field: func(c *Config) any { return &c.LedgerRetentionDays }},
	{key: "deadletter_undeliverable_max_events", def: "1000", modes: daemonOnly, min: 1,
		usage: "bodies no replay can deliver (oversized, undecodable, refused by their decoder) kept at most as dead letters; past it they are dropped with a count, never pausing the input",
		field: func(c *Config) any { return &c.DeadLetterUndeliverableMaxEvents }},
	{key: "deadletter_undeliverable_max_bytes", def: "16777216", modes: daemonOnly, min: 1 << 20,
		usage: "bytes of those undeliverable bodies kept at most (as stored); past it they are dropped with a count",
		field: func(c *Config) any { return &c.DeadLetterUndeliverableMaxBytes }},
	{key: "batch_max", def: "500", modes: daemonOnly, min: 1, max: 100000,
		usage: "events per POST to the Reporting API at most",
		field: func(c *Config) any { return &c.BatchMax }},
	{key: "reporting_url", modes: daemonOnly,
		usage: "base URL of the Reporting API (required by the daemon; https unless reporting_insecure)",
		field: func(c *Config) any { return &c.ReportingURL }},
	{key: "reporting_token", secret: true, modes: daemonOnly,
		usage: "bearer token for the Reporting API (or reporting_token_file)",
		field: func(c *Config) any { return &c.ReportingToken }},
	{key: "reporting_token_file", modes: daemonOnly,
		usage: "file holding the token; re-read when it changes",
		field: func(c *Config) any { return &c.ReportingTokenFile }},
	{key: "reporting_ca_file", modes: daemonOnly,
		usage: "CA certificates (PEM) the Reporting API's certificate must chain to, instead of the system's trust store; re-read for every new connection",
		field: func(c *Config) any { return &c.ReportingTLS.CAFile }},
	{key: "reporting_cert_file", modes: daemonOnly,
		usage: "client certificate (PEM) presented to the Reporting API, with reporting_key_file; re-read for every new connection",
		field: func(c *Config) any { return &c.ReportingTLS.CertFile }},
	{key: "reporting_key_file", modes: daemonOnly, privateKey: true,
		usage: "private key (PEM, unencrypted) of reporting_cert_file; the path is shown, never the content",
		field: func(c *Config) any { return &c.ReportingTLS.KeyFile }},
	{key: "reporting_insecure", def: "false", modes: daemonOnly,
		usage: "allow a plain http Reporting API URL",
		field: func(c *Config) any { return &c.ReportingInsecure }},
	{key: "plog_listeners", modes: daemonOnly,
		usage: "plog-compatible inputs, comma-separated udp://host:port and tcp://host:port (details in the config file's plog section)",
		field: func(c *Config) any { return &c.PlogListeners },
		check: func(c *Config) error {
			var errs []error
			for _, l := range c.PlogListeners {
				if err := checkListenAddr(l); err != nil {
					errs = append(errs, fmt.Errorf("%q: %w", l, err))
				}
			}
			return errors.Join(errs...)
		}},
	{key: "channel_socket", modes: channelModes,
		usage: "Unix socket of the local message channel (publish, tap); empty: the channel is off",
		field: func(c *Config) any { return &c.ChannelSocket },
		check: func(c *Config) error {
			if c.ChannelSocket != "" && !filepath.IsAbs(c.ChannelSocket) {
				return fmt.Errorf("%q is not an absolute path", c.ChannelSocket)
			}
			return nil
		}},
	{key: "channel_queue_limit_bytes", def: "1048576", modes: channelModes, min: 4096, max: 1 << 30,
		usage: "bytes a channel client holds until the daemon answers (publish), and the daemon holds for one slow tap, at most",
		field: func(c *Config) any { return &c.ChannelQueueLimitBytes }},
	{key: "unhealthy_threshold_s", def: "600", modes: daemonOnly, min: 1,
		usage: "seconds of unbroken outbox unusability before /livez fails",
		parse: func(c *Config, raw string) error {
			n, err := wholeNumber(raw, 1, 0)
			c.UnhealthyThreshold = time.Duration(n) * time.Second
			return err
		}},
	{key: "watchdog_timeout", def: "5s", modes: daemonOnly, zeroOff: true, minDur: time.Second,
		usage: "time without a heartbeat from the daemon's Go runtime after which its watchdog process kills it with SIGKILL, for its supervisor to restart it; 0: no watchdog process",
		field: func(c *Config) any { return &c.WatchdogTimeout }},
	{key: "http_addr", def: "127.0.0.1:9469", modes: daemonOnly,
		usage: "listen address of /livez, /readyz and /metrics (open) and of the mapper and dead-letter routes (control token)",
		field: func(c *Config) any { return &c.HTTPAddr },
		check: func(c *Config) error { return checkHostPort(c.HTTPAddr) }},
	{key: "http_max_connections", def: "256", modes: daemonOnly, min: MinHTTPConnections, max: 65536,
		usage: "connections the HTTP server holds open at most; an eighth of them are kept for /livez and /readyz, and past the bound a new connection closes the oldest one not serving a request",
		field: func(c *Config) any { return &c.HTTPMaxConnections }},
	{key: "mappers_dir", modes: mapperModes,
		usage: "drop-in directory of .wasm mapper modules, on top of the built-in ones",
		field: func(c *Config) any { return &c.MappersDir },
		check: func(c *Config) error {
			if c.MappersDir == "" {
				return nil
			}
			fi, err := os.Stat(c.MappersDir)
			if errors.Is(err, fs.ErrNotExist) {
				// Not yet: the built-ins serve and the directory is read
				// when it appears (a warning, see mappersDirWarning).
				return nil
			}
			if err != nil {
				return fileProblem(c.MappersDir, err)
			}
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", c.MappersDir)
			}
			return nil
		}},
	{key: "log_level", def: "info", modes: allModes,
		usage: "trace, debug, info, warn or error",
		parse: func(c *Config, raw string) error {
			c.LogLevel = zerolog.InfoLevel
			lvl, err := zerolog.ParseLevel(strings.ToLower(raw))
			if err != nil || raw == "" || lvl == zerolog.NoLevel {
				return fmt.Errorf("%q is not one of trace, debug, info, warn, error", raw)
			}
			c.LogLevel = lvl
			return nil
		}},

	{key: "log_format", def: "auto", modes: allModes, oneOf: []string{"auto", "json", "console"},
		usage: "json, console, or auto (console when stderr is a terminal)",
		field: func(c *Config) any { return &c.LogFormat }},
	{key: "mappers_promote", def: "shadow", modes: daemonOnly,
		usage: "a new version of an active drop-in module: shadow (runs beside it until promoted) or immediate",
		parse: func(c *Config, raw string) error {
			pm, err := catalog.ParsePromoteMode(raw)
			c.MappersPromote = pm
			if err != nil {
				return fmt.Errorf("%q is not shadow or immediate", raw)
			}
			return nil
		}},
	{key: "replica_name", modes: daemonOnly,
		usage: "this collector's name among the replicas sharing the queue, unique and stable (default: the host name, in a StatefulSet the pod name); names its control queue",
		parse: func(c *Config, raw string) error {
			if raw == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("empty, and the host name is unknown (%w): set it", err)
				}
				raw = h
				if c.values != nil {
					c.values["replica_name"] = h
				}
			}
			c.ReplicaName = raw
			if err := broker.CheckControlName(raw); err != nil {
				return fmt.Errorf("%q: %w", raw, err)
			}
			return nil
		}},
	{key: "control_exchange", def: broker.DefaultControlExchange, modes: daemonOnly,
		usage: "fanout exchange that carries mapper promote and abort decisions to every replica; empty: a decision stays on the replica it is given to",
		field: func(c *Config) any { return &c.ControlExchange },
		check: func(c *Config) error {
			if c.ControlExchange == "" {
				return nil
			}
			return broker.CheckControlName(c.ControlExchange)
		}},
	{key: "control_token", secret: true, modes: daemonOnly,
		usage: "bearer token of every route but /livez, /readyz and /metrics (mapper state, dead letters, promote, abort, replay, the profiler); without it they are open on a loopback HTTP_ADDR only",
		field: func(c *Config) any { return &c.ControlToken }},
	{key: "control_token_file", modes: daemonOnly,
		usage: "file holding the control token (instead of control_token); re-read when it changes",
		field: func(c *Config) any { return &c.ControlTokenFile }},
	{key: "mapper_memory_limit_mib", def: "64", modes: mapperModes, min: mappers.MinMemoryLimitMiB, max: 4096,
		usage: "linear memory per mapper instance, MiB",
		parse: func(c *Config, raw string) error {
			n, err := wholeNumber(raw, mappers.MinMemoryLimitMiB, 4096) // the row's min and max
			c.MapperMemoryLimit = uint32(n) << 20
			return err
		}},
	{key: "mapper_max_file_mib", def: "4", modes: mapperModes,
		usage: "largest drop-in module (and fixture) file read, MiB; a larger one is skipped, never compiled",
		parse: func(c *Config, raw string) error {
			n, err := wholeNumber(raw, 1, 256)
			c.MapperMaxFileSize = n << 20
			return err
		}},
	{key: "mapper_call_timeout", def: "250ms", modes: mapperModes, minDur: MinMapperCallTimeout,
		usage: "deadline of one mapper call",
		field: func(c *Config) any { return &c.MapperCallTimeout }},
	{key: "mapper_pool_size", def: "0", modes: mapperModes, min: 0, max: 4096,
		usage: "instances per module at most (0: one per CPU)",
		field: func(c *Config) any { return &c.MapperPoolSize }},
	{key: "mapper_builtin_guard", def: "watched", modes: mapperModes, oneOf: []string{"watched", "always"},
		usage: "how built-in modules run: watched (metered, without termination checks; with MAPPER_METERED=false, watched for a first AMQP delivery: an overrun ends the daemon, and the redelivery runs guarded) or always (termination checks; two to four times the CPU)",
		parse: func(c *Config, raw string) error {
			c.MapperBuiltinGuard = runtime.GuardWatched
			if raw == "always" {
				c.MapperBuiltinGuard = runtime.GuardAlways
			}
			return nil
		}},
	{key: "mapper_metered", def: "true", modes: mapperModes,
		usage: "meter every mapper module: a call that runs more than its budget of instructions fails with reason budget and is dead-lettered, without waiting for its deadline, and no module needs termination checks (docs/abi.md, \"Metering\"); false: drop-in modules run with termination checks and built-in ones watched, as MAPPER_BUILTIN_GUARD says",
		field: func(c *Config) any { return &c.MapperMetered }},
	{key: "mapper_budget", def: strconv.FormatInt(runtime.DefaultBudget, 10), modes: mapperModes, min: MinMapperBudget, max: 1 << 50,
		usage: "instructions a metered mapper call may run (MAPPER_METERED); the default is 100 times the most a built-in module's call needs",
		field: func(c *Config) any { return &c.MapperBudget }},
	{key: "mapper_cache_dir", modes: mapperModes,
		usage: "on-disk compilation cache of mapper modules (default: mapper-cache beside BUFFER_PATH for the daemon, the user's cache directory for the commands; off: none)",
		field: func(c *Config) any { return &c.MapperCacheDir }},
	{key: "debug_pprof", def: "false", modes: daemonOnly,
		usage: "serve Go's profiler under /debug/pprof/ on DEBUG_PPROF_ADDR",
		field: func(c *Config) any { return &c.DebugPprof }},
	{key: "debug_pprof_addr", def: "127.0.0.1:9470", modes: daemonOnly,
		usage: "listen address of the profiler; loopback only (reach it with kubectl port-forward or an SSH tunnel)",
		field: func(c *Config) any { return &c.DebugPprofAddr },
		check: func(c *Config) error { return checkHostPort(c.DebugPprofAddr) }},
	{key: "channel_socket_mode", def: "0660", modes: daemonOnly,
		usage: "file mode of the channel socket, octal: who may connect at all",
		parse: func(c *Config, raw string) error {
			n, err := strconv.ParseUint(raw, 8, 32)
			c.ChannelSocketMode = os.FileMode(n)
			switch {
			case err != nil:
				return fmt.Errorf("%q is not an octal file mode (like 0660)", raw)
			case n&^0o777 != 0:
				return fmt.Errorf("%q has bits beyond 0777", raw)
			case n&0o600 != 0o600:
				return fmt.Errorf("%q does not let the daemon's own user read and write the socket", raw)
			}
			return nil
		}},
	{key: "channel_idle_timeout", def: "60s", modes: daemonOnly, minDur: time.Second,
		usage: "longest wait for a channel client's next frame (and for the rest of a frame begun); clients keep an idle connection open with PING",
		field: func(c *Config) any { return &c.ChannelIdleTimeout }},
	{key: "channel_max_connections_per_uid", def: "16", modes: daemonOnly, min: 1, max: 256,
		usage: "channel connections one uid may hold at once (of 256 in all)",
		field: func(c *Config) any { return &c.ChannelMaxConnsPerUID }},
	{key: "reporting_timeout", def: "30s", modes: daemonOnly, minDur: MinReportingTimeout,
		usage: "deadline of one POST to the Reporting API",
		field: func(c *Config) any { return &c.ReportingTimeout }},
	{key: "stop_timeout", def: "30s", modes: daemonOnly, minDur: MinStopTimeout,
		usage: "budget of a graceful stop, from the signal to the outbox closed",
		field: func(c *Config) any { return &c.StopTimeout }},
	{key: "flush_timeout", def: "10s", modes: daemonOnly, minDur: MinFlushTimeout,
		usage: "part of stop_timeout the sender may spend flushing the outbox",
		field: func(c *Config) any { return &c.FlushTimeout }},
}

func settingByKey(key string) (setting, bool) {
	for _, s := range table {
		if s.key == key {
			return s, true
		}
	}
	return setting{}, false
}

// decode turns the setting's text into its Config field. The error names the
// problem without the setting's name (the caller adds it) and never quotes a
// secret.
func (s setting) decode(c *Config, raw string) error {
	show := raw
	if s.secret {
		show = "…"
	}
	if len(s.oneOf) > 0 {
		raw = strings.ToLower(raw)
		if !slices.Contains(s.oneOf, raw) {
			return fmt.Errorf("%q is not one of %s", show, strings.Join(s.oneOf, ", "))
		}
	}
	if s.parse != nil {
		return s.parse(c, raw)
	}
	switch p := s.field(c).(type) {
	case *string:
		*p = raw
	case *[]string:
		*p = splitList(raw)
	case *bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%q is not true or false", show)
		}
		*p = b
	case *time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 250ms, 30s, 2m)", show)
		}
		*p = d
		switch {
		case d < 0 || d == 0 && !s.zeroOff:
			return fmt.Errorf("must be positive, got %s", show)
		case d != 0 && d < s.minDur:
			return fmt.Errorf("must be at least %s, got %s", s.minDur, show)
		}
	case *int:
		n, err := wholeNumber(raw, s.min, s.max)
		*p = int(n)
		return err
	case *int64:
		n, err := wholeNumber(raw, s.min, s.max)
		*p = n
		return err
	default:
		return fmt.Errorf("setting %s has no decoder for %T", s.key, p)
	}
	return nil
}

// wholeNumber parses raw and checks it against [lo, hi]; hi 0 means no upper
// bound.
func wholeNumber(raw string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(raw, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a whole number", raw)
	case hi > 0 && (n < lo || n > hi):
		return n, fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
	case n < lo:
		return n, fmt.Errorf("must be at least %d, got %d", lo, n)
	}
	return n, nil
}

func splitList(raw string) []string {
	var out []string
	for _, p := range strings.Split(raw, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func notEmpty(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// checkNames accepts a non-empty list of exchange or topic names without AMQP
// wildcards: the service exchanges also carry RPC traffic.
func checkNames(names []string, what string) error {
	if len(names) == 0 {
		return fmt.Errorf("at least one %s is needed", what)
	}
	for _, n := range names {
		if strings.ContainsAny(n, "#*") {
			return fmt.Errorf("%q: wildcards are not allowed (the exchanges also carry RPC traffic)", n)
		}
	}
	return nil
}

// Uses reports whether mode m reads the setting key (an unknown key: false).
func (m Mode) Uses(key string) bool {
	s, ok := settingByKey(key)
	return ok && inMode(m, s.modes...)
}

func inMode(m Mode, ms ...Mode) bool {
	return slices.Contains(ms, m)
}
