package metrics

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather registers cs on a registry of their own and gathers them.
func gather(t *testing.T, cs ...prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := Register(reg, cs...); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func TestDeclaredNameHelpAndType(t *testing.T) {
	mfs := gather(t,
		Counter("tally_collector_c_total", "a counter"),
		Gauge("tally_collector_g", "a gauge"),
		GaugeFunc("tally_collector_gf", "a gauge read at each scrape", func() float64 { return 7 }),
		Histogram("tally_collector_h_seconds", "a histogram", []float64{1, 2}),
		CounterVec("tally_collector_v_total", "a family", By("reason", "x")),
	)
	want := []struct {
		name, help string
		typ        dto.MetricType
	}{
		{"tally_collector_c_total", "a counter", dto.MetricType_COUNTER},
		{"tally_collector_g", "a gauge", dto.MetricType_GAUGE},
		{"tally_collector_gf", "a gauge read at each scrape", dto.MetricType_GAUGE},
		{"tally_collector_h_seconds", "a histogram", dto.MetricType_HISTOGRAM},
		{"tally_collector_v_total", "a family", dto.MetricType_COUNTER},
	}
	if len(mfs) != len(want) {
		t.Fatalf("gathered %d families, want %d", len(mfs), len(want))
	}
	for i, w := range want {
		mf := mfs[i]
		if mf.GetName() != w.name || mf.GetHelp() != w.help || mf.GetType() != w.typ {
			t.Errorf("family %d: %s %q %v, want %s %q %v", i, mf.GetName(), mf.GetHelp(), mf.GetType(), w.name, w.help, w.typ)
		}
	}
	var bounds []float64
	if v := mfs[2].GetMetric()[0].GetGauge().GetValue(); v != 7 {
		t.Errorf("gauge func gathered %v, want 7", v)
	}
	for _, b := range mfs[3].GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	if !slices.Equal(bounds, []float64{1, 2}) {
		t.Errorf("histogram buckets %v, want [1 2]", bounds)
	}
}

// series lists a family's series as label=value pairs joined by commas.
func series(mf *dto.MetricFamily) []string {
	var out []string
	for _, m := range mf.GetMetric() {
		var pairs []string
		for _, lp := range m.GetLabel() {
			pairs = append(pairs, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, strings.Join(pairs, ","))
	}
	slices.Sort(out)
	return out
}

func TestCounterVecCreatesEveryCombinationAtZero(t *testing.T) {
	v := CounterVec("tally_collector_v_total", "h", By("action", "promote", "abort"), By("result", "applied", "ignored"))
	mfs := gather(t, v)
	want := []string{
		"action=abort,result=applied", "action=abort,result=ignored",
		"action=promote,result=applied", "action=promote,result=ignored",
	}
	if got := series(mfs[0]); !slices.Equal(got, want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for _, m := range mfs[0].GetMetric() {
		if m.GetCounter().GetValue() != 0 {
			t.Fatalf("a pre-created series counts %v", m.GetCounter().GetValue())
		}
	}
}

// A label whose values come as they are counted leaves the family empty
// until the first count.
func TestCounterVecWithAnOpenLabelCreatesNothing(t *testing.T) {
	v := CounterVec("tally_collector_v_total", "h", By("mapper"), By("result", "match", "difference"))
	reg := prometheus.NewRegistry()
	if err := Register(reg, v); err != nil {
		t.Fatal(err)
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("gathered %d families before a count, %v", len(mfs), err)
	}
	v.WithLabelValues("nova", "match").Inc()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gathered %d families after a count, %v", len(mfs), err)
	}
	if got := series(mfs[0]); !slices.Equal(got, []string{"mapper=nova,result=match"}) {
		t.Fatalf("series %v", got)
	}
}
