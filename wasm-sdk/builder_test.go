//go:build !wasip1

package sdk_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

const doc = `{
  "s": "plain", "esc": "a\"b\\c\u00e9\n", "empty": "", "null": null,
  "n": 42, "neg": -7, "f": 1.5, "big": 1e3, "huge": 1e30, "sn": "512", "sf": "2.5", "sbad": " 5",
  "t": true, "fl": false, "obj": {"a.b": {"c": [10, {"d": "deep"}]}}, "arr": [1, 2],
  "ts": "2024-05-01 12:00:00.123456"
}`

// mapDoc runs f on doc and returns the output document.
func mapDoc(t *testing.T, f sdk.MapFunc) string {
	t.Helper()
	out, err := sdk.MapJSON(f, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) || !utf8.Valid(out) {
		t.Fatalf("output is not valid JSON: %s", out)
	}
	return string(out)
}

func TestValues(t *testing.T) {
	mapDoc(t, func(m *sdk.Message, _ *sdk.Output) {
		for _, tc := range []struct {
			path   string
			kind   sdk.Kind
			raw    string
			exists bool
		}{
			{"s", sdk.String, "plain", true},
			{"esc", sdk.String, `a\"b\\c\u00e9\n`, true},
			{"null", sdk.Null, "null", false},
			{"missing", sdk.Missing, "", false},
			{"n", sdk.Number, "42", true},
			{"t", sdk.True, "true", true},
			{"fl", sdk.False, "false", true},
			{"arr", sdk.Array, "[1, 2]", true},
			{"arr.1", sdk.Number, "2", true},
			{"arr.2", sdk.Missing, "", false},
			{`obj.a\.b.c.1.d`, sdk.String, "deep", true},
			{`obj.a\.b.c.0`, sdk.Number, "10", true},
			{"obj.a.b", sdk.Missing, "", false},
		} {
			v := m.Get(tc.path)
			if v.Kind() != tc.kind || string(v.Raw()) != tc.raw || v.Exists() != tc.exists {
				t.Errorf("Get(%q) = %v %q exists=%v, want %v %q %v", tc.path, v.Kind(), v.Raw(), v.Exists(), tc.kind, tc.raw, tc.exists)
			}
		}
		if got := m.Get("").Kind(); got != sdk.Object {
			t.Errorf(`Get("") kind %v, want object`, got)
		}
		if got := m.Get("esc").String(); got != "a\"b\\cé\n" {
			t.Errorf("String() = %q", got)
		}
		if got := m.Get("n").String(); got != "42" {
			t.Errorf("String() of a number = %q", got)
		}
		if got := m.Get("null").String(); got != "" {
			t.Errorf("String() of null = %q", got)
		}
		s := m.Get("s")
		if !s.Equal("plain") || s.Equal("plai") || !s.HasPrefix("pl") || s.HasPrefix("plainer") ||
			!s.HasSuffix("ain") || s.HasSuffix("xplain") || m.Get("n").Equal("42") {
			t.Error("Equal/HasPrefix/HasSuffix disagree")
		}
		for _, tc := range []struct {
			path string
			i    int64
			iok  bool
			f    float64
			fok  bool
		}{
			{"n", 42, true, 42, true},
			{"neg", -7, true, -7, true},
			{"f", 0, false, 1.5, true},
			{"big", 1000, true, 1000, true},
			{"huge", 0, false, 1e30, true},
			{"sn", 512, true, 512, true},
			{"sf", 0, false, 2.5, true},
			{"sbad", 0, false, 0, false},
			{"s", 0, false, 0, false},
			{"t", 0, false, 0, false},
			{"missing", 0, false, 0, false},
		} {
			i, iok := m.Get(tc.path).Int()
			f, fok := m.Get(tc.path).Float()
			if i != tc.i || iok != tc.iok || f != tc.f || fok != tc.fok {
				t.Errorf("%s: Int %d %v Float %v %v, want %d %v %v %v", tc.path, i, iok, f, fok, tc.i, tc.iok, tc.f, tc.fok)
			}
		}
		if got := m.Get("empty").Or(m.Get("null")).Or(m.Get("missing")).Or(m.Get("s")); !got.Equal("plain") {
			t.Errorf("Or chain gave %q", got.Raw())
		}
		if got := m.Get("n").Or(m.Get("s")); got.Kind() != sdk.Number {
			t.Errorf("Or replaced an existing value")
		}
		if string(m.Raw()) != doc {
			t.Error("Raw() is not the input")
		}
	})
}

func TestBuilder(t *testing.T) {
	got := mapDoc(t, func(m *sdk.Message, out *sdk.Output) {
		e := out.Event()
		e.Str("lit", "q\"\x01é")
		e.StrValue("s", m.Get("s"))
		e.StrValue("esc", m.Get("esc"))
		e.StrValue("n_as_str", m.Get("n"))
		e.StrValue("t_as_str", m.Get("t"))
		if e.StrValue("null", m.Get("null")) || e.StrValue("missing", m.Get("missing")) || e.StrValue("obj", m.Get("obj")) {
			t.Error("StrValue wrote null, missing or an object")
		}
		e.NumValue("n", m.Get("n"))
		e.NumValue("sn", m.Get("sn"))
		e.NumValue("big", m.Get("big"))
		if e.NumValue("sbad", m.Get("sbad")) || e.NumValue("s", m.Get("s")) || e.NumValue("t", m.Get("t")) {
			t.Error("NumValue wrote a non-number")
		}
		e.Int("min", -9223372036854775808)
		e.Int("zero", 0)
		e.Bool("yes", true)
		e.Bool("no", false)
		e.Timestamp("ts", m.Get("ts"))
		if e.Timestamp("bad", m.Get("s")) || e.Timestamp("num", m.Get("n")) {
			t.Error("Timestamp wrote an unparsable value")
		}
		a := e.Object("attributes")
		a.Object("inner").End()
		a.Int("after", 1)
		a.End()
		e.End()
		e.Str("ignored", "after the event was closed")
		e.End()
		out.Event().Str("second", "x") // left open: closed by the SDK
	})
	want := `{"events":[{"lit":"q\"\u0001é","s":"plain","esc":"a\"b\\c\u00e9\n","n_as_str":"42","t_as_str":"true",` +
		`"n":42,"sn":512,"big":1e3,"min":-9223372036854775808,"zero":0,"yes":true,"no":false,` +
		`"ts":"2024-05-01T12:00:00.123456Z","attributes":{"inner":{},"after":1}},{"second":"x"}]}`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestNoEvents(t *testing.T) {
	if got := mapDoc(t, func(*sdk.Message, *sdk.Output) {}); got != `{"events":[]}` {
		t.Fatalf("got %s", got)
	}
}

func TestError(t *testing.T) {
	got := mapDoc(t, func(_ *sdk.Message, out *sdk.Output) {
		out.Event().Str("a", "b")
		out.Error(`unknown "shape"`)
	})
	if got != `{"error":"unknown \"shape\""}` {
		t.Fatalf("got %s", got)
	}
}

func TestPanicBecomesError(t *testing.T) {
	out, err := sdk.MapJSON(func(m *sdk.Message, o *sdk.Output) {
		o.Event().Str("a", "b")
		var arr []int
		_ = arr[m.Get("n").Kind()] // index out of range
	}, []byte(doc))
	if !errors.Is(err, sdk.ErrPanic) {
		t.Fatalf("err = %v, want ErrPanic", err)
	}
	var d struct{ Error string }
	if json.Unmarshal(out, &d) != nil || !strings.HasPrefix(d.Error, "panic: runtime error: index out of range") {
		t.Fatalf("output %s", out)
	}
}

func TestNotJSON(t *testing.T) {
	for _, in := range []string{"plain text line", `{"unterminated": `, "\xff\xfe", ""} {
		out, err := sdk.MapJSON(func(m *sdk.Message, o *sdk.Output) {
			if m.Get("").Exists() || m.Get("a").Exists() {
				t.Errorf("lookup answered on non-JSON input %q", in)
			}
			if string(m.Raw()) != in {
				t.Errorf("Raw() = %q, want %q", m.Raw(), in)
			}
			o.Event().Int("len", int64(len(m.Raw())))
		}, []byte(in))
		if err != nil || !json.Valid(out) {
			t.Fatalf("%q: %s %v", in, out, err)
		}
	}
}

// TestInputWithInvalidUTF8: whatever the input carries, the output stays
// valid UTF-8 JSON.
func TestInputWithInvalidUTF8(t *testing.T) {
	in := []byte("{\"name\":\"bad \xff\xfe byte\",\"ok\":\"fine\"}")
	out, err := sdk.MapJSON(func(m *sdk.Message, o *sdk.Output) {
		e := o.Event()
		e.StrValue("name", m.Get("name"))
		e.StrValue("ok", m.Get("ok"))
	}, in)
	if err != nil || !json.Valid(out) || !utf8.Valid(out) {
		t.Fatalf("%q %v", out, err)
	}
	var d struct{ Events []map[string]string }
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if name, ok := d.Events[0]["name"]; ok && name != "bad \uFFFD\uFFFD byte" {
		t.Fatalf("name = %q", name)
	}
}

func TestMapJSONNil(t *testing.T) {
	if _, err := sdk.MapJSON(nil, []byte("{}")); !errors.Is(err, sdk.ErrNilMapFunc) {
		t.Fatalf("err = %v", err)
	}
}

// TestGetMany: GetMany answers for each path what Get does, in order,
// escapes, arrays, missing members and a trailing dot included.
// getManyPaths are the paths TestGetMany asks for at once.
var getManyPaths = []string{"s", "esc", "obj.a\\.b.c.1.d", "obj.a.b", "arr.1", "null", "nope", "", "obj.", "n", "obj.a\\.b.c.0"}

func TestGetMany(t *testing.T) {
	paths := getManyPaths
	mapDoc(t, func(m *sdk.Message, out *sdk.Output) {
		got := make([]sdk.Value, len(paths)+1)
		m.GetMany(paths, got)
		for i, p := range paths {
			want := m.Get(p)
			if got[i].Kind() != want.Kind() || string(got[i].Raw()) != string(want.Raw()) {
				t.Errorf("GetMany %q = %v %q, Get %v %q", p, got[i].Kind(), got[i].Raw(), want.Kind(), want.Raw())
			}
		}
		if got[len(paths)].Kind() != sdk.Missing {
			t.Error("GetMany wrote past len(paths)")
		}
		m.GetMany(nil, nil)
	})
}

// Quantity writes a number only within the event contract's range for its
// name, and leaves out what the collector would drop.
func TestQuantity(t *testing.T) {
	const in = `{"n":4,"neg":-1,"negzero":-0,"neginf":-1e999,"inf":1e999,"big":1e18,"s":"16","sneg":"-5",` +
		`"vmax":65536,"vover":65537,"frac":0.5,"str":"x","t":true}`
	out, err := sdk.MapJSON(func(m *sdk.Message, o *sdk.Output) {
		a := o.Event()
		for _, c := range []struct {
			key, path string
			want      bool
		}{
			{"vcpus", "n", true}, {"vcpus", "neg", false}, {"vcpus", "negzero", false},
			{"vcpus", "neginf", false}, {"memory_mb", "inf", false}, {"memory_mb", "big", false},
			{"seats", "big", false}, {"size_bytes", "big", false}, {"disk_gb", "s", true},
			{"disk_gb", "sneg", false}, {"vcpus", "vmax", true}, {"vcpus", "vover", false},
			{"kwh", "frac", true}, {"kwh", "str", false}, {"kwh", "t", false}, {"kwh", "missing", false},
		} {
			if got := a.Quantity(c.key, m.Get(c.path)); got != c.want {
				t.Errorf("Quantity(%s, %s) = %v, want %v", c.key, c.path, got, c.want)
			}
		}
	}, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"events":[{"vcpus":4,"disk_gb":16,"vcpus":65536,"kwh":0.5}]}`
	if string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
}

// The comparisons read a string as a JSON reader decodes it.
func TestComparisonsDecode(t *testing.T) {
	_, err := sdk.MapJSON(func(m *sdk.Message, o *sdk.Output) {
		et := m.Get("event_type")
		if !et.Equal("compute.instance.exists") || !et.HasPrefix("compute.instance.") || !et.HasSuffix(".exists") {
			t.Errorf("escaped %q does not compare as compute.instance.exists", et.Raw())
		}
		if et.Equal(string(et.Raw())) || et.HasSuffix("s\\u0073") {
			t.Error("compared the escaped bytes")
		}
		if m.Get("n").Equal("1") {
			t.Error("a number equals a string")
		}
	}, []byte(`{"event_type":"compute\u002einstance.exist\u0073","n":1}`))
	if err != nil {
		t.Fatal(err)
	}
}
