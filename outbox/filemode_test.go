package outbox_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// With a umask of 0000, the outbox directory is 0700 and every file in it
// 0600: Badger's lock, manifest, memory tables, value log and tables,
// including those created after Open by flushes, compactions and the disk
// reclaim, and those left looser by an earlier run. The umask is restored at
// Close.
func TestFilesArePrivateWhateverTheUmask(t *testing.T) {
	// The umask is the process's: an outbox an earlier test left open keeps
	// it tightened past this test's own Open, and this test would read a
	// leak as a wrong mode.
	if n := outbox.OpenOutboxes(); n != 0 {
		t.Fatalf("%d outboxes left open by earlier tests of the package: each must be closed", n)
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "outbox")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	if err := os.WriteFile(filepath.Join(dir, "stray"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	var seen map[string]bool
	check := func(when string) {
		t.Helper()
		seen = map[string]bool{}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: directory mode %04o, want 0700", when, fi.Mode().Perm())
		}
		// Badger removes tables and value logs on its own schedule
		// (compactions, the disk reclaim), so a file listed by the walk may
		// be gone by the time it is examined: it is skipped, not fatal. Every
		// file that still exists is checked.
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if p == dir {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			seen[filepath.Ext(p)] = true
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s mode %04o, want 0600", when, d.Name(), fi.Mode().Perm())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	small := func(op *outbox.Options) { op.MemTableBytes = 1 << 20; op.ReclaimAfterBytes = 1 << 20 }
	o := open(t, dir, small)
	check("after open")
	// Enough to fill several memory tables: flushes write tables, new memory
	// tables are created, and compactions rewrite tables.
	for i := range 400 {
		if err := o.Append(ctx, events(i*50, 50, 400)); err != nil {
			t.Fatal(err)
		}
	}
	check("after appends")
	if !seen[".sst"] || !seen[".mem"] || !seen[".vlog"] {
		t.Errorf("after appends, files %v: no table was written while the outbox was open", seen)
	}
	// Deliver everything: the disk reclaim drops the tables.
	deleteAll(t, o, 5000)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	check("after close")
	if cur := syscall.Umask(0); cur != 0 {
		t.Errorf("umask after close %04o, want 0000 restored", cur)
	}
	o = open(t, dir, small)
	if err := o.Append(ctx, events(0, 5000, 400)); err != nil {
		t.Fatal(err)
	}
	o.Close()
	check("after a second run")
}
