package main

import (
	"bytes"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// Members named like a credential by the shared rule (internal/redact) are
// left out of the attributes, in a JSON message and in a STRING message
// alike: api_key, cookie and Authorization as much as password or token.
func TestCredentialMembersAreLeftOut(t *testing.T) {
	secrets := []string{"ak-0123456789abcdef", "session=c00kie-fedcba9876", "Bearer au-0123456789abcdef"}
	for name, in := range map[string]string{
		"json": `{"event_type":"usage.license","channel":{"type":"JSON","published_at":"2026-01-05T10:00:00Z","uid":1000,"gid":1000},` +
			`"message":{"id":"m1","type":"license.checkout","resource_type":"license","resource_id":"r1","project_id":"p1",` +
			`"attributes":{"seats":3,"api_key":"ak-0123456789abcdef","cookie":"session=c00kie-fedcba9876",` +
			`"Authorization":"Bearer au-0123456789abcdef","X-Api-Key":"ak-0123456789abcdef","db_password":"pw-0123456789"}}}`,
		"string": `{"event_type":"usage.license","channel":{"type":"STRING","published_at":"2026-01-05T10:00:00Z","uid":1000,"gid":1000},` +
			`"message":"id=m1 type=license.checkout resource_type=license resource_id=r1 project_id=p1 seats=3 ` +
			`api_key=ak-0123456789abcdef cookie=\"session=c00kie-fedcba9876\" Authorization=\"Bearer au-0123456789abcdef\" ` +
			`X-Api-Key=ak-0123456789abcdef db_password=pw-0123456789"}`,
	} {
		t.Run(name, func(t *testing.T) {
			out, err := mapJSON([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(out, []byte(`"seats":3`)) {
				t.Fatalf("the ordinary attribute is missing: %s", out)
			}
			for _, s := range append(secrets, "pw-0123456789") {
				if bytes.Contains(out, []byte(s)) {
					t.Errorf("%q reached the event: %s", s, out)
				}
			}
			leaks, err := fixture.Leaks([]byte(in), out)
			if err != nil {
				t.Fatal(err)
			}
			if len(leaks) > 0 {
				t.Errorf("credentials copied: %v\n%s", leaks, out)
			}
		})
	}
}
