// Package settings reads the collector's configuration: the table of every
// setting (its default, flag, environment variable, decoding and checks), the
// order of the sources (defaults, the --config file, TALLY_OSC_* variables,
// flags), the rules between settings, and the effective settings with secrets
// redacted (docs/settings.md). It sits under the command because only the
// command reads configuration: the daemon turns a Config into the options of
// each package.
package settings

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
)

// redacted replaces a secret wherever settings are shown.
const redacted = redact.Marker

// Config is the validated, typed configuration. Only the command reads it;
// the daemon builds each package's options from it.
type Config struct {
	TransportURL     string
	Exchanges        []string
	Topics           []string
	Queue            string
	QueueType        string
	RequireExchanges bool
	Prefetch         int
	// TransportTLS: TRANSPORT_CA_FILE, TRANSPORT_CERT_FILE,
	// TRANSPORT_KEY_FILE, TRANSPORT_SERVER_NAME.
	TransportTLS tlsfiles.Files

	BufferPath      string
	BufferMaxEvents int64
	BatchMax        int

	DeadLetterMaxEvents int64
	DeadLetterMaxBytes  int64
	LedgerRetentionDays int

	DeadLetterUndeliverableMaxEvents int64
	DeadLetterUndeliverableMaxBytes  int64

	ReportingURL       string
	ReportingToken     string
	ReportingTokenFile string
	ReportingInsecure  bool
	ReportingTimeout   time.Duration
	// ReportingTLS: REPORTING_CA_FILE, REPORTING_CERT_FILE,
	// REPORTING_KEY_FILE.
	ReportingTLS tlsfiles.Files

	PlogListeners []string
	Plog          []PlogListener
	PlogDefaults  plog.Settings

	ChannelSocket          string
	ChannelSocketMode      os.FileMode
	ChannelQueueLimitBytes int64
	ChannelIdleTimeout     time.Duration
	ChannelMaxConnsPerUID  int

	UnhealthyThreshold time.Duration
	HTTPAddr           string
	// HTTPMaxConnections bounds the HTTP server's open connections; an
	// eighth of them is kept for the probes.
	HTTPMaxConnections int
	MappersDir         string
	LogLevel           zerolog.Level
	LogFormat          string

	// WatchdogTimeout is how long the watchdog process waits for a
	// heartbeat before it kills the daemon (the daemon's watchdog); 0: no watchdog.
	WatchdogTimeout time.Duration

	MappersPromote    catalog.PromoteMode
	ReplicaName       string
	ControlExchange   string
	ControlToken      string
	ControlTokenFile  string
	MapperMemoryLimit uint32
	// MapperMaxFileSize is the largest drop-in module file read, in bytes
	// (catalog.Options.MaxFileSize).
	MapperMaxFileSize int64
	MapperCallTimeout time.Duration
	MapperPoolSize    int
	MapperCacheDir    string
	// MapperBuiltinGuard is how the built-in modules run: runtime.GuardWatched
	// (the default: unguarded when MapperMetered, watched otherwise) or
	// runtime.GuardAlways.
	MapperBuiltinGuard runtime.Guard
	// MapperMetered runs every module metered (runtime.Config.Metered; the
	// default): a runaway spends its budget and fails with reason budget.
	MapperMetered bool
	// MapperBudget is the budget of a metered call, in instructions
	// (runtime.Config.Budget).
	MapperBudget int64

	DebugPprof     bool
	DebugPprofAddr string

	StopTimeout  time.Duration
	FlushTimeout time.Duration

	// values holds the effective value of every setting as text, for the dump.
	values map[string]string
	// from says where each setting's value came from: fromFile, fromEnv,
	// fromFlag; absent: the default. file is the --config file's path.
	from map[string]string
	file string
	// warnings are what Load found wrong but not fatal (Warnings).
	warnings []string
}

// Where a setting's value came from, in Config.from.
const (
	fromFile = "file"
	fromEnv  = "env"
	fromFlag = "flag"
)

// Warnings are what the settings hold that is suspicious but does not stop
// a start: a TALLY_OSC_* variable that names no setting (with the closest
// one), a drop-in directory that does not exist yet. The daemon logs them at
// start; --print-config prints them on standard error.
func (c *Config) Warnings() []string { return c.warnings }

// name is the setting as the user gave it, for a problem: --flag when the
// value came from a flag, "FILE: key" from the config file, the environment
// variable otherwise.
func (c *Config) name(s setting) string {
	switch c.from[s.key] {
	case fromFlag:
		return "--" + s.flag()
	case fromFile:
		return c.file + ": " + s.key
	}
	return s.env()
}

// NameOf is the setting key as the user gave it: --flag, "FILE: key" or
// the TALLY_OSC_ variable (by default, the variable).
func (c *Config) NameOf(key string) string { return c.nameOf(key) }

// nameOf is name by key.
func (c *Config) nameOf(key string) string {
	s, _ := settingByKey(key)
	return c.name(s)
}

// namesOf names a group of settings, each as it was given.
func (c *Config) namesOf(keys ...string) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = c.nameOf(k)
	}
	return strings.Join(names, ", ")
}

// ConfigError lists every problem found in the settings.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid settings: " + e.Problems[0]
	}
	return "invalid settings:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// AddFlags declares one flag per setting on fs, plus --config. The usage
// lists the flags of the settings show accepts (by key) and hides the others;
// a nil show lists them all.
func AddFlags(fs *pflag.FlagSet, show func(key string) bool) {
	fs.String("config", "", "YAML config file (keys as in docs/settings.md); environment and flags override it")
	for _, s := range table {
		usage := s.usage + " (" + s.env() + ")"
		if s.isBool() {
			fs.Bool(s.flag(), s.def == "true", usage)
		} else {
			fs.String(s.flag(), s.def, usage)
			typeFlag(fs, s)
		}
		if show != nil && !show(s.key) {
			_ = fs.MarkHidden(s.flag())
		}
	}
}

// FlagName is the flag of the setting key: its dashes for underscores.
func FlagName(key string) string { return setting{key: key}.flag() }

// Load reads the settings in order: defaults, the YAML file (--config),
// the TALLY_OSC_* variables of environ, then the flags set on fs. It returns
// every problem at once in a *ConfigError.
func Load(fs *pflag.FlagSet, environ []string, m Mode) (*Config, error) {
	c, problems, err := load(fs, environ, m)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return c, nil
}

// load is Load, answering the settings as far as they could be decoded
// beside the problems found; err only when nothing could be read.
func load(fs *pflag.FlagSet, environ []string, m Mode) (*Config, []string, error) {
	var problems []string
	from := map[string]string{}
	k := koanf.New(".")

	defaults := make(map[string]any, len(table))
	for _, s := range table {
		defaults[s.key] = s.def
	}
	if err := k.Load(confmap.Provider(defaults, "."), nil); err != nil {
		return nil, nil, fmt.Errorf("load defaults: %w", err)
	}

	path := ""
	if fs != nil {
		path, _ = fs.GetString("config")
	}
	if path == "" {
		path = LookupEnv(environ, EnvPrefix+"CONFIG")
	}
	var plogSection map[string]any
	if path != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, nil, &ConfigError{Problems: []string{fmt.Sprintf("config file %s: %v", path, err)}}
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
				problems = append(problems, unknownKey(path, key))
				continue
			}
			if _, isMap := v.(map[string]any); isMap {
				problems = append(problems, fmt.Sprintf("%s: %s must be a value, not a mapping", path, key))
				continue
			}
			if err := k.Set(key, fileValue(v)); err != nil {
				return nil, nil, fmt.Errorf("set %s: %w", key, err)
			}
			from[key] = fromFile
		}
	}

	envMap := map[string]any{}
	for _, s := range table {
		if v, ok := lookupEnvOK(environ, s.env()); ok {
			envMap[s.key] = v
			from[s.key] = fromEnv
		}
	}
	if err := k.Load(confmap.Provider(envMap, "."), nil); err != nil {
		return nil, nil, fmt.Errorf("load environment: %w", err)
	}

	if fs != nil {
		fp := posflag.ProviderWithFlag(fs, ".", nil, func(f *pflag.Flag) (string, any) {
			key := strings.ReplaceAll(f.Name, "-", "_")
			if _, ok := settingByKey(key); !ok || !f.Changed {
				return "", nil
			}
			from[key] = fromFlag
			return key, f.Value.String()
		})
		if err := k.Load(fp, nil); err != nil {
			return nil, nil, fmt.Errorf("load flags: %w", err)
		}
	}

	c := &Config{values: map[string]string{}, from: from, file: path, warnings: unknownVariables(environ)}
	for _, s := range table {
		c.values[s.key] = k.String(s.key)
	}
	problems = append(problems, c.decode(m)...)
	listeners, plogDefaults, plogProblems := decodePlog(c.PlogListeners, plogSection)
	c.Plog, c.PlogDefaults = listeners, plogDefaults
	if inMode(m, ModeDaemon) {
		problems = append(problems, plogProblems...)
	}
	problems = append(problems, c.validate(m)...)
	if m == ModeDaemon {
		if w := c.mappersDirWarning(); w != "" {
			c.warnings = append(c.warnings, w)
		}
	}
	return c, problems, nil
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

func LookupEnv(environ []string, name string) string {
	v, _ := lookupEnvOK(environ, name)
	return v
}

// decode turns every setting's text into its typed field and checks each value
// on its own. A problem counts only in the modes that use the setting.
func (c *Config) decode(m Mode) []string {
	var problems []string
	for _, s := range table {
		if !inMode(m, s.modes...) {
			// Decoded all the same, so the offline tools see defaults; errors
			// of a setting the mode does not use are not its problem.
			_ = s.decode(c, strings.TrimSpace(c.values[s.key]))
			continue
		}
		err := s.decode(c, strings.TrimSpace(c.values[s.key]))
		if err == nil && s.check != nil {
			err = s.check(c)
		}
		var several interface{ Unwrap() []error }
		switch {
		case errors.As(err, &several):
			for _, e := range several.Unwrap() {
				problems = append(problems, c.name(s)+": "+e.Error())
			}
		case err != nil:
			problems = append(problems, c.name(s)+": "+err.Error())
		}
	}
	return problems
}

// A NamedPath is a file setting: the name the user gave it (Config.name)
// and its path.
type NamedPath struct{ Setting, Path string }

// KeyFiles answers the private key files set (the TLS client keys), for the
// same mode warning the token files get (tokenfile.WarnExposed).
func (c *Config) KeyFiles() []NamedPath {
	var out []NamedPath
	for _, s := range table {
		if p := c.values[s.key]; s.privateKey && p != "" {
			out = append(out, NamedPath{Setting: c.name(s), Path: p})
		}
	}
	return out
}

// EffectiveMap is Effective as a map, for a structured log line.
func (c *Config) EffectiveMap() map[string]string {
	out := make(map[string]string, len(table))
	for _, s := range table {
		out[s.key] = c.shown(s)
	}
	return out
}

func (c *Config) shown(s setting) string {
	v := c.values[s.key]
	switch {
	case s.secret && v != "":
		return redacted
	case s.key == "transport_url" || s.key == "reporting_url":
		return redact.URL(v)
	}
	return v
}

// An Inspection is the effective settings with what is wrong with them, for
// --print-config.
type Inspection struct {
	// Lines are Effective's KEY=value lines; a setting with a problem has it
	// after its value, "  # missing: ..." when it is required and not set,
	// "  # invalid: ..." otherwise. The problems that belong to no single
	// setting follow as "# invalid: ..." lines.
	Lines []string
	// Problems are every problem, as Load would report them: the daemon
	// refuses to start while there is one.
	Problems []string
	// Warnings are Config.Warnings.
	Warnings []string
}

// Inspect reads the settings as Load does for mode m, but answers them even
// when some are missing or invalid, each problem marked on the line of its
// setting. The error is for settings that could not be read at all (an
// unreadable config file).
func Inspect(fs *pflag.FlagSet, environ []string, m Mode) (*Inspection, error) {
	c, problems, err := load(fs, environ, m)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Problems: problems, Warnings: c.warnings}
	marks := make(map[string][]string, len(problems))
	for _, p := range problems {
		s, ok := c.settingOf(p)
		if !ok {
			continue
		}
		kind := "invalid"
		if c.values[s.key] == "" && strings.Contains(p, "required") {
			kind = "missing"
		}
		marks[s.key] = append(marks[s.key], kind+": "+p)
	}
	for _, s := range table {
		line := s.env() + "=" + c.shown(s)
		for _, mk := range marks[s.key] {
			line += "  # " + mk
		}
		in.Lines = append(in.Lines, line)
	}
	for _, p := range problems {
		if _, ok := c.settingOf(p); !ok {
			in.Lines = append(in.Lines, "# invalid: "+p)
		}
	}
	return in, nil
}

// settingOf is the setting a problem begins with (by any of its names:
// the variable, --flag, "FILE: key"), when it begins with one.
func (c *Config) settingOf(problem string) (setting, bool) {
	for _, s := range table {
		for _, n := range []string{c.name(s), s.env()} {
			rest, ok := strings.CutPrefix(problem, n)
			if ok && rest != "" && strings.ContainsRune(":, ", rune(rest[0])) {
				return s, true
			}
		}
	}
	return setting{}, false
}
