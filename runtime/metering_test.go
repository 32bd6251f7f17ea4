package runtime_test

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/runtime/internal/metering"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

func wantReason(t *testing.T, err error, want runtime.Reason) {
	t.Helper()
	var me *runtime.MapError
	if !errors.As(err, &me) || me.Reason != want {
		t.Fatalf("err = %v, want reason %s", err, want)
	}
}

// meteredEngine's deadline is far away: only the budget can stop a runaway
// in these tests, and a watched overrun would fail them.
func meteredEngine(t *testing.T) *runtime.Engine {
	t.Helper()
	return newEngine(t, runtime.Config{
		Metered: true, Budget: 1_000_000, CallTimeout: time.Hour, PoolSize: 1,
		OnWatchedOverrun: func(module string) { t.Errorf("%s overran its deadline", module) },
	})
}

// A metered module that runs away fails with ReasonBudget under every
// guard, the watched one included: no call is abandoned, and the next call
// gets a fresh instance.
func TestMeteredRunawayFailsWithBudget(t *testing.T) {
	for _, g := range []runtime.Guard{runtime.GuardNever, runtime.GuardWatched, runtime.GuardAlways, runtime.GuardUntrusted} {
		t.Run(g.String(), func(t *testing.T) {
			e := meteredEngine(t)
			ctx := context.Background()
			loop := load(t, e, "loop", runtime.WithGuard(g))
			for range 2 {
				_, err := loop.Map(ctx, index(t, `{"a":1}`), src)
				wantReason(t, err, runtime.ReasonBudget)
			}
			spin := load(t, e, "spin", runtime.WithGuard(g))
			_, err := spin.Map(ctx, index(t, spinInput(4000)), src)
			wantReason(t, err, runtime.ReasonBudget)
			if res, err := spin.Map(ctx, index(t, `{"a":1}`), src); err != nil || len(res.Events) != 0 {
				t.Fatalf("short input after a runaway: %v, %v", res, err)
			}
			if n := e.Abandoned(); n != 0 {
				t.Fatalf("%d calls abandoned", n)
			}
		})
	}
}

// A call that stays within its budget is not stopped by it, and a guest's
// own trap stays a trap.
func TestMeteredWithinBudgetAndGuestTrap(t *testing.T) {
	e := meteredEngine(t)
	ctx := context.Background()
	spin := load(t, e, "spin", runtime.WithGuard(runtime.GuardNever))
	// 70 bytes: 70<<20 turns would spend the budget; the spin starts at 64.
	if _, err := spin.Map(ctx, index(t, `{"a":1}`), src); err != nil {
		t.Fatal(err)
	}
	if c := runtime.MostCharged(spin); c <= 0 || c > 1_000_000 {
		t.Fatalf("a short call charged %d", c)
	}
	trap := load(t, e, "trap", runtime.WithGuard(runtime.GuardNever))
	_, err := trap.Map(ctx, index(t, `{"a":1}`), src)
	wantReason(t, err, runtime.ReasonTrap)
}

// A module the pass refuses is refused at load.
func TestMeteredRefusedAtLoad(t *testing.T) {
	e := meteredEngine(t)
	once, err := metering.Meter(wat(t, "noop"), metering.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Load(context.Background(), "twice.wasm", once)
	if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), "already exports") {
		t.Fatalf("err = %v, want ErrInvalidModule naming the budget's export", err)
	}
}

// TestBuiltinBudget maps every fixture of every built-in module metered with
// the default budget: the same events as unmetered (the fixtures' expected
// documents), and DefaultBudget at least 100 times the most any call was
// charged (docs/performance.md, "Metering", has the figures).
func TestBuiltinBudget(t *testing.T) {
	dist, err := filepath.Glob(testkit.RepoPath(t, "mappers", "dist", "*.wasm"))
	if err != nil || len(dist) == 0 {
		testkit.Missing(t, "the built-in mappers are not built: run make wasm")
	}
	e := newEngine(t, runtime.Config{Metered: true})
	ctx := context.Background()
	var most int64
	for _, p := range dist {
		name := strings.TrimSuffix(filepath.Base(p), ".wasm")
		m, err := e.Load(ctx, "builtin:"+name+".wasm", testkit.ReadFile(t, p), runtime.WithGuard(runtime.GuardWatched))
		if err != nil {
			t.Fatal(err)
		}
		results, err := fixture.Run(testkit.RepoPath(t, "mappers", name, "testdata"), func(in []byte) ([]byte, error) {
			var idx jsonindex.Index
			if err := idx.Parse(in); err != nil {
				idx.SetRaw(in)
			}
			res, err := m.Map(ctx, &idx, src)
			var me *runtime.MapError
			if errors.As(err, &me) && me.Reason == runtime.ReasonBudget {
				t.Errorf("%s: %v", name, err)
			}
			return fixture.HostDocument(res, err)
		}, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				t.Errorf("%s: %v", name, r.Err)
			}
		}
		c := runtime.MostCharged(m)
		t.Logf("%s: at most %d instructions charged per call over %d fixtures", name, c, len(results))
		most = max(most, c)
	}
	if most*100 > runtime.DefaultBudget {
		t.Fatalf("a built-in call was charged %d: DefaultBudget %d is less than 100 times that", most, runtime.DefaultBudget)
	}
	t.Logf("most charged by any call: %d", most)

	// The input of the nova benchmarks, on an instance that has mapped
	// before, for comparing the charge with the instructions run.
	nova, err := e.Load(ctx, "builtin:nova.wasm", testkit.ReadFile(t, testkit.RepoPath(t, "mappers", "dist", "nova.wasm")), runtime.WithGuard(runtime.GuardNever))
	if err != nil {
		t.Fatal(err)
	}
	in := index(t, string(testkit.ReadFile(t, testkit.RepoPath(t, "mappers", "nova", "testdata", "edge__exists_2024_1"+fixture.InSuffix))))
	for range 3 {
		if _, err := nova.Map(ctx, in, src); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("nova, edge__exists_2024_1: at most %d charged", runtime.MostCharged(nova))
}

// BenchmarkMeteredRunaway: how long a runaway runs before the default
// budget stops it, for the tightest loop there is (loop.wat: `loop br 0`,
// charged 12 a turn), for spin.wat's counting loop, for divloop.wat's chain
// of 64-bit divisions (the most time for one charged instruction), and for
// nova built with the tag tally_runaway (a Go `for { spins++ }` on a
// notification whose payload.host is "loop-forever"), built here.
func BenchmarkMeteredRunaway(b *testing.B) {
	e := newEngine(b, runtime.Config{Metered: true, CallTimeout: time.Hour, PoolSize: 1})
	ctx := context.Background()
	novaLoop := filepath.Join(b.TempDir(), "nova-loop.wasm")
	build := exec.Command(testkit.GoBin(b), "build", "-tags", "tally_runaway", "-buildmode=c-shared", "-trimpath",
		"-o", novaLoop, "./mappers/nova")
	build.Dir = testkit.RepoRoot(b)
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nova with the tag tally_runaway: %v\n%s", err, out)
	}
	create := testkit.ReadFile(b, testkit.RepoPath(b, "mappers", "nova", "testdata", "compute.instance.create.end__ceilometer__1"+fixture.InSuffix))
	loopForever := strings.Replace(string(create), `"host": "`, `"host": "loop-forever", "was": "`, 1)
	if loopForever == string(create) {
		b.Fatal("no payload host in the nova fixture")
	}
	for _, c := range []struct{ module, input string }{
		{"loop", `{"a":1}`}, {"spin", spinInput(100_000)}, {"divloop", `{"a":1}`}, {"nova-loop", loopForever},
	} {
		b.Run(c.module, func(b *testing.B) {
			var m *runtime.Module
			if c.module == "nova-loop" {
				var err error
				if m, err = e.Load(ctx, novaLoop, testkit.ReadFile(b, novaLoop), runtime.WithGuard(runtime.GuardNever)); err != nil {
					b.Fatal(err)
				}
			} else {
				m = load(b, e, c.module, runtime.WithGuard(runtime.GuardNever))
			}
			var idx jsonindex.Index
			if err := idx.Parse([]byte(c.input)); err != nil {
				b.Fatal(err)
			}
			cpu0 := testkit.CPUTime()
			for b.Loop() {
				_, err := m.Map(ctx, &idx, src)
				var me *runtime.MapError
				if !errors.As(err, &me) || me.Reason != runtime.ReasonBudget {
					b.Fatalf("err = %v, want reason budget", err)
				}
			}
			testkit.ReportCPU(b, cpu0)
		})
	}
}

// The runtime's other misbehaving test modules, metered and unguarded: the
// ones that loop are stopped by their budget (a loop that calls the host on
// every turn included), the one that runs out of memory still fails with
// memory, and a module that loops after a good run keeps its good run.
func TestMeteredHeldOutModules(t *testing.T) {
	ctx := context.Background()
	for _, g := range []runtime.Guard{runtime.GuardNever, runtime.GuardWatched} {
		t.Run(g.String(), func(t *testing.T) {
			e := meteredEngine(t)
			for _, c := range []struct {
				module, input string
				want          runtime.Reason
			}{
				{"fieldloop", `{"a":1}`, runtime.ReasonBudget},
				{"spinfield", spinInput(4000), runtime.ReasonBudget},
				{"membomb", `{"a":1}`, runtime.ReasonMemory},
			} {
				m := load(t, e, c.module, runtime.WithGuard(g))
				_, err := m.Map(ctx, index(t, c.input), src)
				wantReason(t, err, c.want)
			}
			m := load(t, e, "loopafter", runtime.WithGuard(g))
			for i := range 3000 {
				if _, err := m.Map(ctx, index(t, `{"a":1}`), src); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			_, err := m.Map(ctx, index(t, `{"a":1}`), src)
			wantReason(t, err, runtime.ReasonBudget)
			if n := e.Abandoned(); n != 0 {
				t.Fatalf("%d calls abandoned", n)
			}
		})
	}
}

// The deadline stays a second line under metering: a metered module without
// termination checks whose budget is out of reach is still stopped past its
// deadline at its next host call (fieldloop calls tally.field on every
// turn), with ReasonTimeout, and nothing is abandoned.
func TestMeteredUnguardedDeadlineStopsAtHostCall(t *testing.T) {
	e := newEngine(t, runtime.Config{
		Metered: true, Budget: 1 << 50, CallTimeout: 50 * time.Millisecond, PoolSize: 1,
		OnWatchedOverrun: func(module string) { t.Errorf("%s: a watched overrun", module) },
	})
	ctx := context.Background()
	m := load(t, e, "fieldloop", runtime.WithGuard(runtime.GuardNever))
	_, err := m.Map(ctx, index(t, `{"a":1}`), src)
	wantReason(t, err, runtime.ReasonTimeout)
	if n := m.Overruns(); n != 1 {
		t.Fatalf("%d overruns, want 1", n)
	}
	if n := e.Abandoned(); n != 0 {
		t.Fatalf("%d calls abandoned", n)
	}
}

// BenchmarkMeteredGCPause: how long a garbage collection's stop-the-world
// waits for a metered guest that runs away. One goroutine maps a runaway
// (its calls fail with budget, one after the other, without end) while the
// benchmark's goroutine calls runtime.GC; a stop-the-world can only begin
// once the guest's goroutine is at a preemption point, which compiled guest
// code is not. Reported from runtime/metrics over the run:
// stop-max-ms is the longest time a stop-the-world of the collector took to
// stop every goroutine (the upper bound of the histogram's bucket),
// stop-p50-ms and stop-p90-ms the median and the 90th percentile (the same
// bounds), pause-max-ms the longest whole pause, pause-mean-ms their mean.
// On a loaded machine the maxima are the kernel's: a thread it leaves
// without a core for a while cannot reach a preemption point. The case
// "none" runs no guest: the floor the machine's own scheduling sets.
// docs/performance.md, "Metering", has the figures.
func BenchmarkMeteredGCPause(b *testing.B) {
	e := newEngine(b, runtime.Config{Metered: true, CallTimeout: time.Hour, PoolSize: 1})
	ctx := context.Background()
	for _, c := range []struct{ module, input string }{
		{"none", ""}, {"loop", `{"a":1}`}, {"spin", spinInput(100_000)}, {"divloop", `{"a":1}`},
	} {
		b.Run(c.module, func(b *testing.B) {
			var stop atomic.Bool
			calls := make(chan int, 1)
			if c.module == "none" {
				calls <- 0
			} else {
				m := load(b, e, c.module, runtime.WithGuard(runtime.GuardNever))
				idx := index(b, c.input)
				go func() {
					n := 0
					for !stop.Load() {
						_, err := m.Map(ctx, idx, src)
						var me *runtime.MapError
						if !errors.As(err, &me) || me.Reason != runtime.ReasonBudget {
							b.Errorf("err = %v, want reason budget", err)
							break
						}
						n++
					}
					calls <- n
				}()
			}
			stopping0, total0 := gcPauses()
			for b.Loop() {
				goruntime.GC()
			}
			stopping, total := gcPauses()
			stop.Store(true)
			<-calls
			stopping.sub(stopping0)
			total.sub(total0)
			b.ReportMetric(stopping.quantile(0.5)*1e3, "stop-p50-ms")
			b.ReportMetric(stopping.quantile(0.9)*1e3, "stop-p90-ms")
			b.ReportMetric(stopping.max()*1e3, "stop-max-ms")
			b.ReportMetric(total.max()*1e3, "pause-max-ms")
			b.ReportMetric(total.mean()*1e3, "pause-mean-ms")
		})
	}
}

// pauses is a histogram of runtime/metrics, in seconds.
type pauses struct {
	counts  []uint64
	buckets []float64
}

// gcPauses reads the collector's stop-the-world histograms: the time to
// stop every goroutine, and the whole pause.
func gcPauses() (stopping, total pauses) {
	s := []metrics.Sample{{Name: "/sched/pauses/stopping/gc:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	get := func(v metrics.Value) pauses {
		h := v.Float64Histogram()
		return pauses{counts: slices.Clone(h.Counts), buckets: h.Buckets}
	}
	return get(s[0].Value), get(s[1].Value)
}

func (p *pauses) sub(q pauses) {
	for i := range p.counts {
		p.counts[i] -= q.counts[i]
	}
}

// max is the upper bound of the highest bucket that holds a pause.
func (p pauses) max() float64 {
	for i := len(p.counts) - 1; i >= 0; i-- {
		if p.counts[i] > 0 {
			return p.buckets[i+1]
		}
	}
	return 0
}

// quantile is the upper bound of the bucket that holds the q-th quantile.
func (p pauses) quantile(q float64) float64 {
	var n uint64
	for _, c := range p.counts {
		n += c
	}
	var seen uint64
	for i, c := range p.counts {
		seen += c
		if n > 0 && float64(seen) >= q*float64(n) {
			return p.buckets[i+1]
		}
	}
	return 0
}

// mean takes every pause at the middle of its bucket.
func (p pauses) mean() float64 {
	var n uint64
	var sum float64
	for i, c := range p.counts {
		if c == 0 {
			continue
		}
		lo, hi := p.buckets[i], p.buckets[i+1]
		if math.IsInf(hi, 1) {
			hi = lo
		}
		if math.IsInf(lo, -1) {
			lo = hi
		}
		n += c
		sum += float64(c) * (lo + hi) / 2
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
