package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestUnknownVariableWarns: a misspelt TALLY_OSC_* variable is a warning that
// names the closest setting, never a refusal; the program's own variables
// and the settings are not warned about.
func TestUnknownVariableWarns(t *testing.T) {
	env := append([]string{
		"TALLY_OSC_PREFECH=5",
		"TALLY_OSC_prefetch=6",
		"TALLY_OSC_COMPLETELY_DIFFERENT_THING=1",
		"TALLY_OSC_CONFIG=",
		"TALLY_OSC_QUEUE=q",
		"OTHER_PREFECH=1",
	}, daemonEnv...)
	c, err := Load(parse(t, nil), env, ModeDaemon)
	if err != nil {
		t.Fatalf("an unknown variable must not refuse the start: %v", err)
	}
	got := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{
		"TALLY_OSC_PREFECH is not a setting and is ignored; did you mean TALLY_OSC_PREFETCH?",
		"TALLY_OSC_prefetch is not a setting and is ignored; did you mean TALLY_OSC_PREFETCH?",
		"TALLY_OSC_COMPLETELY_DIFFERENT_THING is not a setting and is ignored; no setting is close (the nearest is TALLY_OSC_",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if len(c.Warnings()) != 3 {
		t.Errorf("want 3 warnings, got:\n%s", got)
	}
	if c.Prefetch != 100 {
		t.Errorf("a misspelt variable must be ignored: prefetch %d", c.Prefetch)
	}
}

// TestUnknownKeyInFileIsAnError: the config file belongs to the program, so
// an unknown key there stops the start, with the closest key.
func TestUnknownKeyInFileIsAnError(t *testing.T) {
	file := writeFile(t, "c.yaml", "prefech: 5\n")
	_, err := Load(parse(t, []string{"--config", file}), daemonEnv, ModeDaemon)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `unknown setting "prefech"; did you mean prefetch?`) {
		t.Fatalf("got %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "", 3}, {"PREFECH", "PREFETCH", 1}, {"kitten", "sitting", 3}, {"QUEUE", "QUEUE", 0}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestProblemsNameWhatTheUserTyped: a value from a flag is reported under
// the flag, from the file under the file's key, from the environment under
// the variable.
func TestProblemsNameWhatTheUserTyped(t *testing.T) {
	file := writeFile(t, "c.yaml", "batch_max: lots\n")
	_, err := Load(parse(t, []string{"--config", file, "--prefetch", "none"}), append([]string{"TALLY_OSC_QUEUE_TYPE=stream"}, daemonEnv...), ModeDaemon)
	msg := err.Error()
	testkit.WantAll(t, "the error", msg, `--prefetch: "none" is not a whole number`, file+`: batch_max: "lots" is not a whole number`, `TALLY_OSC_QUEUE_TYPE: "stream"`)
	if strings.Contains(msg, "TALLY_OSC_PREFETCH") || strings.Contains(msg, "TALLY_OSC_BATCH_MAX") {
		t.Errorf("a flag or a file key reported under its variable:\n%s", msg)
	}
	// The rules between settings name them the same way.
	_, err = Load(parse(t, []string{"--stop-timeout", "5s", "--debug-pprof", "--debug-pprof-addr", "0.0.0.0:9470"}),
		append([]string{"TALLY_OSC_FLUSH_TIMEOUT=5s", "TALLY_OSC_CONTROL_TOKEN=x", "TALLY_OSC_CONTROL_TOKEN_FILE=/x"}, daemonEnv...), ModeDaemon)
	msg = err.Error()
	testkit.WantAll(t, "the error", msg, "TALLY_OSC_FLUSH_TIMEOUT (5s) must be shorter than --stop-timeout (5s)", "--debug-pprof-addr (0.0.0.0:9470) must be a loopback address",
		"TALLY_OSC_CONTROL_TOKEN and TALLY_OSC_CONTROL_TOKEN_FILE are both set")
}

// TestTokenFileProblemNamesThePath: a token file that cannot be read is
// reported with its path.
func TestTokenFileProblemNamesThePath(t *testing.T) {
	env := []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN_FILE=/nonexistent/reporting-token", "TALLY_OSC_CONTROL_TOKEN_FILE=/nonexistent/control-token"}
	_, err := Load(parse(t, nil), env, ModeDaemon)
	msg := err.Error()
	testkit.WantAll(t, "the error", msg, "TALLY_OSC_REPORTING_TOKEN_FILE: /nonexistent/reporting-token: no such file", "TALLY_OSC_CONTROL_TOKEN_FILE: /nonexistent/control-token: no such file")
}

// TestMissingMappersDirIsAWarning: the daemon starts without its drop-in
// directory (the built-ins serve; the directory is read when it appears),
// with a warning naming the path; a path that is not a directory is refused,
// named.
func TestMissingMappersDirIsAWarning(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-yet", "mappers")
	c, err := Load(parse(t, nil), append([]string{"TALLY_OSC_MAPPERS_DIR=" + missing}, daemonEnv...), ModeDaemon)
	if err != nil {
		t.Fatalf("a missing drop-in directory must not stop the daemon: %v", err)
	}
	if got := strings.Join(c.Warnings(), "\n"); !strings.Contains(got, "TALLY_OSC_MAPPERS_DIR: "+missing+" does not exist: the built-in mappers serve") {
		t.Errorf("warnings: %q", got)
	}
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(parse(t, nil), append([]string{"TALLY_OSC_MAPPERS_DIR=" + missing}, daemonEnv...), ModeDaemon); err != nil || len(c.Warnings()) != 0 {
		t.Errorf("an existing directory: %v %q", err, c.Warnings())
	}
	notDir := writeFile(t, "m.wasm", "")
	_, err = Load(parse(t, []string{"--mappers-dir", notDir}), daemonEnv, ModeDaemon)
	if err == nil || !strings.Contains(err.Error(), "--mappers-dir: "+notDir+" is not a directory") {
		t.Errorf("a file as the directory: %v", err)
	}
}

// TestInspectMarksProblems: --print-config's view shows every setting even
// when the daemon could not start, marking what is missing or invalid on its
// line, secrets still redacted.
func TestInspectMarksProblems(t *testing.T) {
	env := []string{"TALLY_OSC_CONTROL_TOKEN=ctl-secret-1", "TALLY_OSC_TRANSPORT_URL=amqp://u:pw-secret-2@h:5672/", "TALLY_OSC_PREFECH=3"}
	in, err := Inspect(parse(t, []string{"--prefetch", "0"}), env, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Join(in.Lines, "\n")
	if len(in.Lines) < len(table) {
		t.Fatalf("%d lines for %d settings:\n%s", len(in.Lines), len(table), out)
	}
	for _, want := range []string{
		"\nTALLY_OSC_REPORTING_URL=  # missing: TALLY_OSC_REPORTING_URL: required",
		"\nTALLY_OSC_REPORTING_TOKEN=  # missing: TALLY_OSC_REPORTING_TOKEN or TALLY_OSC_REPORTING_TOKEN_FILE: one is required",
		"\nTALLY_OSC_PREFETCH=0  # invalid: --prefetch: must be between 1 and 65535, got 0",
		"\nTALLY_OSC_CONTROL_TOKEN=" + redacted + "\n",
		"\nTALLY_OSC_QUEUE=tally-notifications\n",
	} {
		if !strings.Contains("\n"+out+"\n", want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"ctl-secret-1", "pw-secret-2"} {
		if strings.Contains(out, secret) {
			t.Errorf("%s shown:\n%s", secret, out)
		}
	}
	if len(in.Problems) != 3 {
		t.Errorf("problems: %q", in.Problems)
	}
	if len(in.Warnings) != 1 || !strings.Contains(in.Warnings[0], "TALLY_OSC_PREFETCH?") {
		t.Errorf("warnings: %q", in.Warnings)
	}
	// Valid settings: no mark at all, the lines of Effective.
	c, err := Load(parse(t, nil), daemonEnv, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	in, err = Inspect(parse(t, nil), daemonEnv, ModeDaemon)
	if err != nil || strings.Join(in.Lines, "\n") != strings.Join(c.Effective(), "\n") || len(in.Problems) != 0 {
		t.Errorf("valid settings: %v %q", err, in.Problems)
	}
}

// TestKeyFiles: every private key setting is listed for the mode warning, by
// the name the user gave it.
func TestKeyFiles(t *testing.T) {
	for _, s := range table {
		if strings.HasSuffix(s.key, "_key_file") != s.privateKey {
			t.Errorf("%s: privateKey %v", s.key, s.privateKey)
		}
	}
	c, _, err := load(parse(t, []string{"--reporting-key-file", "/k/reporting.key"}), []string{"TALLY_OSC_TRANSPORT_KEY_FILE=/k/transport.key"}, ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	got := c.KeyFiles()
	want := []NamedPath{{"TALLY_OSC_TRANSPORT_KEY_FILE", "/k/transport.key"}, {"--reporting-key-file", "/k/reporting.key"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("KeyFiles = %v, want %v", got, want)
	}
}

// TestTLSProblemsNameWhatTheUserTyped: a problem of a group of TLS settings
// names each member of the group as it was given (here a flag).
func TestTLSProblemsNameWhatTheUserTyped(t *testing.T) {
	_, err := Load(parse(t, []string{"--reporting-ca-file", "/nonexistent/ca.pem"}), daemonEnv, ModeDaemon)
	if err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "--reporting-ca-file, TALLY_OSC_REPORTING_CERT_FILE, TALLY_OSC_REPORTING_KEY_FILE: ") {
		t.Errorf("the TLS problem does not name the flag given:\n%s", msg)
	}
	if strings.Contains(msg, "TALLY_OSC_REPORTING_CA_FILE") {
		t.Errorf("a flag reported under its variable:\n%s", msg)
	}
}
