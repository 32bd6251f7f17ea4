package settings

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
)

// daemonEnv is the least a daemon needs.
var daemonEnv = []string{
	"TALLY_OSC_REPORTING_URL=https://tally.example.com",
	"TALLY_OSC_REPORTING_TOKEN=s3cret-token",
}

// repo is the repository's root, seen from this package.
const repo = "../../../.."

// parse parses args as the command's flags of the settings.
func parse(t *testing.T, args []string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("tally-openstack-collector", pflag.ContinueOnError)
	AddFlags(fs, nil)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return fs
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := Load(parse(t, nil), daemonEnv, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"TransportURL", c.TransportURL, "amqp://guest:guest@127.0.0.1:5672/"},
		// The seed's four: a cloud without designate, swift, trove or ironic
		// must not see the missing-exchange alert fire for ever (issue 38).
		{"Exchanges", strings.Join(c.Exchanges, ","), "nova,neutron,openstack,glance"},
		{"Topics", strings.Join(c.Topics, ","), "notifications"},
		{"Queue", c.Queue, "tally-notifications"},
		{"QueueType", c.QueueType, "quorum"},
		{"RequireExchanges", c.RequireExchanges, false},
		{"Prefetch", c.Prefetch, 100},
		{"BufferPath", c.BufferPath, "/var/lib/tally-openstack-collector/outbox"},
		{"BufferMaxEvents", c.BufferMaxEvents, int64(1000000)},
		{"BatchMax", c.BatchMax, 500},
		{"ReportingInsecure", c.ReportingInsecure, false},
		{"PlogListeners", len(c.PlogListeners), 0},
		{"UnhealthyThreshold", c.UnhealthyThreshold, 600 * time.Second},
		{"HTTPAddr", c.HTTPAddr, "127.0.0.1:9469"},
		{"MappersDir", c.MappersDir, ""},
		{"LogLevel", c.LogLevel, zerolog.InfoLevel},
		{"LogFormat", c.LogFormat, "auto"},
		{"MapperMemoryLimit", c.MapperMemoryLimit, uint32(64 << 20)},
		{"MapperMaxFileSize", c.MapperMaxFileSize, int64(4 << 20)},
		{"MapperCallTimeout", c.MapperCallTimeout, 250 * time.Millisecond},
		{"MapperPoolSize", c.MapperPoolSize, 0},
		{"MapperBuiltinGuard", c.MapperBuiltinGuard, runtime.GuardWatched},
		{"MapperMetered", c.MapperMetered, true},
		{"MapperBudget", c.MapperBudget, int64(runtime.DefaultBudget)},
		{"ReportingTimeout", c.ReportingTimeout, 30 * time.Second},
		{"StopTimeout", c.StopTimeout, 30 * time.Second},
		{"FlushTimeout", c.FlushTimeout, 10 * time.Second},
		{"ChannelSocket", c.ChannelSocket, ""},
		{"ChannelSocketMode", c.ChannelSocketMode, os.FileMode(0o660)},
		{"ChannelQueueLimitBytes", c.ChannelQueueLimitBytes, int64(1 << 20)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// TestPrecedence: defaults < file < environment < flags, key by key.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", `
prefetch: 10
queue: from-file
queue_type: classic
exchanges: [nova, glance]
batch_max: 7
http_addr: 127.0.0.1:1
`)
	env := append([]string{
		"TALLY_OSC_QUEUE=from-env",
		"TALLY_OSC_BATCH_MAX=8",
		"TALLY_OSC_HTTP_ADDR=127.0.0.1:2",
	}, daemonEnv...)
	c, err := Load(parse(t, []string{"--config", file, "--http-addr", "127.0.0.1:3"}), env, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefetch != 10 || c.QueueType != "classic" {
		t.Errorf("file values lost: prefetch %d queue_type %q", c.Prefetch, c.QueueType)
	}
	if got := strings.Join(c.Exchanges, ","); got != "nova,glance" {
		t.Errorf("a YAML list: exchanges = %q", got)
	}
	if c.Queue != "from-env" || c.BatchMax != 8 {
		t.Errorf("environment must override the file: queue %q batch_max %d", c.Queue, c.BatchMax)
	}
	if c.HTTPAddr != "127.0.0.1:3" {
		t.Errorf("a flag must override the environment: http_addr %q", c.HTTPAddr)
	}
	if c.TransportURL != "amqp://guest:guest@127.0.0.1:5672/" {
		t.Errorf("unset keys keep their default: %q", c.TransportURL)
	}
}

func TestConfigFromEnvironmentVariable(t *testing.T) {
	file := writeFile(t, "c.yaml", "prefetch: 33\n")
	c, err := Load(parse(t, nil), append([]string{"TALLY_OSC_CONFIG=" + file}, daemonEnv...), ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefetch != 33 {
		t.Errorf("TALLY_OSC_CONFIG not read: prefetch %d", c.Prefetch)
	}
}

// TestUnsetFlagDoesNotOverride: a flag left at its default must not hide the
// environment.
func TestUnsetFlagDoesNotOverride(t *testing.T) {
	c, err := Load(parse(t, []string{"--queue", "q"}), append([]string{"TALLY_OSC_PREFETCH=5", "TALLY_OSC_REQUIRE_EXCHANGES=true"}, daemonEnv...), ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefetch != 5 || !c.RequireExchanges || c.Queue != "q" {
		t.Errorf("prefetch %d require %v queue %q", c.Prefetch, c.RequireExchanges, c.Queue)
	}
}

func TestValidation(t *testing.T) {
	tokenFile := writeFile(t, "token", "tok\n")
	emptyFile := writeFile(t, "empty", "\n")
	notDir := writeFile(t, "file.wasm", "")
	cases := []struct {
		name  string
		mode  Mode
		env   []string
		args  []string
		wants []string // every one must appear; none = valid
	}{
		{name: "minimal daemon", mode: ModeDaemon, env: daemonEnv},
		{name: "reporting url required", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{"TALLY_OSC_REPORTING_URL: required"}},
		{name: "http needs insecure", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=http://api:8080", "TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{"must be https"}},
		{name: "http with insecure", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=http://api:8080", "TALLY_OSC_REPORTING_TOKEN=x", "TALLY_OSC_REPORTING_INSECURE=true"}},
		{name: "relative url", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=/api", "TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{"absolute with a host"}},
		{name: "url without host", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https:///x", "TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{"absolute with a host"}},
		{name: "url scheme", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=ftp://h", "TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{`scheme "ftp"`}},
		{name: "url with credentials", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://u:p@h", "TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{"must not carry credentials"}},
		{name: "url with query", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://h/?k=v", "TALLY_OSC_REPORTING_TOKEN=x"},
			wants: []string{"must not carry a query or fragment"}},
		{name: "token missing", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://h"},
			wants: []string{"one is required"}},
		{name: "token and file", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN=x", "TALLY_OSC_REPORTING_TOKEN_FILE=" + tokenFile},
			wants: []string{"both set"}},
		{name: "token file", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN_FILE=" + tokenFile}},
		{name: "token file missing", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN_FILE=/nonexistent/token"},
			wants: []string{"TALLY_OSC_REPORTING_TOKEN_FILE: /nonexistent/token: no such file"}},
		{name: "token file empty", mode: ModeDaemon, env: []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN_FILE=" + emptyFile},
			wants: []string{"is empty"}},
		{name: "numbers", mode: ModeDaemon, env: append([]string{"TALLY_OSC_PREFETCH=0", "TALLY_OSC_BUFFER_MAX_EVENTS=-1", "TALLY_OSC_BATCH_MAX=many", "TALLY_OSC_UNHEALTHY_THRESHOLD_S=0"}, daemonEnv...),
			wants: []string{"TALLY_OSC_PREFETCH: must be between 1 and 65535", "TALLY_OSC_BUFFER_MAX_EVENTS: must be at least 1", `TALLY_OSC_BATCH_MAX: "many" is not a whole number`, "TALLY_OSC_UNHEALTHY_THRESHOLD_S: must be at least 1"}},
		{name: "prefetch too large", mode: ModeDaemon, env: append([]string{"TALLY_OSC_PREFETCH=70000"}, daemonEnv...),
			wants: []string{"between 1 and 65535"}},
		{name: "bool", mode: ModeDaemon, env: append([]string{"TALLY_OSC_REQUIRE_EXCHANGES=yes"}, daemonEnv...),
			wants: []string{`TALLY_OSC_REQUIRE_EXCHANGES: "yes" is not true or false`}},
		{name: "queue type", mode: ModeDaemon, env: append([]string{"TALLY_OSC_QUEUE_TYPE=stream"}, daemonEnv...),
			wants: []string{`"stream" is not one of quorum, classic`}},
		{name: "queue type case", mode: ModeDaemon, env: append([]string{"TALLY_OSC_QUEUE_TYPE=Classic"}, daemonEnv...)},
		{name: "empty exchanges", mode: ModeDaemon, env: append([]string{"TALLY_OSC_EXCHANGES= , "}, daemonEnv...),
			wants: []string{"TALLY_OSC_EXCHANGES: at least one"}},
		{name: "wildcard topic", mode: ModeDaemon, env: append([]string{"TALLY_OSC_TOPICS=notifications,#"}, daemonEnv...),
			wants: []string{"wildcards are not allowed"}},
		{name: "transport scheme", mode: ModeDaemon, env: append([]string{"TALLY_OSC_TRANSPORT_URL=http://u:hunter2@h/"}, daemonEnv...),
			wants: []string{`scheme "http" is not amqp`}},
		{name: "transport multi host needs rabbit", mode: ModeDaemon, env: append([]string{"TALLY_OSC_TRANSPORT_URL=amqp://u:p@h1:5672,u:p@h2:5672/"}, daemonEnv...),
			wants: []string{"several hosts need the rabbit:// form"}},
		{name: "transport rabbit multi host", mode: ModeDaemon, env: append([]string{"TALLY_OSC_TRANSPORT_URL=rabbit://u:p@h1:5672,u:p@h2:5672/vhost"}, daemonEnv...)},
		{name: "transport bad port", mode: ModeDaemon, env: append([]string{"TALLY_OSC_TRANSPORT_URL=amqp://u:p@h:99999/"}, daemonEnv...),
			wants: []string{"the port is not a number"}},
		{name: "transport empty host", mode: ModeDaemon, env: append([]string{"TALLY_OSC_TRANSPORT_URL=amqps://u:p@/"}, daemonEnv...),
			wants: []string{"no host name"}},
		{name: "plog listeners", mode: ModeDaemon, env: append([]string{"TALLY_OSC_PLOG_LISTENERS=udp://127.0.0.1:23456,tcp://127.0.0.1:23457"}, daemonEnv...)},
		{name: "plog listener scheme", mode: ModeDaemon, env: append([]string{"TALLY_OSC_PLOG_LISTENERS=http://127.0.0.1:1,udp://nohost"}, daemonEnv...),
			wants: []string{"scheme must be udp or tcp", "want udp://host:port"}},
		{name: "channel", mode: ModeDaemon, env: append([]string{"TALLY_OSC_CHANNEL_SOCKET=/run/tally/channel.sock", "TALLY_OSC_CHANNEL_SOCKET_MODE=0666", "TALLY_OSC_CHANNEL_QUEUE_LIMIT_BYTES=65536"}, daemonEnv...)},
		{name: "channel problems", mode: ModeDaemon, env: append([]string{"TALLY_OSC_CHANNEL_SOCKET=channel.sock", "TALLY_OSC_CHANNEL_SOCKET_MODE=0888", "TALLY_OSC_CHANNEL_QUEUE_LIMIT_BYTES=100"}, daemonEnv...),
			wants: []string{`TALLY_OSC_CHANNEL_SOCKET: "channel.sock" is not an absolute path`, `TALLY_OSC_CHANNEL_SOCKET_MODE: "0888" is not an octal file mode`, "TALLY_OSC_CHANNEL_QUEUE_LIMIT_BYTES: must be between 4096 and 1073741824"}},
		{name: "channel mode locks the daemon out", mode: ModeDaemon, env: append([]string{"TALLY_OSC_CHANNEL_SOCKET_MODE=0066"}, daemonEnv...),
			wants: []string{"does not let the daemon's own user read and write"}},
		{name: "channel client needs only the channel settings", mode: ModeChannel, env: []string{"TALLY_OSC_CHANNEL_SOCKET=/run/x.sock", "TALLY_OSC_PREFETCH=0"}},
		{name: "channel client checks its settings", mode: ModeChannel, env: []string{"TALLY_OSC_CHANNEL_QUEUE_LIMIT_BYTES=big"},
			wants: []string{`TALLY_OSC_CHANNEL_QUEUE_LIMIT_BYTES: "big" is not a whole number`}},
		{name: "http addr", mode: ModeDaemon, env: append([]string{"TALLY_OSC_HTTP_ADDR=9469"}, daemonEnv...),
			wants: []string{"TALLY_OSC_HTTP_ADDR"}},
		// A missing one is a warning (TestMissingMappersDirIsAWarning).
		{name: "mappers dir missing", mode: ModeDaemon, env: append([]string{"TALLY_OSC_MAPPERS_DIR=/nonexistent/mappers"}, daemonEnv...)},
		{name: "mappers dir is a file", mode: ModeDaemon, env: append([]string{"TALLY_OSC_MAPPERS_DIR=" + notDir}, daemonEnv...),
			wants: []string{"is not a directory"}},
		{name: "log level", mode: ModeDaemon, env: append([]string{"TALLY_OSC_LOG_LEVEL=loud", "TALLY_OSC_LOG_FORMAT=xml"}, daemonEnv...),
			wants: []string{"TALLY_OSC_LOG_LEVEL", "TALLY_OSC_LOG_FORMAT"}},
		{name: "durations", mode: ModeDaemon, env: append([]string{"TALLY_OSC_MAPPER_CALL_TIMEOUT=soon", "TALLY_OSC_STOP_TIMEOUT=-1s"}, daemonEnv...),
			wants: []string{"TALLY_OSC_MAPPER_CALL_TIMEOUT: \"soon\" is not a duration", "TALLY_OSC_STOP_TIMEOUT: must be positive"}},
		{name: "flush within stop", mode: ModeDaemon, env: append([]string{"TALLY_OSC_STOP_TIMEOUT=5s", "TALLY_OSC_FLUSH_TIMEOUT=5s"}, daemonEnv...),
			wants: []string{"must be shorter than"}},
		{name: "flush leaves the inputs a second", mode: ModeDaemon, env: append([]string{"TALLY_OSC_STOP_TIMEOUT=5s", "TALLY_OSC_FLUSH_TIMEOUT=4001ms"}, daemonEnv...),
			wants: []string{"TALLY_OSC_FLUSH_TIMEOUT (4.001s) must be shorter than TALLY_OSC_STOP_TIMEOUT (5s) by at least 1s"}},
		{name: "flush and stop at their least", mode: ModeDaemon, env: append([]string{"TALLY_OSC_STOP_TIMEOUT=2s", "TALLY_OSC_FLUSH_TIMEOUT=1s"}, daemonEnv...)},
		{name: "memory limit", mode: ModeDaemon, env: append([]string{"TALLY_OSC_MAPPER_MEMORY_LIMIT_MIB=0"}, daemonEnv...),
			wants: []string{"TALLY_OSC_MAPPER_MEMORY_LIMIT_MIB"}},
		{name: "mapper file cap zero", mode: ModeDaemon, env: append([]string{"TALLY_OSC_MAPPER_MAX_FILE_MIB=0"}, daemonEnv...),
			wants: []string{"TALLY_OSC_MAPPER_MAX_FILE_MIB: must be between 1 and 256, got 0"}},
		{name: "mapper file cap too large", mode: ModeDaemon, env: append([]string{"TALLY_OSC_MAPPER_MAX_FILE_MIB=257"}, daemonEnv...),
			wants: []string{"TALLY_OSC_MAPPER_MAX_FILE_MIB: must be between 1 and 256, got 257"}},
		{name: "flag value checked too", mode: ModeDaemon, env: daemonEnv, args: []string{"--prefetch", "none"},
			wants: []string{`--prefetch: "none"`}},

		// The dump needs only the AMQP settings.
		{name: "dump without reporting url", mode: ModeDump},
		{name: "dump ignores daemon settings", mode: ModeDump, env: []string{"TALLY_OSC_BATCH_MAX=x", "TALLY_OSC_REPORTING_URL=http://x"}},
		{name: "dump checks amqp", mode: ModeDump, env: []string{"TALLY_OSC_PREFETCH=x", "TALLY_OSC_TRANSPORT_URL=nope"},
			wants: []string{"TALLY_OSC_PREFETCH", "TALLY_OSC_TRANSPORT_URL: not a URL"}},
		// The offline tools need only the mapper settings.
		{name: "offline needs nothing", mode: ModeOffline, env: []string{"TALLY_OSC_TRANSPORT_URL=nope", "TALLY_OSC_PREFETCH=x"}},
		{name: "offline checks mapper settings", mode: ModeOffline, env: []string{"TALLY_OSC_MAPPER_CALL_TIMEOUT=x"},
			wants: []string{"TALLY_OSC_MAPPER_CALL_TIMEOUT"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(parse(t, tc.args), tc.env, tc.mode)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("want *ConfigError, got %v", err)
			}
			msg := err.Error()
			for _, w := range tc.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if len(ce.Problems) < len(tc.wants) {
				t.Errorf("want at least %d problems, got %d: %s", len(tc.wants), len(ce.Problems), msg)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("a password reached the error: %s", msg)
			}
		})
	}
}

// TestEveryProblemAtOnce: one message lists them all.
func TestEveryProblemAtOnce(t *testing.T) {
	env := []string{"TALLY_OSC_PREFETCH=0", "TALLY_OSC_QUEUE_TYPE=x", "TALLY_OSC_HTTP_ADDR=bad", "TALLY_OSC_LOG_LEVEL=x"}
	_, err := Load(parse(t, nil), env, ModeDaemon)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v", err)
	}
	// prefetch, queue type, http addr, log level, reporting url, token
	if len(ce.Problems) != 6 {
		t.Errorf("want 6 problems, got %d:\n%v", len(ce.Problems), err)
	}
}

func TestConfigFileProblems(t *testing.T) {
	file := writeFile(t, "c.yaml", `
prefetch: 10
prefech: 11
exchanges:
  nested: map
`)
	_, err := Load(parse(t, []string{"--config", file}), daemonEnv, ModeDaemon)
	if err == nil || !strings.Contains(err.Error(), `unknown setting "prefech"`) || !strings.Contains(err.Error(), "exchanges must be a value") {
		t.Fatalf("got %v", err)
	}
	_, err = Load(parse(t, []string{"--config", "/nonexistent.yaml"}), daemonEnv, ModeDaemon)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent.yaml") {
		t.Fatalf("a missing file: %v", err)
	}
	bad := writeFile(t, "bad.yaml", "prefetch: [\n")
	if _, err := Load(parse(t, []string{"--config", bad}), daemonEnv, ModeDaemon); err == nil {
		t.Fatal("a broken YAML file was accepted")
	}
}

func TestPlogSection(t *testing.T) {
	file := writeFile(t, "c.yaml", `
plog_listeners: [udp://127.0.0.1:23456, tcp://127.0.0.1:23457]
plog:
  defaults:
    max_line_bytes: 65536
    idle_timeout: 30s
    line_budget_bytes: 8388608
  listeners:
    - address: udp://127.0.0.1:23456
      mappers: [agent]
      defrag_max_age: 5s
      allow_envi: true
`)
	c, err := Load(parse(t, []string{"--config", file}), daemonEnv, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Plog) != 2 {
		t.Fatalf("want 2 listeners, got %+v", c.Plog)
	}
	if c.PlogDefaults.MaxLineBytes != 65536 || c.PlogDefaults.IdleTimeout != 30*time.Second || c.PlogDefaults.LineBudgetBytes != 8<<20 {
		t.Errorf("defaults: %+v", c.PlogDefaults)
	}
	u, tcp := c.Plog[0], c.Plog[1]
	if u.Address != "udp://127.0.0.1:23456" || len(u.Mappers) != 1 || u.Mappers[0] != "agent" ||
		u.Settings.DefragMaxAge != 5*time.Second || u.Settings.AllowENVI == nil || !*u.Settings.AllowENVI || u.Settings.AllowKILL != nil {
		t.Errorf("udp listener: %+v", u)
	}
	if tcp.Address != "tcp://127.0.0.1:23457" || tcp.Settings != (plog.Settings{}) || len(tcp.Mappers) != 0 {
		t.Errorf("tcp listener (inherits everything): %+v", tcp)
	}

	// The environment's list picks the active listeners; details stay from the file.
	c, err = Load(parse(t, []string{"--config", file}), append([]string{"TALLY_OSC_PLOG_LISTENERS=udp://127.0.0.1:23456"}, daemonEnv...), ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Plog) != 1 || c.Plog[0].Settings.DefragMaxAge != 5*time.Second {
		t.Errorf("env list: %+v", c.Plog)
	}

	// Listeners from the file alone.
	file2 := writeFile(t, "c2.yaml", "plog:\n  listeners:\n    - address: tcp://127.0.0.1:1\n")
	c, err = Load(parse(t, []string{"--config", file2}), daemonEnv, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Plog) != 1 || c.Plog[0].Address != "tcp://127.0.0.1:1" {
		t.Errorf("file-only listeners: %+v", c.Plog)
	}
}

func TestPlogSectionProblems(t *testing.T) {
	file := writeFile(t, "c.yaml", `
plog_listeners: [udp://127.0.0.1:1]
plog:
  extra: 1
  defaults:
    colour: blue
  listeners:
    - address: udp://127.0.0.1:1
      max_line_bytes: -1
      idle_timeout: soon
    - address: tcp://127.0.0.1:2
    - mappers: [x]
`)
	_, err := Load(parse(t, []string{"--config", file}), daemonEnv, ModeDaemon)
	if err == nil {
		t.Fatal("accepted")
	}
	testkit.WantAll(t, "the error", err.Error(), `plog: unknown key "extra"`, `plog.defaults: unknown key "colour"`, "must not be negative", "idle_timeout",
		"tcp://127.0.0.1:2 is not in TALLY_OSC_PLOG_LISTENERS", "plog.listeners[2]: address is required")
}

// TestSecretsRedacted: the effective settings never show a token or a broker
// password, whatever the form of the URL.
func TestSecretsRedacted(t *testing.T) {
	env := []string{
		"TALLY_OSC_REPORTING_URL=https://tally.example.com",
		"TALLY_OSC_REPORTING_TOKEN=tok-very-secret",
		"TALLY_OSC_TRANSPORT_URL=rabbit://alice:pw-one@h1:5672,bob:pw/two@h2:5672/vhost",
	}
	c, err := Load(parse(t, nil), env, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(c.Effective(), "\n")
	for _, m := range c.EffectiveMap() {
		all += "\n" + m
	}
	for _, secret := range []string{"tok-very-secret", "pw-one", "pw/two", "two@"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q shown:\n%s", secret, all)
		}
	}
	testkit.WantAll(t, "the settings printed", all, "TALLY_OSC_REPORTING_TOKEN=[redacted]", "rabbit://alice:[redacted]@h1:5672,bob:[redacted]@h2:5672/vhost")
	if c.ReportingToken != "tok-very-secret" {
		t.Error("the token itself must still reach the sender")
	}
}

// TestSettingsDocumented: docs/settings.md names every setting with its default.
func TestSettingsDocumented(t *testing.T) {
	b := testkit.ReadFile(t, repo+"/docs/settings.md")
	doc := string(b)
	for _, s := range table {
		if !strings.Contains(doc, "`"+s.env()+"`") {
			t.Errorf("docs/settings.md lacks %s", s.env())
		}
		if s.def != "" && !strings.Contains(doc, "`"+s.def+"`") {
			t.Errorf("docs/settings.md lacks the default of %s (`%s`)", s.env(), s.def)
		}
	}
}

// TestSettingsTableComplete: every row of the table decodes its own default and
// has a way into Config, so a new setting is a row and a field, nothing more.
func TestSettingsTableComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range table {
		if seen[s.key] {
			t.Errorf("%s listed twice", s.key)
		}
		seen[s.key] = true
		if (s.field == nil) == (s.parse == nil) {
			t.Errorf("%s: want exactly one of field and parse", s.key)
			continue
		}
		if len(s.modes) == 0 {
			t.Errorf("%s: no mode uses it", s.key)
		}
		if s.def == "" {
			continue
		}
		if err := s.decode(&Config{}, s.def); err != nil {
			t.Errorf("%s: its default %q does not decode: %v", s.key, s.def, err)
		}
	}
}

// TestReplicaSettings: REPLICA_NAME defaults to the host name (shown as such
// in the effective settings), a name the control queue cannot carry is
// refused, and an empty CONTROL_EXCHANGE turns the control link off.
func TestReplicaSettings(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(parse(t, nil), daemonEnv, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if c.ReplicaName != host || c.ControlExchange != "tally-collector-control" {
		t.Errorf("defaults: replica %q (host %q), exchange %q", c.ReplicaName, host, c.ControlExchange)
	}
	if !strings.Contains(strings.Join(c.Effective(), "\n"), "TALLY_OSC_REPLICA_NAME="+host) {
		t.Errorf("the effective settings do not show the host name:\n%s", strings.Join(c.Effective(), "\n"))
	}

	env := append(append([]string(nil), daemonEnv...), "TALLY_OSC_REPLICA_NAME=tally-collector-1", "TALLY_OSC_CONTROL_EXCHANGE=")
	c, err = Load(parse(t, nil), env, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if c.ReplicaName != "tally-collector-1" || c.ControlExchange != "" {
		t.Errorf("replica %q, exchange %q", c.ReplicaName, c.ControlExchange)
	}

	for _, bad := range []string{"TALLY_OSC_REPLICA_NAME=pod 1", "TALLY_OSC_CONTROL_EXCHANGE=amq.fanout", "TALLY_OSC_CONTROL_EXCHANGE=a/b"} {
		_, err := Load(parse(t, nil), append(append([]string(nil), daemonEnv...), bad), ModeDaemon)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), strings.SplitN(strings.TrimPrefix(bad, "TALLY_OSC_"), "=", 2)[0]) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// MAPPER_BUILTIN_GUARD: watched by default, always on request, nothing else.
func TestMapperBuiltinGuard(t *testing.T) {
	for raw, want := range map[string]runtime.Guard{"watched": runtime.GuardWatched, "always": runtime.GuardAlways} {
		c, err := Load(parse(t, nil), append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_MAPPER_BUILTIN_GUARD="+raw), ModeDaemon)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if c.MapperBuiltinGuard != want {
			t.Errorf("%s: guard %v, want %v", raw, c.MapperBuiltinGuard, want)
		}
	}
	if _, err := Load(parse(t, nil), append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_MAPPER_BUILTIN_GUARD=never"), ModeDaemon); err == nil {
		t.Fatal("MAPPER_BUILTIN_GUARD=never was accepted")
	}
}

// MAPPER_METERED: on by default, a boolean that turns it off.
func TestMapperMetered(t *testing.T) {
	c, err := Load(parse(t, nil), append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_MAPPER_METERED=false"), ModeDaemon)
	if err != nil || c.MapperMetered {
		t.Fatalf("MAPPER_METERED=false: metered %v, err %v", c != nil && c.MapperMetered, err)
	}
	if _, err := Load(parse(t, nil), append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_MAPPER_METERED=sometimes"), ModeDaemon); err == nil {
		t.Fatal("MAPPER_METERED=sometimes was accepted")
	}
	c, err = Load(parse(t, nil), append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_MAPPER_BUDGET=20000000"), ModeDaemon)
	if err != nil || c.MapperBudget != 20_000_000 {
		t.Fatalf("MAPPER_BUDGET=20000000: %v", err)
	}
	if _, err := Load(parse(t, nil), append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_MAPPER_BUDGET=1000"), ModeDaemon); err == nil {
		t.Fatal("MAPPER_BUDGET=1000 was accepted")
	}
}

// TestWatchdogTimeout: 0 turns the watchdog off, as documented; a timeout
// under a second, or a negative one, is refused.
func TestWatchdogTimeout(t *testing.T) {
	env := func(v string) []string {
		return append(daemonEnv[:len(daemonEnv):len(daemonEnv)], "TALLY_OSC_WATCHDOG_TIMEOUT="+v)
	}
	for raw, want := range map[string]time.Duration{"0": 0, "0s": 0, "2s": 2 * time.Second} {
		c, err := Load(parse(t, nil), env(raw), ModeDaemon)
		if err != nil {
			t.Fatalf("WATCHDOG_TIMEOUT=%s: %v", raw, err)
		}
		if c.WatchdogTimeout != want {
			t.Errorf("WATCHDOG_TIMEOUT=%s: %v, want %v", raw, c.WatchdogTimeout, want)
		}
	}
	for _, raw := range []string{"500ms", "-1s", "soon"} {
		if _, err := Load(parse(t, nil), env(raw), ModeDaemon); err == nil || !strings.Contains(err.Error(), "TALLY_OSC_WATCHDOG_TIMEOUT") {
			t.Errorf("WATCHDOG_TIMEOUT=%s: %v, want an error naming it", raw, err)
		}
	}
}

// TestDocumentedVariablesExist: the other direction of TestSettingsDocumented.
// Every TALLY_OSC_ variable that a page of the docs, the README or an example
// names is a setting of the table, or one that the project's own code or
// scripts read (a test or build switch). A renamed or removed setting thus
// cannot linger in the docs.
func TestDocumentedVariablesExist(t *testing.T) {
	known := map[string]bool{}
	for _, s := range table {
		known[s.env()] = true
	}
	// What the code and the scripts name: Go sources, the Makefile and its
	// parts, the CI scripts, the example scripts.
	var code strings.Builder
	var docs []string
	err := testkit.WalkWorkingTree(repo, func(p string) error {
		name := filepath.Base(p)
		switch {
		case strings.HasSuffix(name, ".md"):
			docs = append(docs, p)
		case strings.HasSuffix(name, ".go"), strings.HasSuffix(name, ".mk"), name == "Makefile",
			strings.HasSuffix(name, ".sh"), strings.HasSuffix(name, ".py"),
			strings.Contains(filepath.ToSlash(p), "/.ci/"):
			b, err := os.ReadFile(p)
			if testkit.Vanished(err) {
				return nil
			}
			if err != nil {
				return err
			}
			code.Write(b)
			code.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d Markdown files: %v", len(docs), docs)
	}
	word := regexp.MustCompile(`\bTALLY_OSC_[A-Z0-9_]*[A-Z0-9]\b`)
	src := code.String()
	for _, p := range docs {
		b := testkit.ReadFile(t, p)
		for _, v := range word.FindAllString(string(b), -1) {
			if known[v] || strings.Contains(src, v) {
				continue
			}
			t.Errorf("%s names %s, which is neither a setting nor read by the code", p, v)
		}
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9469": true, "[::1]:9469": true, "localhost:9469": true, "127.0.0.2:1": true,
		"0.0.0.0:9469": false, ":9469": false, "10.0.0.1:9469": false, "[::]:9469": false, "garbage": false,
	} {
		if got := IsLoopbackAddr(addr); got != want {
			t.Errorf("IsLoopbackAddr(%q) = %v", addr, got)
		}
	}
}

// TestHTTPTokenAndFileAreExclusive: both settings at once is a
// configuration error, named at start.
func TestHTTPTokenAndFileAreExclusive(t *testing.T) {
	fs := parse(t, nil)
	_, err := Load(fs, []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN=t",
		"TALLY_OSC_CONTROL_TOKEN=a", "TALLY_OSC_CONTROL_TOKEN_FILE=/etc/x"}, ModeDaemon)
	if err == nil || !strings.Contains(err.Error(), "TALLY_OSC_CONTROL_TOKEN and TALLY_OSC_CONTROL_TOKEN_FILE are both set") {
		t.Fatalf("both control token settings: %v", err)
	}
}

// TestMinimums: each setting whose small values cannot work refuses a value
// just under its minimum, naming the setting and the minimum (start-up ends
// with status 2), and accepts the minimum itself.
func TestMinimums(t *testing.T) {
	under := func(d time.Duration) string { return (d - time.Millisecond).String() }
	cases := []struct {
		key       string
		under, at string
		want      string // in the refusal, after "TALLY_OSC_<KEY>: "
		mode      Mode
		also      []string // other settings the value needs
	}{
		{key: "REPORTING_TIMEOUT", under: under(MinReportingTimeout), at: MinReportingTimeout.String(), want: "must be at least 1s"},
		{key: "REPORTING_TIMEOUT", under: "1ns", at: "30s", want: "must be at least 1s, got 1ns"},
		{key: "MAPPER_CALL_TIMEOUT", under: under(MinMapperCallTimeout), at: MinMapperCallTimeout.String(), want: "must be at least 50ms"},
		{key: "MAPPER_CALL_TIMEOUT", under: "1ns", at: "250ms", want: "must be at least 50ms, got 1ns", mode: ModeOffline},
		{key: "MAPPER_MEMORY_LIMIT_MIB", under: "7", at: "8", want: "must be between 8 and 4096, got 7"},
		{key: "MAPPER_MEMORY_LIMIT_MIB", under: "1", at: "4096", want: "must be between 8 and 4096, got 1", mode: ModeOffline},
		{key: "FLUSH_TIMEOUT", under: under(MinFlushTimeout), at: MinFlushTimeout.String(), want: "must be at least 1s"},
		{key: "STOP_TIMEOUT", under: under(MinStopTimeout), at: MinStopTimeout.String(), want: "must be at least 2s",
			also: []string{"TALLY_OSC_FLUSH_TIMEOUT=1s"}},
		{key: "WATCHDOG_TIMEOUT", under: under(time.Second), at: "1s", want: "must be at least 1s"},
		{key: "CHANNEL_IDLE_TIMEOUT", under: under(time.Second), at: "1s", want: "must be at least 1s"},
		{key: "UNHEALTHY_THRESHOLD_S", under: "0", at: "1", want: "must be at least 1"},
		{key: "HTTP_MAX_CONNECTIONS", under: "15", at: "16", want: "must be between 16 and 65536, got 15"},
		{key: "HTTP_MAX_CONNECTIONS", under: "65537", at: "65536", want: "must be between 16 and 65536, got 65537"},
		{key: "HTTP_ADDR", under: "127.0.0.1:99999", at: "127.0.0.1:65535", want: `"127.0.0.1:99999": the port is not a number between 0 and 65535`},
		{key: "HTTP_ADDR", under: "127.0.0.1:-1", at: "127.0.0.1:0", want: `"127.0.0.1:-1": the port is not a number between 0 and 65535`},
		{key: "HTTP_ADDR", under: "[::1]:http", at: "[::1]:9469", want: `"[::1]:http": the port is not a number`},
		{key: "DEBUG_PPROF_ADDR", under: "127.0.0.1:70000", at: "127.0.0.1:1", want: `"127.0.0.1:70000": the port is not a number between 0 and 65535`},
	}
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.under, func(t *testing.T) {
			env := func(v string) []string {
				e := append([]string{EnvPrefix + tc.key + "=" + v}, tc.also...)
				if tc.mode == ModeDaemon {
					e = append(e, daemonEnv...)
				}
				return e
			}
			_, err := Load(parse(t, nil), env(tc.under), tc.mode)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("%s=%s: want *ConfigError, got %v", tc.key, tc.under, err)
			}
			if want := EnvPrefix + tc.key + ": " + tc.want; len(ce.Problems) != 1 || !strings.Contains(ce.Problems[0], want) {
				t.Errorf("%s=%s: want the one problem %q, got %q", tc.key, tc.under, want, ce.Problems)
			}
			if _, err := Load(parse(t, nil), env(tc.at), tc.mode); err != nil {
				t.Errorf("%s=%s (at the bound): %v", tc.key, tc.at, err)
			}
		})
	}
}

// TestMinimumsDocumented: docs/settings.md's table of minimums has a row for
// every setting with one, stating the value the code applies.
func TestMinimumsDocumented(t *testing.T) {
	b := testkit.ReadFile(t, repo+"/docs/settings.md")
	doc := string(b)
	_, section, ok := strings.Cut(doc, "\n## Minimums\n")
	if !ok {
		t.Fatal("docs/settings.md has no section \"Minimums\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := 0
	for _, s := range table {
		var least string
		switch {
		case s.minDur > 0:
			least = s.minDur.String()
		case s.min > 0 || s.max > 0:
			least = strconv.FormatInt(s.min, 10)
		default:
			continue
		}
		rows++
		if want := "| `" + s.env() + "` | `" + least + "`"; !strings.Contains(section, want) {
			t.Errorf("docs/settings.md, \"Minimums\": no row %q", want)
		}
	}
	if rows < 15 {
		t.Errorf("only %d settings with a minimum: the table lost its bounds?", rows)
	}
}

// Effective returns every setting as KEY=value lines in table order, secrets
// and broker passwords replaced: what the tests compare --print-config and
// the start-up log with.
func (c *Config) Effective() []string {
	out := make([]string, 0, len(table))
	for _, s := range table {
		out = append(out, s.env()+"="+c.shown(s))
	}
	return out
}
