// Package conformance checks that a WebAssembly module meets the mapper ABI v1
// (docs/abi.md) as the collector's host runs it, in the spirit of
// testing/slogtest: any module, in any language, can be run against it.
//
//	func TestConformance(t *testing.T) {
//		wasm, _ := os.ReadFile("dist/mymapper.wasm")
//		conformance.Run(t, wasm, conformance.WithInputs(mySamples...))
//	}
//
// The suite loads the module in a real engine and checks: the module loads
// (exports, marker, imports, manifest); every input, including an empty object,
// a message the module does not claim and bytes that are not JSON, is answered
// with events, a guest error or events the event contract holds back (a dead
// letter, invalid_event), never a trap, timeout, memory failure, bad
// pointer or invalid output; every event is a JSON object with a string
// event_type and the host's source; answers are the same on repeated calls and
// across instances; and the instance's memory stays flat over many calls.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Option adjusts the suite.
type Option func(*options)

type options struct {
	inputs   [][]byte
	cacheDir string
	calls    int
}

// WithInputs adds sample inputs (inner oslo messages) to the built-in ones.
func WithInputs(in ...[]byte) Option { return func(o *options) { o.inputs = append(o.inputs, in...) } }

// WithCacheDir sets the compilation cache directory (default: none, every
// run compiles). The suite reads no environment: a caller that shares a cache
// between test packages passes it here.
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithRepeat sets the number of calls of the repeat check (default 500).
func WithRepeat(n int) Option { return func(o *options) { o.calls = n } }

// Built-in inputs every module must survive.
var builtin = [][]byte{
	[]byte(`{}`),
	[]byte(`{"message_id":"c-1","event_type":"conformance.unclaimed","timestamp":"2024-05-01 12:00:00","publisher_id":"x","payload":{}}`),
	[]byte(`{"message_id":"c-2","event_type":"compute.instance.exists","timestamp":"2024-05-01 12:00:00.123456","payload":{"instance_id":"i","tenant_id":"p"}}`),
	[]byte(`{"event_type":123,"payload":[1,2,3]}`),
}

var src = runtime.Source{Exchange: "conformance", RoutingKey: "notifications.info"}

// answered reports whether err is an answer rather than a failure: the
// module refused the input, or its event breaks the event contract in a
// required member (the collector keeps a dead letter).
func answered(err error) bool {
	var me *runtime.MapError
	return errors.As(err, &me) && (me.Reason == runtime.ReasonGuestError || me.Reason == runtime.ReasonInvalidEvent)
}

// Run runs the suite against wasm as subtests of t.
func Run(t *testing.T, wasm []byte, opts ...Option) {
	o := options{calls: 500}
	for _, opt := range opts {
		opt(&o)
	}
	inputs := append(append([][]byte(nil), builtin...), o.inputs...)
	ctx := context.Background()
	e, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: o.cacheDir, PoolSize: 4, CallTimeout: 5 * time.Second, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	m, err := e.Load(ctx, "module-under-test.wasm", wasm)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	id := m.ID()

	mapOne := func(t *testing.T, in []byte) ([][]byte, error) {
		t.Helper()
		var x jsonindex.Index
		if err := x.Parse(in); err != nil {
			x.SetRaw(in)
		}
		res, err := m.Map(ctx, &x, src)
		if answered(err) {
			return nil, err
		}
		if err != nil {
			t.Fatalf("input %.80s: %v", in, err)
		}
		return res.Events, nil
	}

	t.Run("manifest", func(t *testing.T) {
		mf := m.Manifest()
		if len(mf.EventTypes) == 0 {
			t.Fatal("manifest claims no event types")
		}
		if ok, _ := mf.Match(""); ok && len(mf.EventTypes) == 1 && mf.EventTypes[0] != "*" {
			t.Error("manifest claims the empty event type")
		}
	})
	t.Run("inputs", func(t *testing.T) {
		for _, in := range inputs {
			events, _ := mapOne(t, in)
			for _, ev := range events {
				var v map[string]any
				if err := json.Unmarshal(ev, &v); err != nil {
					t.Fatalf("event not a JSON object: %s", ev)
				}
				if s, ok := v["event_type"].(string); !ok || s == "" {
					t.Errorf("event without event_type: %s", ev)
				}
				srcv, _ := v["source"].(map[string]any)
				if srcv["mapper"] != id || srcv["exchange"] != src.Exchange {
					t.Errorf("source not the host's: %s", ev)
				}
			}
		}
	})
	t.Run("not-json", func(t *testing.T) {
		_, _ = mapOne(t, []byte("<14>Jan  1 00:00:00 host this is not JSON")) // an answer or a refusal: both are fine
		_, _ = mapOne(t, nil)
	})
	t.Run("deterministic", func(t *testing.T) {
		for _, in := range inputs {
			a, errA := mapOne(t, in)
			b, errB := mapOne(t, in)
			if (errA == nil) != (errB == nil) || len(a) != len(b) {
				t.Fatalf("input %.60s: answers differ between calls", in)
			}
			for i := range a {
				if !bytes.Equal(a[i], b[i]) {
					t.Fatalf("input %.60s: event %d differs between calls:\n%s\n%s", in, i, a[i], b[i])
				}
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var x jsonindex.Index
				for i := 0; i < 100; i++ {
					in := inputs[i%len(inputs)]
					if err := x.Parse(in); err != nil {
						x.SetRaw(in)
					}
					_, err := m.Map(ctx, &x, src)
					if err != nil && !answered(err) {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
	t.Run("repeat", func(t *testing.T) {
		for i := 0; i < o.calls; i++ {
			_, _ = mapOne(t, inputs[i%len(inputs)]) // the calls are what is measured
		}
		if n := m.Instances(); n < 1 || n > 4 {
			t.Fatalf("instances = %d after the repeat calls", n)
		}
	})
}
