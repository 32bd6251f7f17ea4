// Package systemd holds the systemd unit and its environment file; its test
// holds them to each other and to docs/settings.md.
package systemd

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// Every secret a setting names by file (a token, a private key) reaches the
// unit's dynamic user as a credential: a LoadCredential= and the setting at
// %d/<name>, both active or both commented out; the environment file sets
// none of them, since the dynamic user could not own the file.
func TestSecretFilesAreCredentials(t *testing.T) {
	unit := testkit.ReadFile(t, "tally-openstack-collector.service")
	env := testkit.ReadFile(t, "env.example")
	settings := testkit.ReadFile(t, "../../docs/settings.md")
	secrets := map[string]bool{}
	for _, s := range regexp.MustCompile(`TALLY_OSC_[A-Z_]*(KEY|TOKEN)_FILE`).FindAllString(string(settings), -1) {
		secrets[s] = true
	}
	if len(secrets) < 4 {
		t.Fatalf("docs/settings.md names only %v", secrets)
	}
	// line: optional "#", then the directive.
	loads := map[string]bool{} // credential name -> commented
	for _, m := range regexp.MustCompile(`(?m)^(#?)LoadCredential=([^:\s]+):/\S+$`).FindAllStringSubmatch(string(unit), -1) {
		loads[m[2]] = m[1] == "#"
	}
	handed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(#?)Environment=(TALLY_OSC_[A-Z_]+)=%d/(\S+)$`).FindAllStringSubmatch(string(unit), -1) {
		commented, ok := loads[m[3]]
		switch {
		case !ok:
			t.Errorf("%s=%%d/%s without a LoadCredential=%s:", m[2], m[3], m[3])
		case commented != (m[1] == "#"):
			t.Errorf("%s and LoadCredential=%s: one commented out, the other not", m[2], m[3])
		}
		handed[m[2]] = true
	}
	var missing []string
	for s := range secrets {
		if !handed[s] {
			missing = append(missing, s)
		}
		if regexp.MustCompile(`(?m)^#?` + s + `=`).Match(env) {
			t.Errorf("env.example sets %s: the unit's dynamic user cannot own that file; it goes as a credential", s)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the unit hands over no credential for %s", strings.Join(missing, ", "))
	}
}
