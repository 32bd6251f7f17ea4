package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
)

// TestEndToEndChannelCredentialsNeverReachTheAPI: channel messages, a JSON
// one and a STRING one, carry api_key, cookie and Authorization members
// beside an ordinary attribute. Published with the publish command through
// the daemon's socket, both reach the reference Reporting API with the
// ordinary attribute and without any of those values or names.
func TestEndToEndChannelCredentialsNeverReachTheAPI(t *testing.T) {
	b, a, c, sock := newChannelCollector(t)
	c.start(t)
	c.waitReady(t)

	secrets := []string{"ak-e2e-0123456789abcdef", "c00kie-e2e-fedcba9876", "au-e2e-0123456789abcdef"}
	publish := func(stdin string, args ...string) {
		t.Helper()
		if code, out := runPublish(b.collector, sock, stdin, args...); code != 0 {
			t.Fatalf("publish %v: exit %d\n%s", args, code, out)
		}
	}
	publish(`{"id":"sec-json","time":"2026-02-01T10:00:00Z","type":"license.checkout","resource_type":"license",`+
		`"resource_id":"matlab","project_id":"p1","attributes":{"seats":1,"api_key":"ak-e2e-0123456789abcdef",`+
		`"cookie":"session=c00kie-e2e-fedcba9876","Authorization":"Bearer au-e2e-0123456789abcdef"}}`+"\n", "usage.license")
	publish(`id=sec-string type=license.checkout resource_type=license resource_id=matlab project_id=p1 seats=1 `+
		`api_key=ak-e2e-0123456789abcdef cookie="session=c00kie-e2e-fedcba9876" Authorization="Bearer au-e2e-0123456789abcdef"`+"\n",
		"--type", "STRING", "usage.license")
	apiIDsEventually(t, a, "sec-json", "sec-string")

	_, raw := a.events(t)
	for _, s := range secrets {
		if strings.Contains(string(raw), s) {
			t.Errorf("%q reached the Reporting API", s)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev struct {
			EventID    string         `json:"event_id"`
			Attributes map[string]any `json:"attributes"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Attributes["seats"] != 1.0 {
			t.Errorf("%s: the ordinary attribute is missing: %s", ev.EventID, line)
		}
		for k := range ev.Attributes {
			if redact.IsSecretName(k) {
				t.Errorf("%s: attribute %q is named like a credential", ev.EventID, k)
			}
		}
	}
	if tot, _ := c.checkLedger(t); tot.Consumed < 2 || tot.Delivered < 2 {
		t.Errorf("ledger totals %+v, want at least the two published messages consumed and delivered", tot)
	}
}
