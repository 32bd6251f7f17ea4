package pipeline

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// decodeTwoPass is the decode that reads the envelope in passes: the
// envelope indexed, oslo.message looked up, its string unquoted into a
// buffer, the buffer indexed. decode must answer as it does.
func decodeTwoPass(s *scratch, body []byte) (*jsonindex.Index, bool) {
	if err := s.outer.Parse(body); err != nil {
		return nil, false
	}
	k, start, end := s.outer.Lookup(`oslo\.message`)
	if k == jsonindex.Missing {
		return &s.outer, true
	}
	if k != jsonindex.String {
		return nil, false
	}
	var err error
	s.buf, err = jsonindex.AppendUnquote(s.buf[:0], body[start:end])
	if err != nil {
		return nil, false
	}
	if err := s.inner.Parse(s.buf); err != nil {
		return nil, false
	}
	return &s.inner, true
}

var pathEscaper = strings.NewReplacer(`\`, `\\`, `.`, `\.`)

// paths lists the path of every value of x under path.
func paths(x *jsonindex.Index, path string) []string {
	all := []string{path}
	for i, c := range x.AppendChildren(nil, path) {
		seg := strconv.Itoa(i)
		if c.KeyEnd > 0 {
			name, err := jsonindex.AppendUnquote(nil, x.Bytes()[c.KeyStart:c.KeyEnd])
			if err != nil {
				continue
			}
			seg = pathEscaper.Replace(string(name))
		}
		if path == "" && seg == "" {
			continue // the path "" is the document itself
		}
		p := seg
		if path != "" {
			p = path + "." + seg
		}
		all = append(all, paths(x, p)...)
	}
	return all
}

// checkDecode fails unless decode and decodeTwoPass agree on body: both
// refuse it, or both accept it with the same bytes (the module's input), the
// same index (the same answer to every path's lookup) and the same choice
// of envelope or inner message.
func checkDecode(t *testing.T, p *Pipeline, s *scratch, body []byte) {
	t.Helper()
	var ref scratch
	want, wantOK := decodeTwoPass(&ref, body)
	got, ok := p.decode(s, body)
	if ok != wantOK {
		t.Fatalf("%q: decoded %v, the two passes %v", body, ok, wantOK)
	}
	if !ok {
		return
	}
	if (got == &s.outer) != (want == &ref.outer) {
		t.Fatalf("%q: the envelope itself %v, the two passes %v", body, got == &s.outer, want == &ref.outer)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("%q: input\n%q\nthe two passes\n%q", body, got.Bytes(), want.Bytes())
	}
	if got.Len() != want.Len() {
		t.Fatalf("%q: %d values, the two passes %d", body, got.Len(), want.Len())
	}
	for _, path := range paths(want, "") {
		gk, gs, ge := got.Lookup(path)
		wk, ws, we := want.Lookup(path)
		if gk != wk || gs != ws || ge != we {
			t.Fatalf("%q: Lookup(%q) = %v [%d,%d), the two passes %v [%d,%d)", body, path, gk, gs, ge, wk, ws, we)
		}
	}
}

// decodeSeeds: every body of the fixture corpus; every inner message of the
// mappers' fixtures and fuzz corpora and the fixture package's hostile
// inputs, each wrapped as oslo.messaging wraps it; and each body broken in
// the ways the envelope's string can be broken.
func decodeSeeds(t testing.TB) [][]byte {
	t.Helper()
	read := func(pattern string) [][]byte { // in the order of the paths
		files := testkit.ReadGlob(t, pattern)
		var out [][]byte
		for _, p := range slices.Sorted(maps.Keys(files)) {
			out = append(out, files[p])
		}
		return out
	}
	wrap := func(inner []byte) []byte {
		s, _ := json.Marshal(string(inner))
		return []byte(`{"oslo.version": "2.0", "oslo.message": ` + string(s) + `}`)
	}
	var bodies [][]byte
	for _, pat := range []string{"testdata/*.body", "../input/broker/testdata/wire/*.body",
		"../../mappers/testdata/envelope/*.body", "../../examples/publisher/testdata/*.body"} {
		bodies = append(bodies, read(pat)...)
	}
	var inners [][]byte
	inners = append(inners, read("../../mappers/*/testdata/*.in.json")...)
	for _, c := range read("../../mappers/*/testdata/fuzz/FuzzMap/*") {
		// go test fuzz v1, then []byte("...").
		_, arg, _ := bytes.Cut(c, []byte("\n"))
		arg = bytes.TrimSpace(arg)
		if s, err := strconv.Unquote(string(bytes.TrimSuffix(bytes.TrimPrefix(arg, []byte("[]byte(")), []byte(")")))); err == nil {
			inners = append(inners, []byte(s))
		}
	}
	inners = append(inners, fixture.HostileInputs("compute.instance.exists")...)
	seeds := bodies
	for _, in := range inners {
		seeds = append(seeds, wrap(in), in)
	}
	// Each body broken where its string is: a raw control byte, an
	// invalid escape, a cut escape, a lone surrogate, a NUL and a control
	// character the document refuses, \u escapes json.dumps does not write.
	for _, b := range bodies {
		i := bytes.Index(b, []byte(`"oslo.message": "`))
		if i < 0 {
			continue
		}
		i += len(`"oslo.message": "`)
		at := func(j int, ins string) []byte {
			return append(append(append([]byte(nil), b[:j]...), ins...), b[j:]...)
		}
		mid := i + (len(b)-i)/2
		for mid < len(b) && b[mid] != ' ' {
			mid++
		}
		seeds = append(seeds, at(mid, "\x01"), at(mid, `\x`), at(mid, `\u12`), at(mid, `\`),
			at(mid, `\ud800`), at(mid, `\u0000`), at(mid, `\n`), at(mid, `\u0020`), at(i+1, `\u0022`),
			at(mid, "\xff"), b[:mid], append(bytes.Clone(b[:len(b)-1]), `, "oslo.message": "[1]"}`...))
	}
	return seeds
}

// TestDecodeAsTwoPasses: decode reads the envelope once and answers as the
// passes it replaces did, on every seed.
func TestDecodeAsTwoPasses(t *testing.T) {
	p := &Pipeline{}
	var s scratch
	for _, b := range decodeSeeds(t) {
		checkDecode(t, p, &s, b)
	}
}

// TestDecodeRefuses: the envelope's refusals, each as a reason: the string
// broken, or the message in it not JSON.
func TestDecodeRefuses(t *testing.T) {
	p := &Pipeline{}
	var s scratch
	for _, body := range []string{
		"{\"oslo.version\": \"2.0\", \"oslo.message\": \"{\\\"a\\\": \x01}\"}", // a raw control byte
		`{"oslo.version": "2.0", "oslo.message": "{\"a\": \x}"}`,               // an invalid escape
		`{"oslo.version": "2.0", "oslo.message": "{\"a\": \"\n\"}"}`,           // a control character in the message's string
		`{"oslo.version": "2.0", "oslo.message": "{\"a\": \"\b\"}"}`,           // another
		`{"oslo.version": "2.0", "oslo.message": "{\"a\": \"\u0009\"}"}`,       // another, as \u
		`{"oslo.version": "2.0", "oslo.message": "{\"a\": 1"}`,                 // the message cut
		`{"oslo.version": "2.0", "oslo.message": 7}`,                           // not a string
		`{"oslo.version": "2.0", "oslo.message": "{}", "oslo.message": "x"}`,   // the last one counts
		`{"oslo.version": "2.0", "oslo.message": "{}"`,                         // the envelope cut
	} {
		if _, ok := p.decode(&s, []byte(body)); ok {
			t.Errorf("decoded %q", body)
		}
		checkDecode(t, p, &s, []byte(body))
	}
	in, ok := p.decode(&s, []byte(`{"oslo.version": "2.0", "oslo.message": "{\"a\": \"\ud800\u00e9\"}"}`))
	if !ok {
		t.Fatal("a lone surrogate refused")
	}
	if k, st, e := in.Lookup("a"); k != jsonindex.String || string(in.Bytes()[st:e]) != "\uFFFDé" {
		t.Fatalf("a = %v %q", k, in.Bytes()[st:e])
	}
}

func FuzzDecode(f *testing.F) {
	for _, b := range decodeSeeds(f) {
		f.Add(b)
	}
	p := &Pipeline{}
	f.Fuzz(func(t *testing.T, body []byte) {
		var s scratch
		checkDecode(t, p, &s, body)
	})
}
