package jsonindex

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustParse(t testing.TB, x *Index, s string) {
	t.Helper()
	if err := x.Parse([]byte(s)); err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
}

func TestLookup(t *testing.T) {
	doc := `{"a":1,"b":[true,"x",{"c":null}],"oslo.message":"m","e\u0073c":"\"q\"","":{"":false},
	"payload":{"fixed_ips":[{"address":"10.0.0.1"},{"address":"10.0.0.2"}],"n":-1.5e3,"o":{},"l":[]}, "dup":1, "dup":2}`
	var x Index
	mustParse(t, &x, doc)
	checkLookups(t, &x, []lookupCase{
		{"", Object, doc},
		{"a", Number, "1"},
		{"b", Array, `[true,"x",{"c":null}]`},
		{"b.0", True, "true"},
		{"b.1", String, "x"},
		{"b.2.c", Null, "null"},
		{"b.3", Missing, ""},
		{"b.x", Missing, ""},
		{"b.-1", Missing, ""},
		{"a.b", Missing, ""},
		{"oslo\\.message", String, "m"},
		{"oslo.message", Missing, ""},
		{"esc", String, `\"q\"`},
		{".", False, "false"},
		{"payload.fixed_ips.1.address", String, "10.0.0.2"},
		{"payload.fixed_ips.0.address", String, "10.0.0.1"},
		{"payload.n", Number, "-1.5e3"},
		{"payload.o", Object, "{}"},
		{"payload.l", Array, "[]"},
		{"payload.l.0", Missing, ""},
		{"payload.", Missing, ""},
		{"nope", Missing, ""},
		{"dup", Number, "2"}, // the last member of a name counts, as in Python's json
	})
}

// lookupCase is a path and what a lookup of it answers: the kind and the
// text of the value.
type lookupCase struct {
	path string
	kind Kind
	text string
}

// checkLookups fails unless Lookup answers each case, and LookupBytes and a
// Cursor agree with it.
func checkLookups(t *testing.T, x *Index, cases []lookupCase) {
	t.Helper()
	doc := x.Bytes()
	var c Cursor
	c.Reset(x)
	for _, tc := range cases {
		k, s, e := x.Lookup(tc.path)
		if k != tc.kind || string(doc[s:e]) != tc.text {
			t.Errorf("Lookup(%q) = %v %q, want %v %q", tc.path, k, doc[s:e], tc.kind, tc.text)
		}
		if k2, s2, e2 := x.LookupBytes([]byte(tc.path)); k2 != k || s2 != s || e2 != e {
			t.Errorf("LookupBytes(%q) differs from Lookup", tc.path)
		}
		if k2, s2, e2 := c.LookupBytes([]byte(tc.path)); k2 != k || s2 != s || e2 != e {
			t.Errorf("Cursor.LookupBytes(%q) = %v %q, Lookup %v %q", tc.path, k2, doc[s2:e2], k, doc[s:e])
		}
	}
}

func TestScalarRoot(t *testing.T) {
	var x Index
	for _, c := range []struct {
		doc  string
		kind Kind
		text string
	}{{` "s" `, String, "s"}, {"12", Number, "12"}, {"null", Null, "null"}, {"\tfalse\n", False, "false"}} {
		mustParse(t, &x, c.doc)
		k, s, e := x.Lookup("")
		if k != c.kind || string(x.Bytes()[s:e]) != c.text {
			t.Errorf("%q: got %v %q", c.doc, k, x.Bytes()[s:e])
		}
		if k, _, _ := x.Lookup("a"); k != Missing {
			t.Errorf("%q: member of a scalar found", c.doc)
		}
	}
}

func TestInvalid(t *testing.T) {
	bad := []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `[1 2]`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
		`"abc`, `"a\qb"`, `"\u12g4"`, "\"a\x01b\"", "\"\xff\"", `tru`, `nul`, `falsey`, `{} {}`, `[1]]`,
		`{"a":1]`, `[1}`, `NaN`, `"\ud800` + "\\", `{"a":}`, `{,}`, `[,1]`,
	}
	var x Index
	for _, b := range bad {
		err := x.Parse([]byte(b))
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", b, err)
		}
		if x.Valid() {
			t.Errorf("Parse(%q): Valid after an error", b)
		}
		if k, _, _ := x.Lookup(""); k != Missing {
			t.Errorf("Parse(%q): lookup after an error = %v", b, k)
		}
		if !bytes.Equal(x.Bytes(), []byte(b)) {
			t.Errorf("Parse(%q): Bytes not kept", b)
		}
	}
}

func TestDepth(t *testing.T) {
	var x Index
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if err := x.Parse([]byte(ok)); err != nil {
		t.Fatalf("depth %d: %v", MaxDepth, err)
	}
	deep := strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)
	if err := x.Parse([]byte(deep)); !errors.Is(err, ErrDepth) {
		t.Fatalf("depth %d: got %v, want ErrDepth", MaxDepth+1, err)
	}
}

func TestSetRaw(t *testing.T) {
	var x Index
	mustParse(t, &x, `{"a":1}`)
	x.SetRaw([]byte("<14>not json"))
	if x.Valid() || string(x.Bytes()) != "<14>not json" {
		t.Fatalf("SetRaw: Valid=%v Bytes=%q", x.Valid(), x.Bytes())
	}
	if k, _, _ := x.Lookup(""); k != Missing {
		t.Fatalf("lookup on raw input = %v", k)
	}
	if k, _, _ := x.Lookup("a"); k != Missing {
		t.Fatalf("lookup on raw input = %v", k)
	}
}

func TestAppendUnquote(t *testing.T) {
	cases := map[string]string{
		`plain`:                "plain",
		`a\"b\\c\/d\b\f\n\r\t`: "a\"b\\c/d\b\f\n\r\t",
		`\u00e9t\u00E9`:        "été",
		`\ud83d\ude00!`:        "😀!",
		`\ud800x`:              "\uFFFDx",
		`\udc00`:               "\uFFFD",
		"héllo":                "héllo",
	}
	for in, want := range cases {
		got, err := AppendUnquote([]byte(">"), []byte(in))
		if err != nil || string(got) != ">"+want {
			t.Errorf("AppendUnquote(%q) = %q, %v; want %q", in, got, err, want)
		}
		// Agree with encoding/json.
		var s string
		if err := json.Unmarshal([]byte(`"`+in+`"`), &s); err != nil || s != want {
			t.Errorf("encoding/json disagrees on %q: %q %v", in, s, err)
		}
	}
	for _, in := range []string{`\`, `\x`, `\u12`, `\u12x4`} {
		if _, err := AppendUnquote(nil, []byte(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("AppendUnquote(%q) err = %v", in, err)
		}
	}
}

func TestNovaSample(t *testing.T) {
	src := readNova(t)
	var x Index
	if err := x.Parse(src); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"event_type":          "compute.instance.exists",
		"payload.instance_id": "3a513875-95c9-4012-a3e7-f90c678854e5",
		"payload.memory_mb":   "512",
		"_context_roles.0":    "admin",
		"publisher_id":        "compute.vagrant-precise",
		"payload.ramdisk_id":  "1e3ce043029547f1a61c1996d1a531a6",
		"payload.bandwidth":   "{}",
		"_context_auth_token": "null",
		"_context_is_admin":   "true",
	} {
		k, s, e := x.Lookup(path)
		if k == Missing || string(src[s:e]) != want {
			t.Errorf("%s = %v %q, want %q", path, k, src[s:e], want)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := x.Parse(src); err != nil {
			t.Fatal(err)
		}
		x.Lookup("payload.instance_id")
		x.LookupBytes([]byte("payload.ramdisk_id"))
	})
	if allocs != 0 {
		t.Errorf("Parse+Lookup allocate %v times after warm-up", allocs)
	}
}

func readNova(t testing.TB) []byte {
	t.Helper()
	src, err := os.ReadFile("../../runtime/testdata/nova-compute.instance.exists.json")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// check verifies an index against encoding/json for a document it accepted:
// every value at every depth, looked up by its path (with Lookup and with a
// Cursor, which must agree), has the kind and the value encoding/json gives
// it, and AppendChildren lists as many members or elements as there are.
// Both keep the last of duplicate member names.
func check(t *testing.T, x *Index, src []byte) {
	var doc any
	if err := unmarshal(src, &doc); err != nil {
		t.Fatalf("Parse accepted %q, encoding/json refuses it: %v", src, err)
	}
	var c Cursor
	c.Reset(x)
	checkValue(t, x, &c, src, "", doc)
}

var pathEscaper = strings.NewReplacer(`\`, `\\`, `.`, `\.`)

func checkValue(t *testing.T, x *Index, c *Cursor, src []byte, path string, want any) {
	k, s, e := x.Lookup(path)
	if ck, cs, ce := c.LookupBytes([]byte(path)); ck != k || cs != s || ce != e {
		t.Fatalf("path %q: Cursor answers %v [%d,%d), Lookup %v [%d,%d) in %q", path, ck, cs, ce, k, s, e, src)
	}
	if wk := kindOf(want); k != wk {
		t.Fatalf("path %q: kind %v, encoding/json says %v, in %q", path, k, wk, src)
	}
	children := x.AppendChildren(nil, path)
	switch w := want.(type) {
	case map[string]any:
		counts := map[string]int{}
		for _, ch := range children {
			name, err := AppendUnquote(nil, src[ch.KeyStart:ch.KeyEnd])
			if err != nil {
				t.Fatalf("path %q: member name %q: %v", path, src[ch.KeyStart:ch.KeyEnd], err)
			}
			counts[string(name)]++
		}
		if len(counts) != len(w) {
			t.Fatalf("path %q: %d distinct member names, encoding/json has %d, in %q", path, len(counts), len(w), src)
		}
		for name, v := range w {
			if path == "" && name == "" { // "" alone is the document itself
				continue
			}
			p := pathEscaper.Replace(name)
			if path != "" {
				p = path + "." + p
			}
			checkValue(t, x, c, src, p, v)
		}
	case []any:
		if len(children) != len(w) {
			t.Fatalf("path %q: %d elements, encoding/json has %d, in %q", path, len(children), len(w), src)
		}
		for i, v := range w {
			p := strconv.Itoa(i)
			if path != "" {
				p = path + "." + p
			}
			checkValue(t, x, c, src, p, v)
		}
	default:
		if len(children) != 0 {
			t.Fatalf("path %q: a scalar with %d children", path, len(children))
		}
		text := src[s:e]
		if k == String {
			text = []byte(`"` + string(text) + `"`)
		}
		var got any
		if err := unmarshal(text, &got); err != nil {
			t.Fatalf("path %q: span %q not JSON: %v", path, text, err)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("path %q: got %s want %s", path, gb, wb)
		}
	}
}

func kindOf(v any) Kind {
	switch v := v.(type) {
	case nil:
		return Null
	case bool:
		if v {
			return True
		}
		return False
	case json.Number:
		return Number
	case string:
		return String
	case map[string]any:
		return Object
	case []any:
		return Array
	}
	return Missing
}

func unmarshal(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"a":[1,2,{"b":"c\u00e9"}],"d.e":null}`))
	f.Add([]byte(`[true,false,-0.5E+2,"\ud83d\ude00"]`))
	f.Add([]byte(`{"\u0061":1,"a":2}`))
	f.Add([]byte(`"x`))
	f.Add([]byte(`{"a.b":{"c\\d":[[],{},{"":0}]},"a":{"b":1},"\u0030":[null,"\u00e9\n"]}`))
	f.Add([]byte(`{"k":1,"k":{"x":2}}`))
	f.Add([]byte(`[[[[{"deep":[1e5,-0,0.25E-3]}]]]]`))
	// Past smallContainer: an object and an array with tables, duplicates
	// and escaped names among the members.
	f.Add([]byte(`{"o":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,` +
		`"n":14,"o":15,"p":16,"q":17,"\u0061":{"x":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]},"b":null}}`))
	if src, err := os.ReadFile("../../runtime/testdata/nova-compute.instance.exists.json"); err == nil {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		var x Index
		err := x.Parse(src)
		if err == nil {
			if !json.Valid(src) {
				t.Fatalf("accepted invalid JSON %q", src)
			}
			check(t, &x, src)
			return
		}
		if k, _, _ := x.Lookup(""); k != Missing || x.Valid() {
			t.Fatalf("refused %q (%v), yet the document answers %v", src, err, k)
		}
		if errors.Is(err, ErrDepth) {
			return
		}
		if json.Valid(src) && utf8.Valid(src) {
			t.Fatalf("refused valid JSON %q: %v", src, err)
		}
	})
}

func BenchmarkParseNova(b *testing.B) {
	src := readNova(b)
	var x Index
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if err := x.Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookupNova(b *testing.B) {
	src := readNova(b)
	var x Index
	if err := x.Parse(src); err != nil {
		b.Fatal(err)
	}
	paths := []string{"event_type", "message_id", "timestamp", "publisher_id", "payload.instance_id",
		"payload.tenant_id", "payload.user_id", "payload.memory_mb", "payload.vcpus", "payload.ramdisk_id",
		"_context_project_id"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if k, _, _ := x.Lookup(paths[i%len(paths)]); k == Missing {
			b.Fatal("missing")
		}
	}
}

func BenchmarkEncodingJSONValidNova(b *testing.B) {
	src := readNova(b)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if !json.Valid(src) {
			b.Fatal("invalid")
		}
	}
}

func TestAppendChildren(t *testing.T) {
	var x Index
	doc := `{"events":[{"a":1,"source":{"x":"y"},"a":"s"},2],"s":"t"}`
	mustParse(t, &x, doc)
	ev := x.AppendChildren(nil, "events")
	if len(ev) != 2 || ev[0].Kind != Object || ev[1].Kind != Number || doc[ev[1].Start:ev[1].End] != "2" || ev[0].KeyEnd != 0 {
		t.Fatalf("events children = %+v", ev)
	}
	m := x.AppendChildren(nil, "events.0")
	if len(m) != 3 {
		t.Fatalf("members = %+v", m)
	}
	want := []string{`a=1`, `source={"x":"y"}`, `a=s`}
	for i, c := range m {
		if got := doc[c.KeyStart:c.KeyEnd] + "=" + doc[c.Start:c.End]; got != want[i] {
			t.Errorf("member %d = %s, want %s", i, got, want[i])
		}
	}
	if got := x.AppendChildren(m[:0], "s"); len(got) != 0 {
		t.Errorf("children of a string: %+v", got)
	}
	if got := x.AppendChildrenBytes(m[:0], []byte("nope")); len(got) != 0 {
		t.Errorf("children of a missing path: %+v", got)
	}
}

// pathsDoc is a document with escaped member names, a member named "", one
// with a dot and one with a backslash in its name, arrays and every kind of
// value; pathsOfDoc are paths into it, found and not found, with escapes and
// trailing dots, for the tests that answer a path as Lookup does.
const pathsDoc = `{"a":1,"b":[true,"x",{"c":null,"d.e":2}],"oslo.message":{"x":"y"},"e\u0073c":{"q":3},"":{"":false,"x":{"y":1}},
	"payload":{"fixed_ips":[{"address":"10.0.0.1"},{"address":"10.0.0.2"}],"n":-1.5e3,"o":{},"l":[],"":7,"a\\b":{"c":8}}}`

var pathsOfDoc = []string{"", "a", "b", "b.0", "b.1", "b.2.c", "b.2.d\\.e", "b.2.d.e", "b.3", "b.x", "a.b", "oslo\\.message.x",
	"oslo.message.x", "esc.q", "e\\sc.q", ".", "..", ".x.y", "x.", "payload.fixed_ips.1.address", "payload.fixed_ips.0.address",
	"payload.fixed_ips.2.address", "payload.n", "payload.o", "payload.l.0", "payload.", "payload.a\\\\b.c", "payload.a\\b.c",
	"nope.x", "nope.y", "payload.nope", "payload\\.n", "b.2.c.d", "payload.fixed_ips.1.address\\"}

// TestCursor: a Cursor answers every path exactly as Lookup does, in every
// order (so with and without a remembered parent), escapes and trailing dots
// included.
func TestCursor(t *testing.T) {
	var x Index
	mustParse(t, &x, pathsDoc)
	paths := pathsOfDoc
	var c Cursor
	check := func(order []string) {
		c.Reset(&x)
		for _, p := range order {
			k, s, e := x.Lookup(p)
			k2, s2, e2 := c.LookupBytes([]byte(p))
			if k != k2 || s != s2 || e != e2 {
				t.Errorf("Cursor.LookupBytes(%q) = %v [%d,%d), Lookup %v [%d,%d)", p, k2, s2, e2, k, s, e)
			}
		}
	}
	check(paths)
	for i := range paths {
		// Each path after every other one.
		for j := range paths {
			check([]string{paths[j], paths[i]})
		}
	}
	// A Cursor reset on another document forgets the parent.
	var y Index
	mustParse(t, &y, `{"payload":{"n":1}}`)
	c.Reset(&x)
	c.LookupBytes([]byte("payload.n"))
	c.Reset(&y)
	if k, s, e := c.LookupBytes([]byte("payload.n")); k != Number || string(y.Bytes()[s:e]) != "1" {
		t.Fatalf("after Reset: %v %q", k, y.Bytes()[s:e])
	}
	var z Cursor
	if k, _, _ := z.LookupBytes([]byte("a")); k != Missing {
		t.Fatal("zero Cursor answered")
	}
}

func BenchmarkCursorNova(b *testing.B) {
	src := readNova(b)
	var x Index
	if err := x.Parse(src); err != nil {
		b.Fatal(err)
	}
	paths := [][]byte{[]byte("event_type"), []byte("message_id"), []byte("timestamp"), []byte("publisher_id"),
		[]byte("payload.instance_id"), []byte("payload.tenant_id"), []byte("payload.user_id"), []byte("payload.memory_mb"),
		[]byte("payload.vcpus"), []byte("payload.ramdisk_id"), []byte("_context_project_id")}
	var c Cursor
	c.Reset(&x)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if k, _, _ := c.LookupBytes(paths[i%len(paths)]); k == Missing {
			b.Fatal("missing")
		}
	}
}

// mapperPaths are the lookups of a nova mapper, in its order: mostly
// members of payload, a few at the top level in between.
var mapperPaths = [][]byte{[]byte(`payload.nova_object\.data`), []byte("event_type"), []byte("message_id"),
	[]byte("timestamp"), []byte("payload.instance_id"), []byte("payload.tenant_id"), []byte("payload.user_id"),
	[]byte("payload.instance_type"), []byte("payload.instance_flavor_id"), []byte("payload.vcpus"),
	[]byte("payload.memory_mb"), []byte("payload.root_gb"), []byte("payload.ephemeral_gb"), []byte("payload.disk_gb"),
	[]byte("payload.state"), []byte("payload.image_ref"), []byte("payload.image_meta.base_image_ref"),
	[]byte("payload.availability_zone"), []byte("payload.host"), []byte("payload.launched_at"),
	[]byte("payload.terminated_at"), []byte("payload.deleted_at")}

// BenchmarkMapperPaths: one mapper's lookups, plain and through a Cursor
// (what the host's tally.fields does), per set of 22.
func BenchmarkMapperPaths(b *testing.B) {
	src := readNova(b)
	var x Index
	if err := x.Parse(src); err != nil {
		b.Fatal(err)
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			for _, p := range mapperPaths {
				x.LookupBytes(p)
			}
		}
	})
	b.Run("cursor", func(b *testing.B) {
		var c Cursor
		for b.Loop() {
			c.Reset(&x)
			for _, p := range mapperPaths {
				c.LookupBytes(p)
			}
		}
	})
}

// specialMask is the eight-byte form of strSpecial: it must be nonzero
// exactly when one of the word's bytes is special, whatever the others, and
// its lowest mark must name the first byte the table marks.
func TestWordSpecialAgreesWithTheTable(t *testing.T) {
	want := func(w [8]byte) bool {
		for _, c := range w {
			if strSpecial[c] {
				return true
			}
		}
		return false
	}
	// The first byte that needs attention, 8 when none does: what the
	// lowest mark of specialMask must name.
	first := func(w [8]byte) int {
		for i, c := range w {
			if strSpecial[c] {
				return i
			}
		}
		return 8
	}
	check := func(w [8]byte) {
		t.Helper()
		if got := specialMask(binary.LittleEndian.Uint64(w[:])) != 0; got != want(w) {
			t.Fatalf("specialMask(%q) != 0 is %v, want %v", w[:], got, want(w))
		}
		if got := bits.TrailingZeros64(specialMask(binary.LittleEndian.Uint64(w[:]))) >> 3; got != first(w) {
			t.Fatalf("specialMask(%q) marks byte %d first, want %d", w[:], got, first(w))
		}
	}
	// Every byte value at every position, among plain bytes and among
	// bytes just above and below the limits.
	for _, fill := range []byte{'a', ' ', '!', '#', '[', ']', 0x7f, '~'} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	// Every pair of values at two positions (the borrows of one byte must
	// not hide or invent the other).
	for c1 := 0; c1 < 256; c1++ {
		for c2 := 0; c2 < 256; c2++ {
			w := [8]byte{'a', byte(c1), 'b', 'c', byte(c2), 'd', 'e', 'f'}
			check(w)
		}
	}
	// Random words, seeded.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
	}
}

// Strings of every length around the word size, with the special byte at
// every place, scan as they did one byte at a time.
func TestScanStringEveryLengthAndPlace(t *testing.T) {
	for n := 0; n <= 40; n++ {
		for at := -1; at < n; at++ {
			for _, special := range []string{`\"`, `\\`, `\u00e9`, "é", "\x01", `"`} {
				body := []byte(strings.Repeat("x", n))
				if at >= 0 {
					body = append(body[:at:at], append([]byte(special), body[at:]...)...)
				}
				src := append(append([]byte{'"'}, body...), '"')
				var x Index
				err := x.Parse(src)
				if json.Valid(src) != (err == nil) {
					t.Fatalf("%q: Parse error %v, encoding/json valid %v", src, err, json.Valid(src))
				}
				if err == nil {
					var want string
					if e := json.Unmarshal(src, &want); e != nil {
						t.Fatal(e)
					}
					k, s, e := x.Lookup("")
					got, uerr := AppendUnquote(nil, x.Bytes()[s:e])
					if k != String || uerr != nil || string(got) != want {
						t.Fatalf("%q: %v %q %v, want %q", src, k, got, uerr, want)
					}
				}
			}
		}
	}
}

// largeObject is {"payload":{"m00000":0,...}} with n members in payload, in
// the order of their names.
func largeObject(n int) []byte {
	b := []byte(`{"payload":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `"m%05d":%d`, i, i)
	}
	return append(b, "}}"...)
}

// BenchmarkLargeObject: lookups of members of a 50,000-member object, 1,000
// names spread over it in turn (lookup, cursor: per lookup, the object
// already parsed), and a whole notification's worth: Parse, then the 1,000
// lookups (parse+1000, per document).
func BenchmarkLargeObject(b *testing.B) {
	const n, k = 50000, 1000
	src := largeObject(n)
	paths := make([][]byte, k)
	for i := range paths {
		paths[i] = fmt.Appendf(nil, "payload.m%05d", (i*n/k+i)%n)
	}
	var x Index
	if err := x.Parse(src); err != nil {
		b.Fatal(err)
	}
	b.Run("lookup", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if kd, _, _ := x.LookupBytes(paths[i%k]); kd != Number {
				b.Fatalf("%s: %v", paths[i%k], kd)
			}
		}
	})
	b.Run("cursor", func(b *testing.B) {
		var c Cursor
		c.Reset(&x)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if kd, _, _ := c.LookupBytes(paths[i%k]); kd != Number {
				b.Fatalf("%s: %v", paths[i%k], kd)
			}
		}
	})
	b.Run("parse+1000", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			if err := x.Parse(src); err != nil {
				b.Fatal(err)
			}
			for _, p := range paths {
				if kd, _, _ := x.LookupBytes(p); kd != Number {
					b.Fatalf("%s: %v", p, kd)
				}
			}
		}
	})
	// The same lookups in batches of 256, as tally.fields asks for them.
	b.Run("parse+1000-batched", func(b *testing.B) {
		out := make([]Span, 256)
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			if err := x.Parse(src); err != nil {
				b.Fatal(err)
			}
			for lo := 0; lo < len(paths); lo += 256 {
				batch := paths[lo:min(len(paths), lo+256)]
				x.LookupMany(batch, out)
				for i := range batch {
					if out[i].Kind != Number {
						b.Fatalf("%s: %v", batch[i], out[i].Kind)
					}
				}
			}
		}
	})
}
