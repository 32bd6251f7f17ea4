package catalog_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// configMapDir lays dir out as the kubelet does for a ConfigMap volume: the
// keys are symlinks through ..data to a timestamped directory, and an update
// writes a new directory then swaps ..data in one rename.
type configMapDir struct {
	t   *testing.T
	dir string
	n   int
}

func (cm *configMapDir) publish(files map[string]string) {
	cm.t.Helper()
	cm.n++
	ts := filepath.Join(cm.dir, "..2026_12_02_"+string(rune('a'+cm.n)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		cm.t.Fatal(err)
	}
	for file, mod := range files {
		if err := os.WriteFile(filepath.Join(ts, file), wasm(cm.t, mod), 0o644); err != nil {
			cm.t.Fatal(err)
		}
		link := filepath.Join(cm.dir, file)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", file), link); err != nil {
				cm.t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(cm.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		cm.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(cm.dir, "..data")); err != nil {
		cm.t.Fatal(err)
	}
}

func TestWatchFollowsAConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	cm := &configMapDir{t: t, dir: dir}
	cm.publish(map[string]string{"echo.wasm": "echo_v1"})
	c := newCatalog(t, catalog.Options{Dir: dir, Debounce: 20 * time.Millisecond, RefreshInterval: time.Hour})
	if m := mustModule(t, c, "echo"); m.Active.ID != "echo@1.0.0" {
		t.Fatalf("start: %+v", m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	time.Sleep(50 * time.Millisecond) // let Run add its watch

	cm.publish(map[string]string{"echo.wasm": "echo_v2"})
	testkit.WaitFor(t, 10*time.Second, "the new version in shadow", func() bool {
		m, _ := module(c.Status(), "echo")
		return m.Migration != nil && m.Migration.Candidate.ID == "echo@2.0.0"
	})
	if r := c.Status().LastReload; r == nil || r.Trigger != "watch" || !r.OK {
		t.Errorf("last reload %+v", r)
	}
	// A plain file dropped beside the ConfigMap's links is seen as well.
	drop(t, dir, "special.wasm", "special")
	testkit.WaitFor(t, 10*time.Second, "special", func() bool { _, ok := module(c.Status(), "special"); return ok })
}

func TestPeriodicRefreshCatchesWhatTheWatchMisses(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "later")
	// The directory does not exist yet: nothing to watch at start-up.
	c := newCatalog(t, catalog.Options{Dir: sub, Debounce: 10 * time.Millisecond, RefreshInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	drop(t, sub, "echo.wasm", "echo_v1")
	testkit.WaitFor(t, 10*time.Second, "echo loaded by the periodic refresh", func() bool { _, ok := module(c.Status(), "echo"); return ok })
}
