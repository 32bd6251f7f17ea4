//go:build !wasip1

package sdkguests_test

// These tests run the guests built from wasm-sdk/testdata/ in wazero behind a minimal
// host written here against docs/abi.md (the collector's runtime is tested on
// its own): they show that a Go guest answers exactly what MapJSON answers,
// and that mapping allocates nothing inside the guest.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/sample"
)

// sdkDir is the SDK's module, whose testdata holds the guests' sources.
const sdkDir = "../../wasm-sdk"

// guestWasm returns wasm-sdk/testdata/<name>.wasm as built by `make
// test-wasm`, or builds it into a temporary directory when it is not there
// (a plain `go test`).
func guestWasm(t testing.TB, name string) []byte {
	t.Helper()
	path := filepath.Join(sdkDir, "testdata", name+".wasm")
	if _, err := os.Stat(path); err != nil {
		if testing.Short() {
			t.Skipf("%s not built (run make test-wasm) and -short given", path)
		}
		path = filepath.Join(t.TempDir(), name+".wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", path, "./testdata/"+name)
		cmd.Dir = sdkDir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}
	return testkit.ReadFile(t, path)
}

// readFixture is the nova compute.instance.exists notification the SDK's
// own tests map (wasm-sdk/testdata/nova_exists.json).
func readFixture(t testing.TB) []byte {
	t.Helper()
	return testkit.ReadFile(t, filepath.Join(sdkDir, "testdata", "nova_exists.json"))
}

// miniHost is one guest instance behind the ABI v1 imports.
type miniHost struct {
	rt                     wazero.Runtime
	mod                    api.Module
	alloc, mapFn, manifest api.Function
	idx                    jsonindex.Index
	logs                   []string
	input                  []byte // of the call in progress
	emitted                []byte // the document tally.emit wrote (emithost_test.go)
}

func newMiniHost(t testing.TB, wasm []byte) *miniHost {
	t.Helper()
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfigCompiler()
	cache, err := wazero.NewCompilationCacheWithDir(testkit.CacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithCompilationCache(cache)
	h := &miniHost{rt: wazero.NewRuntimeWithConfig(ctx, cfg)}
	t.Cleanup(func() { h.rt.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, h.rt)
	_, err = h.rt.NewHostModuleBuilder("tally").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(h.field),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}).Export("field").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(h.fields),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).Export("fields").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(h.log),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).Export("log").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(h.emit),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).Export("emit").
		Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := h.rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	h.mod, err = h.rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().
		WithStartFunctions("_initialize").
		WithSysNanotime().WithSysWalltime().WithSysNanosleep())
	if err != nil {
		t.Fatal(err)
	}
	if h.mod.ExportedFunction("tally_abi_version_1") == nil {
		t.Fatal("no tally_abi_version_1 export")
	}
	h.alloc = h.mod.ExportedFunction("tally_alloc")
	h.mapFn = h.mod.ExportedFunction("tally_map")
	h.manifest = h.mod.ExportedFunction("tally_manifest")
	return h
}

func (h *miniHost) field(_ context.Context, m api.Module, stack []uint64) {
	path, ok := m.Memory().Read(uint32(stack[0]), uint32(stack[1]))
	if !ok {
		panic("field: path out of range")
	}
	k, start, end := h.idx.LookupBytes(path)
	if k == jsonindex.Missing {
		stack[0] = 0
		return
	}
	stack[0] = uint64(k)<<56 | uint64(start)<<28 | uint64(end-start)
}

// fields answers tally.fields as docs/abi.md describes it, by calling field
// for each (ptr, len) pair.
func (h *miniHost) fields(ctx context.Context, m api.Module, stack []uint64) {
	table, ok1 := m.Memory().Read(uint32(stack[0]), uint32(stack[1])*8)
	out, ok2 := m.Memory().Read(uint32(stack[2]), uint32(stack[1])*8)
	if !ok1 || !ok2 {
		panic("fields: table out of range")
	}
	n := uint32(stack[1])
	for i := uint32(0); i < n; i++ {
		pair := []uint64{uint64(binary.LittleEndian.Uint32(table[8*i:])), uint64(binary.LittleEndian.Uint32(table[8*i+4:]))}
		h.field(ctx, m, pair)
		binary.LittleEndian.PutUint64(out[8*i:], pair[0])
	}
	stack[0] = uint64(n)
}

func (h *miniHost) log(_ context.Context, m api.Module, stack []uint64) {
	msg, _ := m.Memory().Read(uint32(stack[1]), uint32(stack[2]))
	h.logs = append(h.logs, string(msg))
}

// read returns the bytes of a packed (ptr << 32) | len result: the
// document tally.emit wrote when it is 0.
func (h *miniHost) read(t testing.TB, packed uint64) []byte {
	if packed == 0 && h.emitted != nil {
		return h.emitted
	}
	b, ok := h.mod.Memory().Read(uint32(packed>>32), uint32(packed))
	if !ok {
		t.Fatalf("result %#x out of guest memory", packed)
	}
	return b
}

// call runs tally_map on input; the result is a view of guest memory.
func (h *miniHost) call(t testing.TB, input []byte) []byte {
	ctx := context.Background()
	if err := h.idx.Parse(input); err != nil {
		h.idx.SetRaw(input)
	}
	res, err := h.alloc.Call(ctx, uint64(len(input)))
	if err != nil || res[0] == 0 {
		t.Fatalf("tally_alloc: %v %v", res, err)
	}
	ptr := uint32(res[0])
	h.mod.Memory().Write(ptr, input)
	h.input, h.emitted = input, nil
	res, err = h.mapFn.Call(ctx, uint64(ptr), uint64(len(input)))
	if err != nil {
		t.Fatalf("tally_map: %v", err)
	}
	return h.read(t, res[0])
}

// TestWasmABIEdges: tally_alloc refuses sizes the field spans cannot
// address, tally_map refuses a region tally_alloc did not hand out,
// answering an error document instead of reading stray memory, and an empty
// input (tally_map(0, 0)) is mapped like any other.
func TestWasmABIEdges(t *testing.T) {
	h := newMiniHost(t, guestWasm(t, "noop"))
	ctx := context.Background()
	for _, size := range []uint64{1 << 28, 1<<31 - 1, 1<<32 - 1} {
		res, err := h.alloc.Call(ctx, size)
		if err != nil || res[0] != 0 {
			t.Fatalf("tally_alloc(%d) = %v, %v; want 0", size, res, err)
		}
	}
	res, err := h.alloc.Call(ctx, 16)
	if err != nil || res[0] == 0 {
		t.Fatalf("tally_alloc(16) = %v, %v", res, err)
	}
	for _, arg := range [][2]uint64{{res[0] + 8, 4}, {res[0], 1 << 20}} {
		out, err := h.mapFn.Call(ctx, arg[0], arg[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := string(h.read(t, out[0])); !strings.HasPrefix(got, `{"error":"sdk: tally_map input is not the region`) {
			t.Fatalf("tally_map(%#x, %d) = %s", arg[0], arg[1], got)
		}
	}
	if got := string(h.call(t, []byte(`{}`))); got != `{"events":[]}` {
		t.Fatalf("after the refusals: %s", got)
	}
	// An empty input: the runtime passes tally_map(0, 0) without tally_alloc.
	h.input, h.emitted = nil, nil
	out, err := h.mapFn.Call(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(h.read(t, out[0])); got != `{"events":[]}` {
		t.Fatalf("tally_map(0, 0) = %s", got)
	}
}

func TestWasmNoop(t *testing.T) {
	h := newMiniHost(t, guestWasm(t, "noop"))
	if got := string(h.call(t, readFixture(t))); got != `{"events":[]}` {
		t.Fatalf("noop answered %s", got)
	}
	if got := string(h.call(t, []byte("not json"))); got != `{"events":[]}` {
		t.Fatalf("noop answered %s on non-JSON", got)
	}
}

// TestWasmMatchesNative: the sample guest in wazero answers byte for byte
// what MapJSON answers natively, for the manifest, a real notification, an
// input the mapper refuses and a non-JSON input.
func TestWasmMatchesNative(t *testing.T) {
	h := newMiniHost(t, guestWasm(t, "sample"))
	res, err := h.manifest.Call(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The manifest document of docs/abi.md, members in its order.
	want, err := json.Marshal(struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		EventTypes []string `json:"event_types"`
		Releases   []string `json:"releases"`
	}{sample.Manifest.Name, sample.Manifest.Version, sample.Manifest.EventTypes, sample.Manifest.Releases})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.read(t, res[0]); !bytes.Equal(got, want) {
		t.Fatalf("manifest %s, want %s", got, want)
	}
	var m struct {
		Name       string   `json:"name"`
		EventTypes []string `json:"event_types"`
	}
	if err := json.Unmarshal(h.read(t, res[0]), &m); err != nil || m.Name != "sample" || len(m.EventTypes) != 2 {
		t.Fatalf("manifest does not parse as expected: %+v %v", m, err)
	}
	for _, in := range [][]byte{
		readFixture(t),
		[]byte(`{"event_type":"image.upload","payload":{}}`),
		[]byte("\x00 not json"),
		bytes.Repeat(readFixture(t), 1)[:len(readFixture(t))-1], // truncated JSON
		[]byte(`{"event_type":"compute.instance.create.end","message_id":"m\u00e9\"1","payload":{"instance_id":"i\\1","vcpus":"4","memory_mb":1.5e3},"timestamp":"2024-05-01T14:00:00+02:00"}`),
	} {
		got := bytes.Clone(h.call(t, in))
		want, err := sdk.MapJSON(sample.Map, in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("input %.40q:\nwasm   %s\nnative %s", in, got, want)
		}
		if !json.Valid(got) {
			t.Errorf("output is not JSON: %s", got)
		}
	}
}

// TestWasmNoAllocationPerCall reads the guest runtime's own allocation
// counter (runtime.MemStats.Mallocs, reported by the memstats guest after
// each mapping): once the buffers have grown, further calls allocate nothing.
func TestWasmNoAllocationPerCall(t *testing.T) {
	h := newMiniHost(t, guestWasm(t, "memstats"))
	in := readFixture(t)
	mallocs := func() int64 {
		var doc struct {
			Events []struct {
				EventType string `json:"event_type"`
				Mallocs   int64  `json:"mallocs"`
			} `json:"events"`
		}
		if err := json.Unmarshal(h.call(t, in), &doc); err != nil || len(doc.Events) != 2 {
			t.Fatalf("memstats guest answered %d events, %v", len(doc.Events), err)
		}
		return doc.Events[1].Mallocs
	}
	for range 10 {
		mallocs()
	}
	before := mallocs()
	const calls = 2000
	for range calls - 1 {
		mallocs()
	}
	if after := mallocs(); after != before {
		t.Fatalf("guest allocated %d objects over %d calls, want 0", after-before, calls)
	}
}

func benchGuest(b *testing.B, name string) {
	h := newMiniHost(b, guestWasm(b, name))
	in := readFixture(b)
	h.call(b, in)
	b.ReportAllocs()
	reportCPU(b, func() {
		for b.Loop() {
			h.call(b, in)
		}
	})
}

// BenchmarkWasmNoop and BenchmarkWasmSample measure a Go guest behind the
// minimal host of this file (index, alloc, write, map, read), without the
// collector's pooling, limits and output validation.
func BenchmarkWasmNoop(b *testing.B)   { benchGuest(b, "noop") }
func BenchmarkWasmSample(b *testing.B) { benchGuest(b, "sample") }
