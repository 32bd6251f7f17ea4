package catalog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// stuckCatalog is a catalogue of dir whose next drop-in load stops before
// the real compilation until release is closed, as a read of a file system
// that does not answer would: entered is closed once a reload is stuck there.
type stuckCatalog struct {
	*Catalog
	eng              *runtime.Engine
	entered, release chan struct{}
	releaseOnce      sync.Once
}

func newStuckCatalog(t *testing.T, refresh time.Duration) (*stuckCatalog, string) {
	t.Helper()
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(t), Logger: testkit.Logger(), CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(ctx) })
	dir := t.TempDir()
	c, err := New(ctx, Options{Engine: eng, Dir: dir, RefreshInterval: refresh, Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	sc := &stuckCatalog{Catalog: c, eng: eng, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		sc.unstick()
		_ = c.Close(ctx)
	})
	load := c.load
	var once sync.Once
	c.load = func(ctx context.Context, name string, wasm []byte, o origin) (module, error) {
		once.Do(func() { close(sc.entered) })
		<-sc.release
		return load(ctx, name, wasm, o)
	}
	if err := os.WriteFile(filepath.Join(dir, "echo.wasm"), testkit.WAT(t, "testdata", "echo_v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	return sc, dir
}

func (sc *stuckCatalog) unstick() { sc.releaseOnce.Do(func() { close(sc.release) }) }

// idle reports whether no reload is in progress.
func (sc *stuckCatalog) idle() bool {
	select {
	case sc.reloadSem <- struct{}{}:
		<-sc.reloadSem
		return true
	default:
		return false
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not after 30s", what)
	}
	var zero T
	return zero
}

// TestCloseDoesNotWaitForAStuckReload: Close returns at its ctx while a
// reload is stuck, and the reload, once it ends, frees what it loaded
// instead of placing it in a closed catalogue.
func TestCloseDoesNotWaitForAStuckReload(t *testing.T) {
	sc, _ := newStuckCatalog(t, time.Hour)
	results := make(chan ReloadResult, 1)
	go func() { results <- sc.Reload(context.Background()) }()
	wait(t, sc.entered, "the reload stuck in its load")

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the stop budget is spent
	closed := make(chan error, 1)
	go func() { closed <- sc.Close(ctx) }()
	if err := wait(t, closed, "Close with a reload stuck"); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v, want the ctx's error", err)
	}
	if r := sc.Reload(ctx); r.OK || r.Error != ErrClosed.Error() {
		t.Errorf("reload after close: %+v", r)
	}

	sc.unstick()
	r := wait(t, results, "the stuck reload, released")
	if r.OK || r.Error != ErrClosed.Error() {
		t.Fatalf("stuck reload: %+v, want %v", r, ErrClosed)
	}
	if n := sc.eng.Loaded(); n != 0 {
		t.Fatalf("%d modules still loaded after the stuck reload ended", n)
	}
}

// TestRunReturnsWhileAReloadIsStuck: Run returns when its ctx is done even
// though the reload it started is stuck; Close then waits for it no longer
// than its own ctx.
func TestRunReturnsWhileAReloadIsStuck(t *testing.T) {
	sc, _ := newStuckCatalog(t, 10*time.Millisecond)
	ctx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sc.Run(ctx) }()
	wait(t, sc.entered, "the periodic reload stuck in its load")
	stopRun()
	if err := wait(t, ran, "Run with a reload stuck"); err != nil {
		t.Fatalf("run: %v", err)
	}
	closeCtx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sc.Close(closeCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v, want the ctx's error", err)
	}
	sc.unstick()
	testkit.WaitFor(t, 30*time.Second, "the stuck reload ended", sc.idle)
	if n := sc.eng.Loaded(); n != 0 {
		t.Fatalf("%d modules still loaded after the stuck reload ended", n)
	}
	if _, ok := sc.snap.Load().byName["echo"]; ok {
		t.Fatal("the stuck reload placed its module after Run and Close returned")
	}
}

// TestRunReloadsAgainAfterAStuckReload: what triggers while a reload is
// stuck is done once it ends, so Run goes on following the directory.
func TestRunReloadsAgainAfterAStuckReload(t *testing.T) {
	sc, dir := newStuckCatalog(t, 10*time.Millisecond)
	ctx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sc.Run(ctx) }()
	defer func() {
		stopRun()
		if err := wait(t, ran, "Run"); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	wait(t, sc.entered, "the periodic reload stuck in its load")
	if err := os.WriteFile(filepath.Join(dir, "special.wasm"), testkit.WAT(t, "testdata", "special"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc.unstick()
	testkit.WaitFor(t, 30*time.Second, "echo and special both active", func() bool {
		st := sc.Status()
		return len(st.Modules) == 2
	})
}
