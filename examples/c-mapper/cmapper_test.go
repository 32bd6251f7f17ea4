package cmapper_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/conformance"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// cMapper returns c-mapper.wasm as make test-wasm built it, or builds it
// with clang-14 into a temporary directory. Without clang-14 the test ends,
// naming the Debian packages.
func cMapper(t testing.TB) []byte {
	t.Helper()
	if b, err := os.ReadFile("c-mapper.wasm"); err == nil {
		return b
	}
	const pkgs = "clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32"
	clang := testkit.LookPath(t, "clang-14", pkgs)
	out := filepath.Join(t.TempDir(), "c-mapper.wasm")
	cmd := exec.Command(clang, "--target=wasm32-wasi", "-mexec-model=reactor", "-O2",
		"-fuse-ld=lld", "-Wl,--strip-all", "-o", out, "src/mapper.c")
	if msg, err := cmd.CombinedOutput(); err != nil {
		testkit.Missing(t, "c-mapper.wasm is not built and clang-14 failed (apt-get install %s): %v\n%s", pkgs, err, msg)
	}
	return testkit.ReadFile(t, out)
}

func fixture(t testing.TB) []byte {
	t.Helper()
	return testkit.ReadFile(t, "testdata/nova_exists.json")
}

// TestConformance runs the runtime's ABI conformance suite against the C
// module: the same suite the Go modules pass.
func TestConformance(t *testing.T) {
	conformance.Run(t, cMapper(t), conformance.WithInputs(fixture(t)), conformance.WithCacheDir(testkit.CacheDir(t)))
}

func load(t testing.TB, opts ...runtime.ModuleOption) *runtime.Module {
	t.Helper()
	ctx := context.Background()
	// A generous deadline: on a loaded machine a descheduled call must not
	// fail a test or a benchmark.
	e, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(t),
		CallTimeout: 10 * time.Second, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	m, err := e.Load(ctx, "c-mapper.wasm", cMapper(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNovaExists maps the real notification through the collector's runtime
// and checks every member of the event, the host's source included.
func TestNovaExists(t *testing.T) {
	m := load(t)
	if got := m.ID(); got != "c-example@1.0.0" {
		t.Fatalf("ID = %q", got)
	}
	if ok, _ := m.Manifest().Match("compute.instance.exists"); !ok {
		t.Fatal("manifest does not claim compute.instance.exists")
	}
	var x jsonindex.Index
	if err := x.Parse(fixture(t)); err != nil {
		t.Fatal(err)
	}
	res, err := m.Map(context.Background(), &x, runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 {
		t.Fatalf("%d events", len(res.Events))
	}
	var got, want map[string]any
	if err := json.Unmarshal(res.Events[0], &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(wantEvent), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("event\n%s\nwant\n%s", res.Events[0], wantEvent)
	}
}

const wantEvent = `{"event_id":"4b884c03-756d-4c06-8b42-80b6def9d302","timestamp":"2012-05-08T16:03:44.122481Z",
"event_type":"compute.instance.exists","service":"nova","resource_type":"instance",
"resource_id":"3a513875-95c9-4012-a3e7-f90c678854e5","project_id":"7c150a59fe714e6f9263774af9688f0e",
"user_id":"1e3ce043029547f1a61c1996d1a531a2","action":"exists",
"attributes":{"flavor_name":"m1.tiny","flavor_id":"2","vcpus":1,"memory_mb":512,"root_gb":0,"ephemeral_gb":0,"disk_gb":0,
"state":"active","image_ref":"UUID","availability_zone":"1e3ce043029547f1a61c1996d1a531a4","host":"compute-host-name",
"launched_at":"2012-05-07T23:01:27Z"},
"source":{"exchange":"nova","routing_key":"notifications.info","publisher_id":"compute.vagrant-precise","mapper":"c-example@1.0.0"}}`

func benchMap(b *testing.B, opts ...runtime.ModuleOption) {
	m := load(b, opts...)
	var x jsonindex.Index
	if err := x.Parse(fixture(b)); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	src := runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"}
	testkit.BenchCPU(b, func() error {
		_, err := m.Map(ctx, &x, src)
		return err
	})
}

// BenchmarkMap: the C mapper on a ~2 KB compute.instance.exists through the
// collector's runtime, with and without termination checks.
func BenchmarkMap(b *testing.B) {
	b.Run("guarded", func(b *testing.B) { benchMap(b, runtime.WithGuard(runtime.GuardAlways)) })
	b.Run("unguarded", func(b *testing.B) { benchMap(b, runtime.WithGuard(runtime.GuardNever)) })
}
