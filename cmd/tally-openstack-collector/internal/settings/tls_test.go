package settings

import (
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestTLSSettingsChecked: the TLS settings are checked at start, with the
// other problems in one message: files for a link without TLS, a
// certificate without its key, a file that does not exist, a key that does
// not belong to its certificate. The dump checks the broker's alone. No
// key's content reaches the message, and the effective settings show the
// paths.
func TestTLSSettingsChecked(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir, "settings")
	client := ca.Issue(t, "client", "c", testkit.CertOptions{})
	other := ca.Issue(t, "other", "o", testkit.CertOptions{})
	for _, tc := range []struct {
		name  string
		mode  Mode
		env   []string
		wants []string
	}{
		{"broker files without TLS", ModeDaemon, []string{"TALLY_OSC_TRANSPORT_CA_FILE=" + ca.CAFile},
			[]string{"TALLY_OSC_TRANSPORT_CA_FILE", "the URL does not use TLS"}},
		{"dump checks the broker's files", ModeDump, []string{"TALLY_OSC_TRANSPORT_URL=amqps://u:hunter2@h/", "TALLY_OSC_TRANSPORT_CERT_FILE=" + client.CertFile},
			[]string{"go together"}},
		{"a missing CA file and a key of another certificate", ModeDaemon, []string{"TALLY_OSC_TRANSPORT_URL=rabbit://u:hunter2@h1,u:hunter2@h2/?ssl=1",
			"TALLY_OSC_TRANSPORT_CA_FILE=" + dir + "/nope.pem", "TALLY_OSC_TRANSPORT_CERT_FILE=" + client.CertFile, "TALLY_OSC_TRANSPORT_KEY_FILE=" + other.KeyFile},
			[]string{"nope.pem: no such file", "private key does not match public key"}},
		{"reporting files with http", ModeDaemon, []string{"TALLY_OSC_REPORTING_URL=http://api:8080", "TALLY_OSC_REPORTING_TOKEN=x",
			"TALLY_OSC_REPORTING_INSECURE=true", "TALLY_OSC_REPORTING_CA_FILE=" + ca.CAFile},
			[]string{"TALLY_OSC_REPORTING_CA_FILE", "not https"}},
		{"reporting key without certificate", ModeDaemon, append([]string{"TALLY_OSC_REPORTING_KEY_FILE=" + client.KeyFile}, daemonEnv...),
			[]string{"go together"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(parse(t, nil), tc.env, tc.mode)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("a secret in %q", err)
			}
		})
	}
	c, err := Load(parse(t, nil), append([]string{"TALLY_OSC_TRANSPORT_URL=amqps://u:p@h/", "TALLY_OSC_TRANSPORT_CA_FILE=" + ca.CAFile,
		"TALLY_OSC_TRANSPORT_CERT_FILE=" + client.CertFile, "TALLY_OSC_TRANSPORT_KEY_FILE=" + client.KeyFile,
		"TALLY_OSC_REPORTING_CA_FILE=" + ca.CAFile, "TALLY_OSC_REPORTING_CERT_FILE=" + client.CertFile, "TALLY_OSC_REPORTING_KEY_FILE=" + client.KeyFile,
		"TALLY_OSC_TRANSPORT_SERVER_NAME=rabbitmq.internal"}, daemonEnv...), ModeDaemon)
	if err != nil {
		t.Fatal(err)
	}
	if c.TransportTLS.ServerName != "rabbitmq.internal" || c.ReportingTLS.KeyFile != client.KeyFile {
		t.Fatalf("settings not carried: %+v %+v", c.TransportTLS, c.ReportingTLS)
	}
	eff := strings.Join(c.Effective(), "\n")
	if !strings.Contains(eff, "TALLY_OSC_TRANSPORT_KEY_FILE="+client.KeyFile) || strings.Contains(eff, "PRIVATE KEY") {
		t.Errorf("effective settings:\n%s", eff)
	}
}
