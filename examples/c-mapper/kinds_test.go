package cmapper_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestHeaderKindsAreTheABIs holds tally.h's own copy of the kind numbers to
// the Go table (jsonindex.Kind takes its numbers from the one table, which
// internal/repocheck holds to docs/abi.md): a C guest reads the same kinds
// the host answers.
func TestHeaderKindsAreTheABIs(t *testing.T) {
	h := testkit.ReadFile(t, "src/tally.h")
	enum := regexp.MustCompile(`(?s)enum tally_kind \{(.*?)\};`).FindSubmatch(h)
	if enum == nil {
		t.Fatal("src/tally.h declares no enum tally_kind")
	}
	members := regexp.MustCompile(`TALLY_([A-Z]+) = (\d+),`).FindAllSubmatch(enum[1], -1)
	if len(members) != int(jsonindex.Array)+1 {
		t.Fatalf("enum tally_kind has %d members, the ABI %d kinds", len(members), int(jsonindex.Array)+1)
	}
	for _, m := range members {
		n, err := strconv.Atoi(string(m[2]))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.ToLower(string(m[1])); jsonindex.Kind(n).String() != got { //nolint:gosec // G115: n is a small enum value, checked by the comparison
			t.Errorf("tally.h: TALLY_%s = %d; the ABI's kind %d is %s", m[1], n, n, jsonindex.Kind(n)) //nolint:gosec // G115: as above
		}
	}
}
