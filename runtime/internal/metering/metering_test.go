package metering_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/internal/metering"
)

const plenty = math.MaxInt64 / 2

// guest is one instance of a test module.
type guest struct {
	mod             api.Module
	budget, reserve api.MutableGlobal // nil when not metered
	slice           int64             // metering.Options.Slice
}

func instantiate(t *testing.T, wasm []byte, metered bool, imports ...[]byte) guest {
	t.Helper()
	return instantiateSliced(t, wasm, metered, 0, imports...)
}

// instantiateSliced meters wasm, when metered, with Options.Slice slice.
func instantiateSliced(t *testing.T, wasm []byte, metered bool, slice int64, imports ...[]byte) guest {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	for i, b := range imports {
		name := []string{"env"}[i]
		if _, err := rt.InstantiateWithConfig(ctx, b, wazero.NewModuleConfig().WithName(name)); err != nil {
			t.Fatal(err)
		}
	}
	if metered {
		var err error
		if wasm, err = metering.Meter(wasm, metering.Options{Initial: plenty, Slice: slice}); err != nil {
			t.Fatal(err)
		}
	}
	mod, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	g := guest{mod: mod, slice: slice}
	if metered {
		for _, x := range []struct {
			name string
			g    *api.MutableGlobal
		}{{metering.Export, &g.budget}, {metering.ExportReserve, &g.reserve}} {
			glob := mod.ExportedGlobal(x.name)
			if glob == nil {
				t.Fatalf("no export %s", x.name)
			}
			mg, ok := glob.(api.MutableGlobal)
			if !ok || glob.Type() != api.ValueTypeI64 {
				t.Fatalf("export %s is not a mutable i64", x.name)
			}
			*x.g = mg
		}
	}
	return g
}

// call runs fn(n) with the budget set to budget, and answers its result,
// what the call charged, and its error.
func (g guest) call(t *testing.T, fn string, n, budget int64) (res uint64, charged int64, err error) {
	t.Helper()
	f := g.mod.ExportedFunction(fn)
	if f == nil {
		t.Fatalf("no export %s", fn)
	}
	if g.budget != nil {
		first, reserve := metering.Split(budget, g.slice)
		g.budget.Set(uint64(first))
		g.reserve.Set(uint64(reserve))
	}
	out, err := f.Call(context.Background(), uint64(n))
	if g.budget != nil {
		charged = budget - g.left()
	}
	if err != nil {
		return 0, charged, err
	}
	return out[0], charged, nil
}

// run is call for a call that must end: its error fails the test.
func (g guest) run(t *testing.T, fn string, n, budget int64) (res uint64, charged int64) {
	t.Helper()
	res, charged, err := g.call(t, fn, n, budget)
	if err != nil {
		t.Fatal(err)
	}
	return res, charged
}

// calls answers how many calls the control module counted (its export
// calls).
func (g guest) calls(t *testing.T) uint64 {
	t.Helper()
	out, err := g.mod.ExportedFunction("calls").Call(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// left is what the call has left: the slice and the reserve.
func (g guest) left() int64 { return int64(g.budget.Get()) + int64(g.reserve.Get()) }

// slices are the Options.Slice the table tests run with: none (the whole
// budget one slice), one so small that every charge spends it (a refill at
// every function entry and loop turn), and one that a call spends several
// times.
var sliceSizes = []int64{0, 7, 100}

// controlCase is a function of the control module and two arguments: one it
// finishes with, one it runs away with (negative: it has none).
type controlCase struct {
	fn      string
	n       int64 // finishes
	runaway int64 // does not finish in any reasonable time
}

var control = []controlCase{
	{"straight", 5, -1},
	{"nested", 40, 1 << 40},
	{"brtable", 1000, 1 << 60},
	{"brif_out", 777, 1<<62 + 1},
	{"fact", 20, 1 << 40}, // runs out of budget long before its stack
	{"tree", 10, 62},
	{"gotree", 10, 62},
	{"inside", 300, 1 << 60},
	{"continue", 1001, 1 << 60},
	{"simd", 50, 1 << 60},
	{"loopparam", 500, 1 << 60},
	{"spin", -1, 0},
}

// finishing and runningAway pick a control function's argument for
// eachControl.
func finishing(c controlCase) int64   { return c.n }
func runningAway(c controlCase) int64 { return c.runaway }

// eachControl runs check as subtest slice=<slice>/<function> for every
// control function, with the argument arg picks, when that is not negative.
func eachControl(t *testing.T, slice int64, arg func(controlCase) int64, check func(t *testing.T, fn string, n int64)) {
	t.Helper()
	for _, c := range control {
		if n := arg(c); n >= 0 {
			t.Run(fmt.Sprintf("slice=%d/%s", slice, c.fn), func(t *testing.T) { check(t, c.fn, n) })
		}
	}
}

// TestFiniteSameResult: a computation that ends returns with the budget what
// it returns without, and charges more for more work.
//
// With slices, a call that spends several of them (a trip out of the
// compiled code and a refill from the reserve each time) returns the same
// result and is charged exactly what it is charged in one slice.
func TestFiniteSameResult(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "control")
	plain := instantiate(t, wasm, false)
	whole := instantiate(t, wasm, true)
	for _, slice := range sliceSizes {
		metered := instantiateSliced(t, wasm, true, slice)
		eachControl(t, slice, finishing, func(t *testing.T, fn string, n int64) {
			want, _ := plain.run(t, fn, n, 0)
			got, charged := metered.run(t, fn, n, plenty)
			if got != want {
				t.Fatalf("%s(%d) = %d metered, %d unmetered", fn, n, got, want)
			}
			_, less := metered.run(t, fn, n/2, plenty)
			if charged <= 0 || (fn != "straight" && less >= charged) {
				t.Fatalf("%s charged %d for n=%d and %d for n=%d", fn, charged, n, less, n/2)
			}
			_, once, err := whole.call(t, fn, n, plenty)
			if err != nil || once != charged {
				t.Fatalf("%s charged %d in slices of %d, %d in one (%v)", fn, charged, slice, once, err)
			}
			if slice > 0 && fn != "straight" && charged < 3*slice {
				t.Fatalf("%s charged %d: fewer than three slices of %d", fn, charged, slice)
			}
		})
	}
}

// TestExactBudget: a call that charges C instructions ends with a budget of
// C (nothing left) and traps with C-1.
// The same in slices: the reserve is drawn to the last instruction.
func TestExactBudget(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "control")
	for _, slice := range sliceSizes {
		g := instantiateSliced(t, wasm, true, slice)
		eachControl(t, slice, finishing, func(t *testing.T, fn string, n int64) {
			want, charged := g.run(t, fn, n, plenty)
			got, _, err := g.call(t, fn, n, charged)
			if err != nil || got != want || g.left() != 0 {
				t.Fatalf("budget %d: got %d, %v, %d left; want %d, nil, 0 left", charged, got, err, g.left(), want)
			}
			if _, _, err := g.call(t, fn, n, charged-1); err == nil || g.left() >= 0 {
				t.Fatalf("budget %d: err %v, %d left; want a trap with the budget below zero", charged-1, err, g.left())
			}
		})
	}
}

// TestRunawayTraps: every construct that runs away is stopped when its
// budget is spent, and the budget below zero tells that trap from the
// guest's own.
// In slices, a runaway draws its reserve down and traps the same way.
func TestRunawayTraps(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "control")
	const budget = 2_000_000
	for _, slice := range sliceSizes {
		g := instantiateSliced(t, wasm, true, slice)
		eachControl(t, slice, runningAway, func(t *testing.T, fn string, n int64) {
			_, charged, err := g.call(t, fn, n, budget)
			if err == nil || !strings.Contains(err.Error(), "unreachable") {
				t.Fatalf("%s(%d): err %v, want the budget's trap", fn, n, err)
			}
			if g.left() >= 0 || charged <= budget {
				t.Fatalf("%s(%d): %d left, want below zero", fn, n, g.left())
			}
			if r := int64(g.reserve.Get()); r != 0 {
				t.Fatalf("%s(%d): reserve %d after the trap, want it drawn to 0", fn, n, r)
			}
		})
		t.Run(fmt.Sprintf("slice=%d/guest trap", slice), func(t *testing.T) {
			_, _, err := g.call(t, "trap", 0, budget)
			if err == nil || g.left() < 0 {
				t.Fatalf("err %v, %d left: want a trap with budget left", err, g.left())
			}
		})
	}
}

// TestCallTreeChargesEveryCall: a tree of calls that each end is charged
// at least one instruction per call.
func TestCallTreeChargesEveryCall(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "control")
	g := instantiate(t, wasm, true)
	_, charged := g.run(t, "tree", 12, plenty)
	calls := g.calls(t)
	if calls != 1<<13-1 || charged < int64(calls)*5 {
		t.Fatalf("%d calls charged %d", calls, charged)
	}
}

// A function whose prologue runs straight into a loop is charged once a call,
// by the loop, and a call tree of such functions is still charged for every
// call: less than with a charge at each entry too, never nothing.
func TestFoldedEntryChargesEveryCall(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "control")
	g := instantiate(t, wasm, true)
	_, folded := g.run(t, "gotree", 12, plenty)
	_, plain := g.run(t, "tree", 12, plenty)
	calls := g.calls(t)
	if calls != 2*(1<<13-1) {
		t.Fatalf("%d calls", calls)
	}
	// Each call of gotree runs its loop's charge once (10) and its
	// instructions; tree's each charge once at entry, of about the same size.
	if per := folded / (1<<13 - 1); per < 20 || folded > plain*2 {
		t.Fatalf("gotree(12) charged %d (%d a call), tree(12) %d", folded, per, plain)
	}
}

// TestImportedGlobals: the budget's index follows the imported and the
// defined globals, and those keep working.
func TestImportedGlobals(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "imports")
	env := testkit.WAT(t, "testdata", "env")
	plain := instantiate(t, wasm, false, env)
	metered := instantiate(t, wasm, true, env)
	want, _ := plain.run(t, "run", 100, 0)
	got, charged, err := metered.call(t, "run", 100, plenty)
	if err != nil || got != want || charged <= 0 {
		t.Fatalf("got %d, %v, charged %d; want %d", got, err, charged, want)
	}
	if a, b := plain.mod.ExportedGlobal("own").Get(), metered.mod.ExportedGlobal("own").Get(); a != b {
		t.Fatalf("global own: %d metered, %d unmetered", b, a)
	}
}

// TestStartFunction: the start function runs on Options.Initial, and a
// module whose start function needs more cannot be instantiated.
func TestStartFunction(t *testing.T) {
	wasm := testkit.WAT(t, "testdata", "start")
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	for _, c := range []struct {
		initial int64
		ok      bool
	}{{100_000, true}, {100, false}} {
		out, err := metering.Meter(wasm, metering.Options{Initial: c.initial})
		if err != nil {
			t.Fatal(err)
		}
		mod, err := rt.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
		if (err == nil) != c.ok {
			t.Fatalf("initial %d: instantiate: %v", c.initial, err)
		}
		if mod != nil {
			_ = mod.Close(ctx)
		}
	}
}

// module encodes a module of one function () -> () with the given body
// (locals and instructions, the final end included) and, when export is
// set, an exported function of that name.
func module(body []byte, export string) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	sec := func(id byte, content ...byte) {
		b = append(b, id, byte(len(content)))
		b = append(b, content...)
	}
	sec(1, 1, 0x60, 0, 0)             // type: () -> ()
	sec(3, 1, 0)                      // function 0 of type 0
	sec(5, 1, 0, 1)                   // memory, min 1 page
	sec(6, 1, 0x7f, 0, 0x41, 0, 0x0b) // global 0: i32 const 0
	if export != "" {
		e := []byte{1, byte(len(export))}
		e = append(e, export...)
		e = append(e, 0, 0)
		sec(7, e...)
	}
	code := []byte{1, byte(len(body))}
	sec(10, append(code, body...)...)
	return b
}

func TestRefuses(t *testing.T) {
	for _, c := range []struct {
		name, export string
		body         []byte
		want         string // in the error
	}{
		{"threads", "", []byte{0, 0x41, 0, 0xfe, 0x10, 2, 0, 0x1a, 0x0b}, "offset 38: opcode 0xfe"},
		{"exceptions", "", []byte{0, 0x06, 0x40, 0x0b, 0x0b}, "opcode 0x06: exception handling"},
		{"unknown", "", []byte{0, 0x27, 0x0b}, "offset 36: opcode 0x27: unknown instruction"},
		{"simd gap", "", []byte{0, 0xfd, 0x9a, 0x01, 0x0b}, "opcode 0xfd 0x9a"},
		{"relaxed simd", "", []byte{0, 0xfd, 0x80, 0x02, 0x0b}, "opcode 0xfd 0x100: relaxed SIMD"},
		{"misc unknown", "", []byte{0, 0xfc, 0x12, 0x0b}, "opcode 0xfc 18"},
		{"gc", "", []byte{0, 0xfb, 0x00, 0x0b}, "opcode 0xfb: garbage collection"},
		{"reaches the budget", "", []byte{0, 0x42, 0, 0x24, 1, 0x0b}, "global index 1 out of range"},
		{"reaches the reserve", "", []byte{0, 0x42, 0, 0x24, 2, 0x0b}, "global index 2 out of range"},
		{"exports the name", metering.Export, []byte{0, 0x0b}, "already exports"},
		{"exports the reserve's name", metering.ExportReserve, []byte{0, 0x0b}, "already exports"},
		{"truncated", "", []byte{0, 0x02, 0x40, 0x0b}, "ends inside a block"},
		{"trailing", "", []byte{0, 0x0b, 0x01}, "bytes after the function's end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := metering.Meter(module(c.body, c.export), metering.Options{})
			if !errors.Is(err, metering.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrUnsupported naming %q", err, c.want)
			}
		})
	}
}

// TestRefusesExportOfTheBudget: a module that exports a global past its
// own (invalid as it is) is refused, not turned into one that exports its
// budget or its reserve.
func TestRefusesExportOfTheBudget(t *testing.T) {
	for _, idx := range []byte{1, 2} {
		wasm := []byte("\x00asm\x01\x00\x00\x00" +
			"\x06\x06\x01\x7f\x00\x41\x00\x0b" + // global 0: i32 const 0
			"\x07\x05\x01\x01g\x03") // export "g": global idx
		wasm = append(wasm, idx)
		_, err := metering.Meter(wasm, metering.Options{})
		if !errors.Is(err, metering.ErrUnsupported) || !strings.Contains(err.Error(), "out of range") {
			t.Fatalf("export of global %d: err %v, want ErrUnsupported naming the index", idx, err)
		}
	}
}

// TestNoGlobalNorExportSection: the pass adds the sections a module lacks.
func TestNoGlobalNorExportSection(t *testing.T) {
	wasm := []byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x05\x01\x60\x00\x01\x7f" + // type () -> i32
		"\x03\x02\x01\x00" + // one function
		"\x0a\x06\x01\x04\x00\x41\x07\x0b") // i32.const 7
	out, err := metering.Meter(wasm, metering.Options{Initial: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if g := mod.ExportedGlobal(metering.Export); g == nil || g.Get() != 10 {
		t.Fatalf("budget %v, want 10", g)
	}
}

// TestVersionInOutput: the output ends with the pass's version, so that the
// compilation cache, keyed by the bytes, tells the versions apart.
func TestVersionInOutput(t *testing.T) {
	out, err := metering.Meter(module([]byte{0, 0x0b}, ""), metering.Options{})
	if err != nil {
		t.Fatal(err)
	}
	name := metering.VersionSection
	want := append([]byte{0, byte(1 + len(name) + len(fmt.Sprint(metering.Version))), byte(len(name))}, name...)
	want = fmt.Append(want, metering.Version)
	if !bytes.HasSuffix(out, want) {
		t.Fatalf("output ends % x, want % x", out[len(out)-len(want):], want)
	}
}

// TestUnsupportedErrorNamesTheInstruction: a refused instruction is an
// *UnsupportedError with its offset and opcode.
func TestUnsupportedErrorNamesTheInstruction(t *testing.T) {
	_, err := metering.Meter(module([]byte{0, 0x41, 0, 0xfe, 0x10, 2, 0, 0x1a, 0x0b}, ""), metering.Options{})
	var ue *metering.UnsupportedError
	if !errors.As(err, &ue) || ue.Offset != 38 || ue.Opcode != "0xfe" {
		t.Fatalf("err %v, want an *UnsupportedError at offset 38 naming 0xfe", err)
	}
}
