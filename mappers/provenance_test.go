package mappers

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// openstackModules are the built-in modules that read OpenStack
// notifications: each fixture input of theirs says where it came from.
var openstackModules = []string{"nova", "cinder", "neutron", "glance", "octavia", "manila", "designate", "swift", "trove", "ironic"}

// TestProvenance checks that every fixture input of an OpenStack module has
// a row in the PROVENANCE.tsv beside it, and every row a file. A row names
// the file either as the pair's input (<case>.in.json) or as the sample it
// was copied from (<service>/<case>.json, as the shared sample index names
// it).
func TestProvenance(t *testing.T) {
	for _, s := range openstackModules {
		dir := filepath.Join(s, "testdata")
		f, err := os.Open(filepath.Join(dir, "PROVENANCE.tsv"))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		rows := map[string]bool{}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for first := true; sc.Scan(); first = false {
			name, _, _ := strings.Cut(sc.Text(), "\t")
			if first || name == "" {
				continue
			}
			name = filepath.Base(name)
			if !strings.HasSuffix(name, fixture.InSuffix) {
				name = strings.TrimSuffix(name, ".json") + fixture.InSuffix
			}
			if rows[name] {
				t.Errorf("%s: two rows for %s", dir, name)
			}
			rows[name] = true
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		cases, err := fixture.Cases(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if !rows[filepath.Base(c.In)] {
				t.Errorf("%s: no provenance row", c.In)
			}
			delete(rows, filepath.Base(c.In))
		}
		for name := range rows {
			t.Errorf("%s/PROVENANCE.tsv: a row for %s, which is not there", dir, name)
		}
	}
}
