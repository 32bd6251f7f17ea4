package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
)

// TestWarnSettings: the start logs an unknown variable with the closest
// setting, a missing drop-in directory with its path, and a TLS private key
// that group or others may read, with its setting, as it does for a token
// file; a key file of mode 0600 is not warned about.
func TestWarnSettings(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir, "ca")
	broker := ca.Issue(t, "broker-client", "tally", testkit.CertOptions{})
	api := ca.Issue(t, "api-client", "tally", testkit.CertOptions{})
	if err := os.Chmod(api.KeyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "mappers")
	env := []string{
		"TALLY_OSC_REPORTING_URL=https://tally.example.com", "TALLY_OSC_REPORTING_TOKEN=t",
		"TALLY_OSC_PREFECH=5", "TALLY_OSC_MAPPERS_DIR=" + missing,
		"TALLY_OSC_TRANSPORT_URL=amqps://u:p@broker:5671/",
		"TALLY_OSC_TRANSPORT_CERT_FILE=" + broker.CertFile, "TALLY_OSC_TRANSPORT_KEY_FILE=" + broker.KeyFile,
		"TALLY_OSC_REPORTING_CERT_FILE=" + api.CertFile,
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	settings.AddFlags(fs, nil)
	if err := fs.Parse([]string{"--reporting-key-file", api.KeyFile}); err != nil {
		t.Fatal(err)
	}
	cfg, err := settings.Load(fs, env, settings.ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	WarnSettings(cfg, zerolog.New(&logs))
	all := logs.String()
	var msgs []map[string]string
	for _, l := range strings.Split(strings.TrimSpace(all), "\n") {
		var m map[string]string
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		msgs = append(msgs, m)
	}
	for _, want := range []string{
		"TALLY_OSC_PREFECH is not a setting and is ignored; did you mean TALLY_OSC_PREFETCH?",
		"TALLY_OSC_MAPPERS_DIR: " + missing + " does not exist",
		`"setting":"--reporting-key-file"`,
		`"file":"` + api.KeyFile + `"`,
		"TLS private key file is readable by group or others",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the start's warnings lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, broker.KeyFile) || len(msgs) != 3 {
		t.Errorf("want 3 warnings, none about the 0600 key:\n%s", all)
	}
	for _, m := range msgs {
		if m["level"] != "warn" {
			t.Errorf("not a warning: %v", m)
		}
	}
}

// TestUnauthorizedNamesTheSettings: a 401 of the control routes says which
// settings hold the token, not only which header carries it.
func TestUnauthorizedNamesTheSettings(t *testing.T) {
	guard, err := newControlAuth(tokenfile.Static("right"), false, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(guard.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for _, token := range []string{"", "wrong"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/mappers", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body.Error, "TALLY_OSC_CONTROL_TOKEN_FILE") || !strings.Contains(body.Error, "TALLY_OSC_CONTROL_TOKEN") {
			t.Errorf("token %q: %d %q", token, resp.StatusCode, body.Error)
		}
	}
}
