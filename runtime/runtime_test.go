package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

const msg = `{"message_id":"m-1","event_type":"compute.instance.exists","publisher_id":"compute.h\"1","timestamp":"2024-05-01 12:00:00","payload":{}}`

var src = runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"}

func TestNoop(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	m := load(t, e, "noop")
	if m.ID() != "noop@1.0.0" {
		t.Fatalf("ID = %q", m.ID())
	}
	res, err := m.Map(context.Background(), index(t, msg), src)
	if err != nil || len(res.Events) != 0 || res.Oversize != 0 {
		t.Fatalf("Map = %+v, %v", res, err)
	}
	if ok, _ := m.Manifest().Match("anything.at.all"); !ok {
		t.Fatal("noop should claim everything")
	}
}

func TestFieldMapperFillsSource(t *testing.T) {
	var logs bytes.Buffer
	e := newEngine(t, runtime.Config{Logger: zerolog.New(&logs)})
	m := load(t, e, "fieldmap")
	res, err := m.Map(context.Background(), index(t, msg), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 {
		t.Fatalf("events = %q", res.Events)
	}
	var ev map[string]any
	if err := json.Unmarshal(res.Events[0], &ev); err != nil {
		t.Fatalf("event %s: %v", res.Events[0], err)
	}
	want := map[string]any{
		"event_type": "compute.instance.exists",
		"event_id":   "m-1",
		// fieldmap's fixed values of the other required members.
		"timestamp": "2024-05-01T12:00:00Z", "service": "test", "resource_type": "thing",
		"resource_id": "r1", "project_id": "p1", "action": "map", "attributes": map[string]any{},
		"source": map[string]any{"exchange": "nova", "routing_key": "notifications.info",
			"publisher_id": `compute.h"1`, "mapper": "fieldmap@1.0.0"},
	}
	got, _ := json.Marshal(ev)
	wantB, _ := json.Marshal(want)
	if !bytes.Equal(got, wantB) {
		t.Fatalf("event = %s\nwant    %s", got, wantB)
	}
	if strings.Count(string(res.Events[0]), `"source"`) != 1 {
		t.Fatalf("forged source kept: %s", res.Events[0])
	}
	if !contains(logs.String(), "mapping one message") {
		t.Fatalf("guest log line missing: %s", logs.String())
	}
	// Without event_type the guest answers an error: guest_error, instance kept.
	_, err = m.Map(context.Background(), index(t, `{"x":1}`), src)
	var me *runtime.MapError
	if !errors.As(err, &me) || me.Reason != runtime.ReasonGuestError || !contains(err.Error(), "no event_type") {
		t.Fatalf("err = %v", err)
	}
	// Non-JSON input: every field is missing.
	var raw jsonindex.Index
	raw.SetRaw([]byte("<14>plain text"))
	if _, err := m.Map(context.Background(), &raw, src); !errors.As(err, &me) || me.Reason != runtime.ReasonGuestError {
		t.Fatalf("raw input: err = %v", err)
	}
}

// misbehaving modules: each reports its reason, the engine survives, and the
// next call on the same module works (a fresh instance, or the same one for
// guest_error).
func TestMisbehavingModules(t *testing.T) {
	// A generous deadline for everything but the endless loop: the machine
	// running the tests may be busy.
	e := newEngine(t, runtime.Config{CallTimeout: 10 * time.Second, MemoryLimit: 8 << 20, PoolSize: 1})
	short := newEngine(t, runtime.Config{CallTimeout: 200 * time.Millisecond, MemoryLimit: 8 << 20, PoolSize: 1})
	ok := load(t, e, "noop")
	cases := []struct {
		module string
		reason runtime.Reason
	}{
		{"trap", runtime.ReasonTrap},
		{"loop", runtime.ReasonTimeout},
		{"membomb", runtime.ReasonMemory},
		{"garbage", runtime.ReasonInvalidOutput},
		{"badptr", runtime.ReasonABI},
		{"noalloc", runtime.ReasonMemory},
		{"guesterror", runtime.ReasonGuestError},
	}
	for _, c := range cases {
		t.Run(c.module, func(t *testing.T) {
			eng := e
			if c.reason == runtime.ReasonTimeout {
				eng = short
			}
			m := load(t, eng, c.module)
			for i := 0; i < 2; i++ { // the second call runs on a replacement instance
				start := time.Now()
				_, err := m.Map(context.Background(), index(t, msg), src)
				var me *runtime.MapError
				if !errors.As(err, &me) || me.Reason != c.reason || me.Module != c.module+"@1.0.0" {
					t.Fatalf("call %d: err = %v, want reason %s", i, err, c.reason)
				}
				if c.reason == runtime.ReasonTimeout && time.Since(start) > 5*time.Second {
					t.Fatalf("endless loop not stopped near its deadline (took %v)", time.Since(start))
				}
			}
			if n := m.Instances(); n > 1 {
				t.Fatalf("instances = %d, want at most 1 (pool size 1)", n)
			}
			if _, err := ok.Map(context.Background(), index(t, msg), src); err != nil {
				t.Fatalf("engine broken after %s: %v", c.module, err)
			}
			if err := m.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOutputValidation(t *testing.T) {
	e := newEngine(t, runtime.Config{MaxEventBytes: 300, MaxOutputBytes: 2000})
	m := load(t, e, "mirror")
	big := strings.Repeat("x", 400)
	// ev is an event of type et that keeps the contract, with more members.
	ev := func(et, more string) string {
		return `{"event_type":"` + et + `","event_id":"e","timestamp":"2024-05-01T12:00:00Z","service":"s",` +
			`"resource_type":"r","resource_id":"r1","project_id":"p1","action":"x"` + more + `}`
	}
	cases := []struct {
		out    string
		reason runtime.Reason
		events int
		over   int
	}{
		{`{"events":[]}`, "", 0, 0},
		{`{"events":[` + ev("a", "") + `,` + ev("b", `,"source":{"mapper":"evil"},"n":1`) + `]}`, "", 2, 0},
		{`{"events":[` + ev("a", `,"attributes":{"big":"`+big+`"}`) + `,` + ev("b", "") + `]}`, "", 1, 1},
		{`{"events":[{"event_type":"a","big":"` + strings.Repeat(big, 6) + `"}]}`, runtime.ReasonInvalidOutput, 0, 0},
		{`{"events":[{"x":1}]}`, runtime.ReasonInvalidEvent, 0, 0},
		{`{"events":[{"event_type":1}]}`, runtime.ReasonInvalidEvent, 0, 0},
		{`{"events":[{"event_type":""}]}`, runtime.ReasonInvalidEvent, 0, 0},
		{`{"events":[1]}`, runtime.ReasonInvalidOutput, 0, 0},
		{`{"events":{}}`, runtime.ReasonInvalidOutput, 0, 0},
		{`{"other":1}`, runtime.ReasonInvalidOutput, 0, 0},
		{`[1]`, runtime.ReasonInvalidOutput, 0, 0},
		{`{"error":"bad \"thing\""}`, runtime.ReasonGuestError, 0, 0},
	}
	for _, c := range cases {
		res, err := m.Map(context.Background(), index(t, c.out), src)
		var me *runtime.MapError
		if c.reason == "" {
			if err != nil || len(res.Events) != c.events || res.Oversize != c.over {
				t.Errorf("%.60s: got %d events %d oversize, %v", c.out, len(res.Events), res.Oversize, err)
			}
			for _, ev := range res.Events {
				var v map[string]any
				if err := json.Unmarshal(ev, &v); err != nil {
					t.Errorf("event not JSON: %s", ev)
				}
				if s := v["source"].(map[string]any); s["mapper"] != "mirror@1.0.0" || s["exchange"] != "nova" {
					t.Errorf("source = %v", s)
				}
			}
			continue
		}
		if !errors.As(err, &me) || me.Reason != c.reason {
			t.Errorf("%.60s: err = %v, want %s", c.out, err, c.reason)
		}
	}
	// The guest error message is unescaped.
	_, err := m.Map(context.Background(), index(t, `{"error":"bad \"thing\""}`), src)
	if err == nil || !contains(err.Error(), `bad "thing"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestInvalidModules(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	cases := map[string]string{
		"missing":     "missing export tally_map",
		"nomarker":    "tally_abi_version_1",
		"badsig":      "export tally_map has signature",
		"forbidden":   "imports env.x",
		"badmanifest": "bad manifest",
	}
	for name, reason := range cases {
		path := "testdata/" + name + ".wasm"
		_, err := e.Load(context.Background(), path, wat(t, name))
		if !errors.Is(err, runtime.ErrInvalidModule) || !contains(err.Error(), path) || !contains(err.Error(), reason) {
			t.Errorf("%s: err = %v, want ErrInvalidModule naming %s and %q", name, err, path, reason)
		}
	}
	if _, err := e.Load(context.Background(), "junk.wasm", []byte("not wasm")); !errors.Is(err, runtime.ErrInvalidModule) {
		t.Errorf("junk: err = %v", err)
	}
}

func TestConcurrentPool(t *testing.T) {
	e := newEngine(t, runtime.Config{PoolSize: 3})
	m := load(t, e, "fieldmap")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := index(t, msg)
			for i := 0; i < 200; i++ {
				res, err := m.Map(context.Background(), x, src)
				if err != nil || len(res.Events) != 1 {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := m.Instances(); n < 1 || n > 3 {
		t.Fatalf("instances = %d, want 1..3", n)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Map(context.Background(), index(t, msg), src); !errors.Is(err, runtime.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestGuestLogRateLimited(t *testing.T) {
	var logs bytes.Buffer
	e := newEngine(t, runtime.Config{Logger: zerolog.New(&logs)})
	m := load(t, e, "wasilog")
	for i := 0; i < 300; i++ {
		if _, err := m.Map(context.Background(), index(t, msg), src); err != nil {
			t.Fatal(err)
		}
	}
	if !contains(logs.String(), `"stream":"stdout"`) || !contains(logs.String(), "hello from stdout") {
		t.Fatalf("stdout not logged: %.300s", logs.String())
	}
	lines := strings.Count(logs.String(), "\n")
	if m.DroppedLogLines() == 0 || lines > 200 {
		t.Fatalf("600 guest lines: %d logged, %d dropped", lines, m.DroppedLogLines())
	}
}

func TestGuardNeverStillMaps(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	m := load(t, e, "fieldmap", runtime.WithGuard(runtime.GuardNever))
	if m.Guarded() {
		t.Fatal("GuardNever module is guarded")
	}
	if res, err := m.Map(context.Background(), index(t, msg), src); err != nil || len(res.Events) != 1 {
		t.Fatalf("Map = %v, %v", res, err)
	}
	d := load(t, e, "fieldmap")
	if !d.Guarded() {
		t.Fatal("default module is not guarded")
	}
}

func TestManifestMatch(t *testing.T) {
	mf := runtime.Manifest{EventTypes: []string{"compute.instance.*", "!compute.instance.*.start", "compute.instance.exists"}}
	for et, want := range map[string]int{
		"compute.instance.create.end":   17,
		"compute.instance.exists":       23,
		"compute.instance.create.start": -1,
		"volume.create.end":             -1,
	} {
		ok, spec := mf.Match(et)
		if (want < 0 && ok) || (want >= 0 && (!ok || spec != want)) {
			t.Errorf("Match(%q) = %v %d, want %d", et, ok, spec, want)
		}
	}
}

func TestMapAllocations(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	noop := load(t, e, "noop")
	x := index(t, msg)
	ctx := context.Background()
	noop.Map(ctx, x, src)
	if a := testing.AllocsPerRun(200, func() { noop.Map(ctx, x, src) }); a != 0 {
		t.Logf("noop Map allocates %v times per call (wazero's guarded call path)", a)
	}
	free := load(t, e, "noop", runtime.WithGuard(runtime.GuardNever))
	free.Map(ctx, x, src)
	if a := testing.AllocsPerRun(200, func() { free.Map(ctx, x, src) }); a != 0 {
		t.Fatalf("unguarded noop Map allocates %v times per call, want 0", a)
	}
	fm := load(t, e, "fieldmap", runtime.WithGuard(runtime.GuardNever))
	fm.Map(ctx, x, src)
	if a := testing.AllocsPerRun(200, func() { fm.Map(ctx, x, src) }); a > 3 {
		t.Fatalf("fieldmap Map allocates %v times per call, want at most 3 (the output copy: the events' bytes, the slice of events, the slice of their ledger keys)", a)
	}
	// The event contract's checks of every member allocate nothing.
	mirror := load(t, e, "mirror", runtime.WithGuard(runtime.GuardNever))
	full := index(t, `{"events":[{"event_id":"e","timestamp":"2024-05-01T12:00:00.5Z","event_type":"compute.instance.exists",`+
		`"service":"nova","resource_type":"instance","resource_id":"r","project_id":"p","user_id":"u","action":"exists",`+
		`"attributes":{"vcpus":4,"memory_mb":2048,"flavor_name":"m1","launched_at":"2024-05-01T11:00:00Z","seats":-1,"x":null}}]}`)
	res, err := mirror.Map(ctx, full, src)
	if err != nil || len(res.Events) != 1 || res.Dropped.Total() != 2 {
		t.Fatalf("mirror: %s, dropped %v, %v", res.Events, res.Dropped, err)
	}
	if a := testing.AllocsPerRun(200, func() { mirror.Map(ctx, full, src) }); a > 3 {
		t.Fatalf("mirror Map of a full event allocates %v times per call, want at most 3 (the output copy)", a)
	}
}

func TestGuardUntrustedEarnsTrust(t *testing.T) {
	e := newEngine(t, runtime.Config{PoolSize: 1})
	m := load(t, e, "noop", runtime.WithGuard(runtime.GuardUntrusted))
	if !m.Guarded() {
		t.Fatal("a new GuardUntrusted module must start guarded")
	}
	x := index(t, msg)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; m.Guarded(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("still guarded after %d calls", i)
		}
		if _, err := m.Map(context.Background(), x, src); err != nil {
			t.Fatal(err)
		}
		if i > runtime.TrustAfter {
			time.Sleep(time.Millisecond) // the unguarded variant compiles in the background
		}
	}
	if _, err := m.Map(context.Background(), x, src); err != nil {
		t.Fatalf("unguarded call: %v", err)
	}
}

// An unguarded guest cannot be stopped in a pure loop, but one that calls the
// host is stopped at its first host call after the deadline.
func TestUnguardedStoppedAtHostCall(t *testing.T) {
	e := newEngine(t, runtime.Config{CallTimeout: 100 * time.Millisecond, PoolSize: 1})
	m := load(t, e, "fieldloop", runtime.WithGuard(runtime.GuardNever))
	for i := 0; i < 2; i++ {
		_, err := m.Map(context.Background(), index(t, msg), src)
		var me *runtime.MapError
		if !errors.As(err, &me) || me.Reason != runtime.ReasonTimeout {
			t.Fatalf("call %d: err = %v, want timeout", i, err)
		}
	}
}

// The default configuration (GuardAlways, 250 ms) ends an endless loop at its
// deadline and replaces the instance.
func TestEndlessLoopDefaultConfig(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	m := load(t, e, "loop")
	start := time.Now()
	_, err := m.Map(context.Background(), index(t, msg), src)
	var me *runtime.MapError
	if !errors.As(err, &me) || me.Reason != runtime.ReasonTimeout {
		t.Fatalf("err = %v, want timeout", err)
	}
	if d := time.Since(start); d < runtime.DefaultCallTimeout || d > 10*time.Second {
		t.Fatalf("loop ended after %v, want about %v", d, runtime.DefaultCallTimeout)
	}
	if n := m.Instances(); n != 0 {
		t.Fatalf("instances after timeout = %d, want 0 (discarded)", n)
	}
}
