package catalog_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// Run adds its watch in the background. A plain file dropped beside the
	// ConfigMap's links, dropped again until a reload has seen it, shows
	// that the watch is in place (the periodic refresh is an hour away), and
	// that such a file is seen as well.
	special := wasm(t, "special")
	testkit.WaitFor(t, 10*time.Second, "special.wasm, dropped beside the links, seen by the watch", func() bool {
		if _, ok := module(c.Status(), "special"); ok {
			return true
		}
		dropBytes(t, dir, "special.wasm", special)
		return false
	})

	cm.publish(map[string]string{"echo.wasm": "echo_v2"})
	testkit.WaitFor(t, 10*time.Second, "the new version in shadow", func() bool {
		m, _ := module(c.Status(), "echo")
		return m.Migration != nil && m.Migration.Candidate.ID == "echo@2.0.0"
	})
	if r := c.Status().LastReload; r == nil || r.Trigger != "watch" || !r.OK {
		t.Errorf("last reload %+v", r)
	}
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

// TestStatusShowsAReloadWithItsResult: Status shows the modules a reload
// placed together with that reload as the last one, never beside the
// reload before it. A module dropped in and taken out again, reloaded each
// time while Status is read without pause: whenever it is there, the last
// reload is one that loaded it; whenever it has gone, one that removed it.
func TestStatusShowsAReloadWithItsResult(t *testing.T) {
	dir, c, _ := catalogOn(t, catalog.Options{RefreshInterval: time.Hour}, "echo.wasm", "echo_v1")
	special := wasm(t, "special")
	stop := make(chan struct{})
	bad := make(chan string, 1)
	looks := 0
	go func() {
		defer close(bad)
		for {
			select {
			case <-stop:
				return
			default:
			}
			looks++
			st := c.Status()
			r := st.LastReload
			if r == nil || r.Trigger == "start" {
				continue
			}
			_, there := module(st, "special")
			if there && !strings.Contains(strings.Join(r.Loaded, " "), "special") ||
				!there && !strings.Contains(strings.Join(r.Removed, " "), "special") {
				bad <- fmt.Sprintf("special there: %v; last reload %+v", there, *r)
				return
			}
		}
	}()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		dropBytes(t, dir, "special.wasm", special)
		if r := c.Reload(ctx); !r.OK || !r.Changed {
			t.Fatalf("reload after the drop: %+v", r)
		}
		if err := os.Remove(filepath.Join(dir, "special.wasm")); err != nil {
			t.Fatal(err)
		}
		if r := c.Reload(ctx); !r.OK || !r.Changed {
			t.Fatalf("reload after the removal: %+v", r)
		}
	}
	close(stop)
	if msg, ok := <-bad; ok {
		t.Fatalf("Status showed a reload's modules beside another reload's result: %s", msg)
	}
	t.Logf("%d looks at Status during 200 reloads", looks)
}
