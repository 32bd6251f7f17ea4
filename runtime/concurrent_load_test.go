package runtime_test

import (
	"context"
	"sync"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// TestConcurrentLoadsOfOneModule: loads of the same bytes at once (a
// built-in loaded on first use while a reload loads a copy of it) each get a
// working module, after an Inspect closed the module as the catalogue's start
// does. Concurrent compilations of one module once panicked inside wazero
// 1.12 (NewFunction, index out of range); the engine compiles one module at a
// time since. This test does not reproduce that panic reliably; it checks
// that concurrent loads work.
func TestConcurrentLoadsOfOneModule(t *testing.T) {
	w := wat(t, "noop")
	for range 5 {
		e := newEngine(t, runtime.Config{PoolSize: 1})
		// As the catalogue does at start: compiled, read, closed.
		if _, err := e.Inspect(context.Background(), "testdata/noop.wasm", w); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := e.Load(context.Background(), "testdata/noop.wasm", w)
				if err != nil {
					t.Error(err)
					return
				}
				if m.Manifest().Name != "noop" {
					t.Errorf("manifest %+v", m.Manifest())
				}
			}()
		}
		wg.Wait()
		if n := e.Loaded(); n != 16 {
			t.Errorf("%d modules loaded, want 16", n)
		}
	}
}
