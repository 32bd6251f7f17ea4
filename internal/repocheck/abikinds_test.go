package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestABIKindsAreTheDocumented holds the one table of kind numbers
// (wasm-sdk/internal/abi/kind, which jsonindex.Kind, the SDK's Kind and the
// abi package use) to docs/abi.md's row for bits 63..56 of a field result:
// every kind the document names has that number and name, and there are no
// others.
func TestABIKindsAreTheDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "abi.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| 63\.\.56 \| kind: (.*) \|$`).FindSubmatch(doc)
	if row == nil {
		t.Fatal(`docs/abi.md has no row "| 63..56 | kind: ... |"`)
	}
	pairs := regexp.MustCompile(`(\d+) ([a-z]+)`).FindAllSubmatch(row[1], -1)
	want := []jsonindex.Kind{jsonindex.Missing, jsonindex.Null, jsonindex.String, jsonindex.Number,
		jsonindex.True, jsonindex.False, jsonindex.Object, jsonindex.Array}
	if len(pairs) != len(want) {
		t.Fatalf("docs/abi.md names %d kinds (%s), the table has %d", len(pairs), row[1], len(want))
	}
	for i, p := range pairs {
		n, err := strconv.Atoi(string(p[1]))
		if err != nil {
			t.Fatal(err)
		}
		if k := want[i]; int(k) != n || k.String() != string(p[2]) {
			t.Errorf("docs/abi.md: %d %s; the table: %d %s", n, p[2], uint8(k), k)
		}
	}
}
