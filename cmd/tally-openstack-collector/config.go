package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// envPrefix is the prefix of every environment variable the collector reads.
const envPrefix = "TALLY_OSC_"

// redacted replaces a secret wherever settings are shown.
const redacted = "[redacted]"

// mode says what the process is about to do; it decides which settings must be
// valid. The daemon needs all of them, the dump only the AMQP ones, the
// offline tools (map, mapper test) only the mapper ones.
type mode int

const (
	modeDaemon mode = iota
	modeDump
	modeOffline
)

func (m mode) String() string {
	switch m {
	case modeDaemon:
		return "daemon"
	case modeDump:
		return "dump"
	}
	return "offline"
}

type kind int

const (
	kindString kind = iota
	kindInt
	kindBool
	kindList
	kindDuration
)

// setting describes one key: its name in the config file (lower case), in the
// environment (TALLY_OSC_ + upper case) and as a flag (dashes), its default and
// what it means. The table is the single source for defaults, flags, the
// environment, the effective-settings dump and docs/settings.md.
type setting struct {
	key    string
	kind   kind
	def    string
	usage  string
	secret bool // never shown: the value is replaced by [redacted]
	modes  []mode
}

func (s setting) env() string  { return envPrefix + strings.ToUpper(s.key) }
func (s setting) flag() string { return strings.ReplaceAll(s.key, "_", "-") }

var (
	allModes   = []mode{modeDaemon, modeDump, modeOffline}
	amqpModes  = []mode{modeDaemon, modeDump}
	daemonOnly = []mode{modeDaemon}
)

// settings is every key the collector reads. The first block is the contract
// (CONTRACT §2); the rest tunes the packages.
var settings = []setting{
	{key: "transport_url", def: "amqp://guest:guest@127.0.0.1:5672/", modes: amqpModes,
		usage: "broker URL: amqp://, amqps:// or rabbit://user:pass@h1:5672,user:pass@h2:5672/vhost (hosts tried in order); the password is never shown"},
	{key: "exchanges", kind: kindList, def: "nova,neutron,openstack,glance", modes: amqpModes,
		usage: "service exchanges to bind, comma-separated (add octavia where it runs)"},
	{key: "topics", kind: kindList, def: "notifications", modes: amqpModes,
		usage: "oslo notification topics, comma-separated; routing keys are <topic>.<priority>"},
	{key: "queue", def: "tally-notifications", modes: daemonOnly,
		usage: "the collector's own durable queue"},
	{key: "queue_type", def: "quorum", modes: daemonOnly,
		usage: "quorum or classic (classic for RabbitMQ older than 4.0)"},
	{key: "require_exchanges", kind: kindBool, def: "false", modes: amqpModes,
		usage: "consume nothing until every listed exchange exists"},
	{key: "prefetch", kind: kindInt, def: "100", modes: amqpModes,
		usage: "unacknowledged deliveries held at most (basic.qos)"},
	{key: "buffer_path", def: "/var/lib/tally-openstack-collector/outbox", modes: daemonOnly,
		usage: "directory of the outbox (a volume that outlives the process)"},
	{key: "buffer_max_events", kind: kindInt, def: "1000000", modes: daemonOnly,
		usage: "outbox depth at which consumption pauses"},
	{key: "batch_max", kind: kindInt, def: "500", modes: daemonOnly,
		usage: "events per POST to the Reporting API at most"},
	{key: "reporting_url", modes: daemonOnly,
		usage: "base URL of the Reporting API (required by the daemon; https unless reporting_insecure)"},
	{key: "reporting_token", secret: true, modes: daemonOnly,
		usage: "bearer token for the Reporting API (or reporting_token_file)"},
	{key: "reporting_token_file", modes: daemonOnly,
		usage: "file holding the token; re-read when it changes"},
	{key: "reporting_insecure", kind: kindBool, def: "false", modes: daemonOnly,
		usage: "allow a plain http Reporting API URL"},
	{key: "plog_listeners", kind: kindList, modes: daemonOnly,
		usage: "plog-compatible inputs, comma-separated udp://host:port and tcp://host:port (details in the config file's plog section)"},
	{key: "unhealthy_threshold_s", kind: kindInt, def: "600", modes: daemonOnly,
		usage: "seconds of unbroken outbox unusability before /livez fails"},
	{key: "http_addr", def: "127.0.0.1:9469", modes: daemonOnly,
		usage: "listen address of /livez, /readyz and /metrics"},
	{key: "mappers_dir", modes: []mode{modeDaemon, modeOffline},
		usage: "drop-in directory of .wasm mapper modules, on top of the built-in ones"},
	{key: "log_level", def: "info", modes: allModes,
		usage: "trace, debug, info, warn or error"},

	{key: "log_format", def: "auto", modes: allModes,
		usage: "json, console, or auto (console when stderr is a terminal)"},
	{key: "mappers_promote", def: "shadow", modes: []mode{modeDaemon},
		usage: "a new version of an active drop-in module: shadow (runs beside it until promoted) or immediate"},
	{key: "control_token", secret: true, modes: daemonOnly,
		usage: "bearer token of the control routes (promote, abort, replay); without it they are open on a loopback HTTP_ADDR only"},
	{key: "mapper_memory_limit_mib", kind: kindInt, def: "64", modes: []mode{modeDaemon, modeOffline},
		usage: "linear memory per mapper instance, MiB"},
	{key: "mapper_call_timeout", kind: kindDuration, def: "250ms", modes: []mode{modeDaemon, modeOffline},
		usage: "deadline of one mapper call"},
	{key: "mapper_pool_size", kind: kindInt, def: "0", modes: []mode{modeDaemon, modeOffline},
		usage: "instances per module at most (0: one per CPU)"},
	{key: "mapper_cache_dir", modes: []mode{modeDaemon, modeOffline},
		usage: "on-disk compilation cache of mapper modules (empty: none)"},
	{key: "debug_pprof", kind: kindBool, def: "false", modes: daemonOnly,
		usage: "serve Go's profiler under /debug/pprof/ on HTTP_ADDR (keep HTTP_ADDR on loopback)"},
	{key: "reporting_timeout", kind: kindDuration, def: "30s", modes: daemonOnly,
		usage: "deadline of one POST to the Reporting API"},
	{key: "stop_timeout", kind: kindDuration, def: "30s", modes: daemonOnly,
		usage: "budget of a graceful stop, from the signal to the outbox closed"},
	{key: "flush_timeout", kind: kindDuration, def: "10s", modes: daemonOnly,
		usage: "part of stop_timeout the sender may spend flushing the outbox"},
}

func settingByKey(key string) (setting, bool) {
	for _, s := range settings {
		if s.key == key {
			return s, true
		}
	}
	return setting{}, false
}

// Config is the validated, typed configuration. Only cmd reads it; packages get
// options structs built from it.
type Config struct {
	TransportURL     string
	Exchanges        []string
	Topics           []string
	Queue            string
	QueueType        string
	RequireExchanges bool
	Prefetch         int

	BufferPath      string
	BufferMaxEvents int64
	BatchMax        int

	ReportingURL       string
	ReportingToken     string
	ReportingTokenFile string
	ReportingInsecure  bool
	ReportingTimeout   time.Duration

	PlogListeners []string
	Plog          []PlogListener
	PlogDefaults  PlogSettings

	UnhealthyThreshold time.Duration
	HTTPAddr           string
	MappersDir         string
	LogLevel           zerolog.Level
	LogFormat          string

	MappersPromote    catalog.PromoteMode
	ControlToken      string
	MapperMemoryLimit uint32
	MapperCallTimeout time.Duration
	MapperPoolSize    int
	MapperCacheDir    string

	DebugPprof bool

	StopTimeout  time.Duration
	FlushTimeout time.Duration

	// values holds the effective value of every setting as text, for the dump.
	values map[string]string
}

// PlogListener is one plog-compatible input: the address from plog_listeners
// and the details from the config file's plog section. cmd only carries them;
// fields left zero (nil for the switches) take plog.defaults, then the plog
// package's own defaults.
type PlogListener struct {
	// Address is udp://host:port or tcp://host:port.
	Address string
	// Mappers names the modules (manifest name) of the listener's chain, in
	// order; empty: messages are treated as notifications or canonical events.
	Mappers  []string
	Settings PlogSettings
}

// PlogSettings mirror the plog package's per-listener settings; the YAML keys
// are the koanf tags.
type PlogSettings struct {
	ReadBufferBytes int           `koanf:"read_buffer_bytes"`
	DefragMaxBytes  int64         `koanf:"defrag_max_bytes"`
	DefragMaxAge    time.Duration `koanf:"defrag_max_age"`
	HoleDetection   *bool         `koanf:"hole_detection"`
	AllowENVI       *bool         `koanf:"allow_envi"`
	AllowKILL       *bool         `koanf:"allow_kill"`
	MaxLineBytes    int           `koanf:"max_line_bytes"`
	IdleTimeout     time.Duration `koanf:"idle_timeout"`
	MaxConnections  int           `koanf:"max_connections"`
	Workers         int           `koanf:"workers"`
	QueueBytes      int64         `koanf:"queue_bytes"`
	BatchMax        int           `koanf:"batch_max"`
	BatchLinger     time.Duration `koanf:"batch_linger"`
}

var plogKeys = map[string]bool{
	"read_buffer_bytes": true, "defrag_max_bytes": true, "defrag_max_age": true, "hole_detection": true,
	"allow_envi": true, "allow_kill": true, "max_line_bytes": true, "idle_timeout": true,
	"max_connections": true, "workers": true, "queue_bytes": true, "batch_max": true, "batch_linger": true,
}

// ConfigError lists every problem found in the settings.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid settings: " + e.Problems[0]
	}
	return "invalid settings:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// addSettingFlags declares one flag per setting on fs, plus --config.
func addSettingFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "YAML config file (keys as in docs/settings.md); environment and flags override it")
	for _, s := range settings {
		usage := s.usage + " (" + s.env() + ")"
		if s.kind == kindBool {
			fs.Bool(s.flag(), s.def == "true", usage)
			continue
		}
		fs.String(s.flag(), s.def, usage)
	}
}

// loadConfig reads the settings in order: defaults, the YAML file (--config),
// the TALLY_OSC_* variables of environ, then the flags set on fs. It returns
// every problem at once in a *ConfigError.
func loadConfig(fs *pflag.FlagSet, environ []string, m mode) (*Config, error) {
	var problems []string
	k := koanf.New(".")

	defaults := make(map[string]any, len(settings))
	for _, s := range settings {
		defaults[s.key] = s.def
	}
	if err := k.Load(confmap.Provider(defaults, "."), nil); err != nil {
		return nil, fmt.Errorf("load defaults: %w", err)
	}

	path := ""
	if fs != nil {
		path, _ = fs.GetString("config")
	}
	if path == "" {
		path = lookupEnv(environ, envPrefix+"CONFIG")
	}
	var plogSection map[string]any
	if path != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, &ConfigError{Problems: []string{fmt.Sprintf("config file %s: %v", path, err)}}
		}
		top := fk.Raw()
		for key, v := range top {
			if key == "plog" {
				sec, ok := v.(map[string]any)
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: plog must be a mapping", path))
					continue
				}
				plogSection = sec
				continue
			}
			if _, ok := settingByKey(key); !ok {
				problems = append(problems, fmt.Sprintf("%s: unknown setting %q", path, key))
				continue
			}
			if _, isMap := v.(map[string]any); isMap {
				problems = append(problems, fmt.Sprintf("%s: %s must be a value, not a mapping", path, key))
				continue
			}
			if err := k.Set(key, fileValue(v)); err != nil {
				return nil, fmt.Errorf("set %s: %w", key, err)
			}
		}
	}

	envMap := map[string]any{}
	for _, s := range settings {
		if v, ok := lookupEnvOK(environ, s.env()); ok {
			envMap[s.key] = v
		}
	}
	if err := k.Load(confmap.Provider(envMap, "."), nil); err != nil {
		return nil, fmt.Errorf("load environment: %w", err)
	}

	if fs != nil {
		fp := posflag.ProviderWithFlag(fs, ".", nil, func(f *pflag.Flag) (string, any) {
			key := strings.ReplaceAll(f.Name, "-", "_")
			if _, ok := settingByKey(key); !ok || !f.Changed {
				return "", nil
			}
			return key, f.Value.String()
		})
		if err := k.Load(fp, nil); err != nil {
			return nil, fmt.Errorf("load flags: %w", err)
		}
	}

	c := &Config{values: map[string]string{}}
	for _, s := range settings {
		c.values[s.key] = k.String(s.key)
	}
	problems = append(problems, c.decode(m)...)
	listeners, plogDefaults, plogProblems := decodePlog(c.PlogListeners, plogSection)
	c.Plog, c.PlogDefaults = listeners, plogDefaults
	if inMode(m, modeDaemon) {
		problems = append(problems, plogProblems...)
	}
	problems = append(problems, c.validate(m, environ)...)
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return c, nil
}

// fileValue turns a YAML value into the text the environment would carry:
// lists are joined with commas.
func fileValue(v any) string {
	switch t := v.(type) {
	case []any:
		parts := make([]string, 0, len(t))
		for _, e := range t {
			parts = append(parts, fmt.Sprint(e))
		}
		return strings.Join(parts, ",")
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func lookupEnvOK(environ []string, name string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func lookupEnv(environ []string, name string) string {
	v, _ := lookupEnvOK(environ, name)
	return v
}

func inMode(m mode, ms ...mode) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

// decode turns every setting's text into its typed field. A setting that does
// not parse is a problem only in the modes that use it.
func (c *Config) decode(m mode) []string {
	var problems []string
	bad := func(s setting, format string, args ...any) {
		if inMode(m, s.modes...) {
			problems = append(problems, fmt.Sprintf("%s: ", s.env())+fmt.Sprintf(format, args...))
		}
	}
	for _, s := range settings {
		raw := strings.TrimSpace(c.values[s.key])
		var (
			i   int64
			b   bool
			d   time.Duration
			l   []string
			err error
		)
		switch s.kind {
		case kindInt:
			i, err = strconv.ParseInt(raw, 10, 64)
			if err != nil {
				bad(s, "%q is not a whole number", raw)
				continue
			}
		case kindBool:
			b, err = strconv.ParseBool(raw)
			if err != nil {
				bad(s, "%q is not true or false", raw)
				continue
			}
		case kindDuration:
			d, err = time.ParseDuration(raw)
			if err != nil {
				bad(s, "%q is not a duration (like 250ms, 30s, 2m)", raw)
				continue
			}
			if d <= 0 {
				bad(s, "must be positive, got %s", raw)
				continue
			}
		case kindList:
			l = splitList(raw)
		}
		switch s.key {
		case "transport_url":
			c.TransportURL = raw
		case "exchanges":
			c.Exchanges = l
		case "topics":
			c.Topics = l
		case "queue":
			c.Queue = raw
		case "queue_type":
			c.QueueType = strings.ToLower(raw)
		case "require_exchanges":
			c.RequireExchanges = b
		case "prefetch":
			if i < 1 || i > 65535 {
				bad(s, "must be between 1 and 65535, got %d", i)
			}
			c.Prefetch = int(i)
		case "buffer_path":
			c.BufferPath = raw
		case "buffer_max_events":
			if i < 1 {
				bad(s, "must be at least 1, got %d", i)
			}
			c.BufferMaxEvents = i
		case "batch_max":
			if i < 1 || i > 100000 {
				bad(s, "must be between 1 and 100000, got %d", i)
			}
			c.BatchMax = int(i)
		case "reporting_url":
			c.ReportingURL = raw
		case "reporting_token":
			c.ReportingToken = raw
		case "reporting_token_file":
			c.ReportingTokenFile = raw
		case "reporting_insecure":
			c.ReportingInsecure = b
		case "reporting_timeout":
			c.ReportingTimeout = d
		case "plog_listeners":
			c.PlogListeners = l
		case "unhealthy_threshold_s":
			if i < 1 {
				bad(s, "must be at least 1 second, got %d", i)
			}
			c.UnhealthyThreshold = time.Duration(i) * time.Second
		case "http_addr":
			c.HTTPAddr = raw
		case "mappers_dir":
			c.MappersDir = raw
		case "log_level":
			lvl, err := zerolog.ParseLevel(strings.ToLower(raw))
			if err != nil || raw == "" || lvl == zerolog.NoLevel {
				bad(s, "%q is not one of trace, debug, info, warn, error", raw)
				lvl = zerolog.InfoLevel
			}
			c.LogLevel = lvl
		case "log_format":
			switch strings.ToLower(raw) {
			case "auto", "json", "console":
				c.LogFormat = strings.ToLower(raw)
			default:
				bad(s, "%q is not one of auto, json, console", raw)
			}
		case "mapper_memory_limit_mib":
			if i < 1 || i > 4096 {
				bad(s, "must be between 1 and 4096, got %d", i)
			} else {
				c.MapperMemoryLimit = uint32(i) << 20
			}
		case "mapper_call_timeout":
			c.MapperCallTimeout = d
		case "mapper_pool_size":
			if i < 0 {
				bad(s, "must not be negative, got %d", i)
			}
			c.MapperPoolSize = int(i)
		case "mappers_promote":
			pm, err := catalog.ParsePromoteMode(raw)
			if err != nil {
				bad(s, "%q is not shadow or immediate", raw)
			}
			c.MappersPromote = pm
		case "control_token":
			c.ControlToken = raw
		case "mapper_cache_dir":
			c.MapperCacheDir = raw
		case "debug_pprof":
			c.DebugPprof = b
		case "stop_timeout":
			c.StopTimeout = d
		case "flush_timeout":
			c.FlushTimeout = d
		}
	}
	return problems
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

// validate checks the rules between and within settings for mode m.
func (c *Config) validate(m mode, environ []string) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	if inMode(m, amqpModes...) {
		if err := checkTransportURL(c.TransportURL); err != nil {
			add("%sTRANSPORT_URL: %v", envPrefix, err)
		}
		if len(c.Exchanges) == 0 {
			add("%sEXCHANGES: at least one exchange is needed", envPrefix)
		}
		if len(c.Topics) == 0 {
			add("%sTOPICS: at least one topic is needed", envPrefix)
		}
		for _, t := range c.Topics {
			if strings.ContainsAny(t, "#*") {
				add("%sTOPICS: %q: wildcards are not allowed (the exchanges also carry RPC traffic)", envPrefix, t)
			}
		}
	}
	if m != modeDaemon {
		return p
	}
	if c.Queue == "" {
		add("%sQUEUE: must not be empty", envPrefix)
	}
	if c.QueueType != "quorum" && c.QueueType != "classic" {
		add("%sQUEUE_TYPE: %q is not quorum or classic", envPrefix, c.QueueType)
	}
	if c.BufferPath == "" {
		add("%sBUFFER_PATH: must not be empty", envPrefix)
	}
	switch {
	case c.ReportingURL == "":
		add("%sREPORTING_URL: required (the base URL of the Reporting API)", envPrefix)
	default:
		if err := checkReportingURL(c.ReportingURL, c.ReportingInsecure); err != nil {
			add("%sREPORTING_URL: %v", envPrefix, err)
		}
	}
	switch {
	case c.ReportingToken != "" && c.ReportingTokenFile != "":
		add("%sREPORTING_TOKEN and %sREPORTING_TOKEN_FILE are both set: set one", envPrefix, envPrefix)
	case c.ReportingToken == "" && c.ReportingTokenFile == "":
		add("%sREPORTING_TOKEN or %sREPORTING_TOKEN_FILE: one is required", envPrefix, envPrefix)
	case c.ReportingTokenFile != "":
		b, err := os.ReadFile(c.ReportingTokenFile)
		switch {
		case err != nil:
			add("%sREPORTING_TOKEN_FILE: %v", envPrefix, errors.Unwrap(err))
		case strings.TrimSpace(string(b)) == "":
			add("%sREPORTING_TOKEN_FILE: %s is empty", envPrefix, c.ReportingTokenFile)
		}
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		add("%sHTTP_ADDR: %q is not host:port", envPrefix, c.HTTPAddr)
	}
	for _, l := range c.PlogListeners {
		if err := checkListenAddr(l); err != nil {
			add("%sPLOG_LISTENERS: %q: %v", envPrefix, l, err)
		}
	}
	if c.MappersDir != "" {
		if fi, err := os.Stat(c.MappersDir); err != nil {
			add("%sMAPPERS_DIR: %v", envPrefix, errors.Unwrap(err))
		} else if !fi.IsDir() {
			add("%sMAPPERS_DIR: %s is not a directory", envPrefix, c.MappersDir)
		}
	}
	if c.FlushTimeout > 0 && c.StopTimeout > 0 && c.FlushTimeout >= c.StopTimeout {
		add("%sFLUSH_TIMEOUT (%s) must be shorter than %sSTOP_TIMEOUT (%s)", envPrefix, c.FlushTimeout, envPrefix, c.StopTimeout)
	}
	return p
}

// checkTransportURL accepts amqp://, amqps:// and oslo's rabbit:// with one or
// more comma-separated user:pass@host:port. It never quotes the URL back, which
// may carry a password.
func checkTransportURL(raw string) error {
	if raw == "" {
		return errors.New("must not be empty")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return errors.New("not a URL (want amqp://, amqps:// or rabbit://)")
	}
	switch strings.ToLower(scheme) {
	case "amqp", "amqps", "rabbit":
	default:
		return fmt.Errorf("scheme %q is not amqp, amqps or rabbit", scheme)
	}
	hosts, _, _ := splitHosts(rest)
	hosts, _, _ = strings.Cut(hosts, "?")
	if strings.Contains(hosts, ",") && strings.ToLower(scheme) != "rabbit" {
		return errors.New("several hosts need the rabbit:// form")
	}
	for _, h := range strings.Split(hosts, ",") {
		if i := strings.LastIndex(h, "@"); i >= 0 {
			h = h[i+1:]
		}
		if h == "" {
			return errors.New("a host is missing")
		}
		if strings.Contains(h, ":") {
			host, port, err := net.SplitHostPort(h)
			if err != nil || host == "" {
				return errors.New("a host is not host or host:port")
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return errors.New("a port is not a number between 1 and 65535")
			}
		}
	}
	return nil
}

func checkReportingURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if !u.IsAbs() || u.Host == "" || u.Hostname() == "" {
		return errors.New("must be absolute with a host, like https://tally.example.com")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !insecure {
			return fmt.Errorf("must be https (the token travels with every request); set %sREPORTING_INSECURE=true to allow http on a trusted link", envPrefix)
		}
	default:
		return fmt.Errorf("scheme %q is not https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("must not carry credentials: use REPORTING_TOKEN")
	}
	return nil
}

func checkListenAddr(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "udp" && u.Scheme != "tcp" {
		return errors.New("scheme must be udp or tcp")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return errors.New("want udp://host:port or tcp://host:port")
	}
	_ = host
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("port is not a number between 0 and 65535")
	}
	if u.Path != "" && u.Path != "/" {
		return errors.New("no path allowed")
	}
	return nil
}

// decodePlog builds one PlogListener per active address: the addresses of
// plog_listeners, or when that is empty the addresses of the file's
// plog.listeners entries. It also returns plog.defaults.
func decodePlog(active []string, section map[string]any) ([]PlogListener, PlogSettings, []string) {
	var problems []string
	var defaults PlogSettings
	entries := map[string]map[string]any{}
	var order []string
	decode := func(where string, m map[string]any, out *PlogSettings) {
		clean := map[string]any{}
		for k, v := range m {
			switch {
			case k == "address" || k == "mappers":
			case !plogKeys[k]:
				problems = append(problems, fmt.Sprintf("%s: unknown key %q", where, k))
			default:
				clean[k] = v
			}
		}
		if err := decodeStruct(clean, out); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
		}
		v := *out
		if v.ReadBufferBytes < 0 || v.DefragMaxBytes < 0 || v.DefragMaxAge < 0 || v.MaxLineBytes < 0 || v.IdleTimeout < 0 ||
			v.MaxConnections < 0 || v.Workers < 0 || v.QueueBytes < 0 || v.BatchMax < 0 || v.BatchLinger < 0 {
			problems = append(problems, fmt.Sprintf("%s: sizes, counts and durations must not be negative", where))
		}
	}
	if section != nil {
		for key := range section {
			if key != "defaults" && key != "listeners" {
				problems = append(problems, fmt.Sprintf("plog: unknown key %q (want defaults, listeners)", key))
			}
		}
		if d, ok := section["defaults"]; ok {
			dm, ok := d.(map[string]any)
			if !ok {
				problems = append(problems, "plog.defaults must be a mapping")
			}
			if _, has := dm["mappers"]; has {
				problems = append(problems, "plog.defaults: mappers belong to a listener")
			}
			decode("plog.defaults", dm, &defaults)
		}
		if l, ok := section["listeners"]; ok {
			list, ok := l.([]any)
			if !ok {
				problems = append(problems, "plog.listeners must be a list")
			}
			for i, e := range list {
				em, ok := e.(map[string]any)
				if !ok {
					problems = append(problems, fmt.Sprintf("plog.listeners[%d] must be a mapping", i))
					continue
				}
				addr, _ := em["address"].(string)
				if addr == "" {
					problems = append(problems, fmt.Sprintf("plog.listeners[%d]: address is required", i))
					continue
				}
				if _, dup := entries[addr]; dup {
					problems = append(problems, fmt.Sprintf("plog.listeners: %s listed twice", addr))
					continue
				}
				entries[addr] = em
				order = append(order, addr)
			}
		}
	}
	if len(active) == 0 {
		active = order
		for _, a := range active {
			if err := checkListenAddr(a); err != nil {
				problems = append(problems, fmt.Sprintf("plog.listeners: %q: %v", a, err))
			}
		}
	}
	var out []PlogListener
	seen := map[string]bool{}
	for _, addr := range active {
		if seen[addr] {
			problems = append(problems, fmt.Sprintf("plog listener %s listed twice", addr))
			continue
		}
		seen[addr] = true
		l := PlogListener{Address: addr}
		if e, ok := entries[addr]; ok {
			decode("plog listener "+addr, e, &l.Settings)
			if m, ok := e["mappers"]; ok {
				l.Mappers = splitList(fileValue(m))
			}
		}
		out = append(out, l)
	}
	for _, addr := range order {
		if !seen[addr] {
			problems = append(problems, fmt.Sprintf("plog.listeners: %s is not in %sPLOG_LISTENERS", addr, envPrefix))
		}
	}
	return out, defaults, problems
}

// decodeStruct decodes a YAML mapping into a struct by koanf tags, with
// durations as text ("10s").
func decodeStruct(m map[string]any, out any) error {
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
		return err
	}
	return k.UnmarshalWithConf("", out, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: &mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.StringToTimeDurationHookFunc(),
		Result:           out,
		WeaklyTypedInput: true,
	}})
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Effective returns every setting as KEY=value lines in table order, secrets
// and broker passwords replaced, for the start-up log and --print-config.
func (c *Config) Effective() []string {
	out := make([]string, 0, len(settings))
	for _, s := range settings {
		out = append(out, s.env()+"="+c.shown(s))
	}
	return out
}

// EffectiveMap is Effective as a map, for a structured log line.
func (c *Config) EffectiveMap() map[string]string {
	out := make(map[string]string, len(settings))
	for _, s := range settings {
		out[s.key] = c.shown(s)
	}
	return out
}

func (c *Config) shown(s setting) string {
	v := c.values[s.key]
	switch {
	case s.secret && v != "":
		return redacted
	case s.key == "transport_url":
		return redactTransportURL(v)
	}
	return v
}

// redactTransportURL replaces the password of every host of a broker URL.
func redactTransportURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") {
			return redacted
		}
		return raw
	}
	hosts, tail, hasTail := splitHosts(rest)
	parts := strings.Split(hosts, ",")
	for i, h := range parts {
		at := strings.LastIndex(h, "@")
		if at < 0 {
			continue
		}
		if user, _, hasPass := strings.Cut(h[:at], ":"); hasPass {
			parts[i] = user + ":" + redacted + h[at:]
		}
	}
	out := scheme + "://" + strings.Join(parts, ",")
	if hasTail {
		out += "/" + tail
	}
	return out
}

// settingsKeys returns the keys in alphabetical order (docs and tests).
func settingsKeys() []string {
	keys := make([]string, 0, len(settings))
	for _, s := range settings {
		keys = append(keys, s.key)
	}
	sort.Strings(keys)
	return keys
}

// splitHosts splits what follows "scheme://" into the host list and the rest.
// The host list ends at the first slash after the last '@', so a slash in a
// password does not end it early.
func splitHosts(rest string) (hosts, tail string, hasTail bool) {
	from := max(strings.LastIndex(rest, "@"), 0)
	i := strings.Index(rest[from:], "/")
	if i < 0 {
		return rest, "", false
	}
	return rest[:from+i], rest[from+i+1:], true
}
