package jsonindex

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// twoPassQuoted is what ParseQuoted reads at once, in the passes it
// replaces: the string scanned for its end, its content unquoted, the result
// parsed.
func twoPassQuoted(x *Index, src []byte, i int) (doc []byte, end int, err error) {
	end, _, err = scanString(src, i)
	if err != nil {
		x.Reset()
		return nil, -1, err
	}
	if doc, err = AppendUnquote(nil, src[i:end]); err != nil {
		x.Reset()
		return nil, -1, err
	}
	return doc, end, x.Parse(doc)
}

// sameIndex fails unless got and want index the same bytes the same way:
// the same node table and, for every path of the document, the same answer
// from Lookup and from a Cursor.
func sameIndex(t *testing.T, in []byte, got, want *Index) {
	t.Helper()
	if got.Valid() != want.Valid() {
		t.Fatalf("%q: Valid %v, the two passes %v", in, got.Valid(), want.Valid())
	}
	if !want.Valid() {
		return
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("%q: decoded\n%q\nthe two passes\n%q", in, got.Bytes(), want.Bytes())
	}
	if !slices.Equal(got.nodes, want.nodes) {
		t.Fatalf("%q: nodes\n%+v\nthe two passes\n%+v", in, got.nodes, want.nodes)
	}
	var gc, wc Cursor
	gc.Reset(got)
	wc.Reset(want)
	for _, p := range allPaths(want, "") {
		gk, gs, ge := got.Lookup(p)
		wk, ws, we := want.Lookup(p)
		if gk != wk || gs != ws || ge != we {
			t.Fatalf("%q: Lookup(%q) = %v [%d,%d), the two passes %v [%d,%d)", in, p, gk, gs, ge, wk, ws, we)
		}
		gk, gs, ge = gc.LookupBytes([]byte(p))
		wk, ws, we = wc.LookupBytes([]byte(p))
		if gk != wk || gs != ws || ge != we {
			t.Fatalf("%q: Cursor.LookupBytes(%q) = %v [%d,%d), the two passes %v [%d,%d)", in, p, gk, gs, ge, wk, ws, we)
		}
	}
}

// allPaths lists the path of every value under path, duplicate members
// included (their path answers the last of them).
func allPaths(x *Index, path string) []string {
	paths := []string{path}
	for i, c := range x.AppendChildren(nil, path) {
		seg := strconv.Itoa(i)
		if c.KeyEnd > 0 {
			name, err := AppendUnquote(nil, x.Bytes()[c.KeyStart:c.KeyEnd])
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
		paths = append(paths, allPaths(x, p)...)
	}
	return paths
}

// sameErr fails unless two errors say the same: none, or both of the same
// kind (ErrDepth, else ErrSyntax).
func sameErr(t *testing.T, in []byte, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) || errors.Is(got, ErrDepth) != errors.Is(want, ErrDepth) {
		t.Fatalf("%q: error %v, the two passes %v", in, got, want)
	}
	if got != nil && !errors.Is(got, ErrSyntax) && !errors.Is(got, ErrDepth) {
		t.Fatalf("%q: error %v wraps neither ErrSyntax nor ErrDepth", in, got)
	}
}

func checkQuoted(t *testing.T, src []byte) {
	t.Helper()
	var got, want Index
	doc, end, err := got.ParseQuoted(nil, src, 0)
	_, wantEnd, wantErr := twoPassQuoted(&want, src, 0)
	if end != wantEnd {
		t.Fatalf("%q: end %d (%v), the two passes %d (%v)", src, end, err, wantEnd, wantErr)
	}
	sameErr(t, src, err, wantErr)
	sameIndex(t, src, &got, &want)
	if err == nil && !bytes.Equal(doc, got.Bytes()) {
		t.Fatalf("%q: returned %q, Bytes %q", src, doc, got.Bytes())
	}
	// Reused storage, and the same Index again, change nothing.
	if _, end2, err2 := got.ParseQuoted(doc[:0], src, 0); end2 != end || (err2 == nil) != (err == nil) {
		t.Fatalf("%q: again: end %d (%v), first %d (%v)", src, end2, err2, end, err)
	}
	sameIndex(t, src, &got, &want)
}

// quotedContent is doc as the content of a JSON string, after its opening
// quote: what json.dumps of doc writes, without the first quote.
func quotedContent(doc string) []byte {
	b, _ := json.Marshal(doc)
	return b[1:]
}

// quotedSeeds: documents of every kind in a string, and strings that break
// each rule of either layer.
func quotedSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{
		// The document's own escapes, under the string's.
		[]byte(`{\"a\": [1, 2.5e-3, -0, true, false, null, \"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"]}"`),
		// The string's escapes where json.dumps would not write them.
		[]byte(`\u007b\u0022a\u0022\u003a\u0031\u0030\u007d"`),
		[]byte(`\n\t{\r\n  \"k\"\t:\u0020\"v\" \n}\n"`),
		[]byte(`{\"\u00e9\ud83d\ude00\": \"caf\u00e9\"}"`),
		[]byte(`{\"a\u005c\u0022b\": \"\u005cu0041\"}"`),
		[]byte(`{\"a\": \"\\u00e\u0039\"}"`),
		[]byte(`[tru\u0065, n\u0075ll, 1\u0065\u002b5]"`),
		[]byte(`\"\/\"" trailing bytes after the string`),
		// Lone surrogates: U+FFFD in the document.
		[]byte(`[\"\ud800\", \"\udc00x\", \"\ud800\u0041\"]"`),
		// Refused by the document.
		[]byte(`{\"a\": \"\n\"}"`),        // a control character in its string
		[]byte(`{\"a\": \"\u001f\"}"`),    // the same, as \u
		[]byte(`{\"a\": \"\\x\"}"`),       // an invalid escape of its own
		[]byte(`{\"a\": \"\\u12\"}"`),     // a short \u of its own
		[]byte(`{\"a\": 1,}"`),            // its grammar
		[]byte(`{\"a\": \"x"`),            // its string ends with the string
		[]byte(`{} {}"`),                  // two documents
		[]byte(`"`),                       // none
		[]byte(`\u0000"`),                 // a NUL
		[]byte(`{\"a\": \u00e9}"`),        // a character outside ASCII as a value
		[]byte(`{\"a\": "`),               // cut
		[]byte(`{\"a\": 1e}"`),            // a number cut
		[]byte(`{\"a\": \\\"b\\\"}"`),     // a backslash outside its strings
		[]byte("{\\\"a\\\": \"\xe9\"}\""), // invalid UTF-8, where the document would refuse anyway
		// Refused by the string.
		[]byte("{\\\"a\\\": \\\"\x01\\\"}\""),         // a raw control character
		[]byte("{\\\"a\\\":\n1}\""),                   // a raw newline, where the document would allow it
		[]byte(`{\"a\": \"\x\"}"`),                    // an invalid escape
		[]byte(`{\"a\": \"\u12G4\"}"`),                // an invalid \u
		[]byte("{\\\"a\\\": \\\"\xff\\\"}\""),         // invalid UTF-8
		[]byte("{\\\"a\\\": \\\"\xed\xa0\x80\\\"}\""), // a surrogate in UTF-8
		[]byte(`{\"a\": 1}`),                          // no closing quote
		[]byte(`{\"a\": 1}\`),                         // a cut escape
		[]byte("[1,\\x\x01]\""),                       // the document fails first, the string later
		[]byte(`[1 \x]"`),
	}
	// Each escape of the string where the document has a string: the
	// control characters refused, the others decoded.
	for _, e := range []string{`\"`, `\\\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u0041`, `\u001f`, `\u0022`, `\u005c\\n`, `\u005c\u006e`} {
		seeds = append(seeds, []byte(`[\"x`+e+`y\"]"`))
	}
	deep := bytes.Repeat([]byte("["), MaxDepth+1)
	seeds = append(seeds, append(slices.Clone(deep), '"'), append(deep, `\x"`...))
	seeds = append(seeds, quotedContent(string(bytes.Repeat([]byte("["), MaxDepth))+string(bytes.Repeat([]byte("]"), MaxDepth))))
	for _, doc := range []string{
		`{"a":[1,2,{"b":"c\u00e9"}],"d.e":null}`, `[true,false,-0.5E+2,"\ud83d\ude00"]`, `{"\u0061":1,"a":2}`,
		`{"k":1,"k":{"x":2}}`, `"x"`, `  7  `, `{"a":"\\\"\/"}`, `{"é":"ü\n"}`,
	} {
		seeds = append(seeds, quotedContent(doc))
	}
	if src, err := os.ReadFile("../../runtime/testdata/nova-compute.instance.exists.json"); err == nil {
		seeds = append(seeds, quotedContent(string(src)))
	} else {
		t.Fatal(err)
	}
	return seeds
}

// TestParseQuotedAsTwoPasses: on every seed, ParseQuoted answers what the
// scan, AppendUnquote and Parse answer, and so it does at every cut of each.
func TestParseQuotedAsTwoPasses(t *testing.T) {
	for _, src := range quotedSeeds(t) {
		checkQuoted(t, src)
		for n := range len(src) {
			checkQuoted(t, src[:n])
		}
	}
	// Strings of the document of every length around the word size, with
	// a byte or an escape that needs attention at every place.
	for n := 0; n <= 40; n++ {
		for at := -1; at < n; at++ {
			for _, special := range []string{`\\\"`, `\\\\`, `\\u00e9`, `\u00e9`, "é", "\x01", `\n`, `\"`, `"`, "\xff"} {
				body := []byte(strings.Repeat("x", n))
				if at >= 0 {
					body = append(body[:at:at], append([]byte(special), body[at:]...)...)
				}
				checkQuoted(t, []byte(`[\"`+string(body)+`\", 1]"`))
			}
		}
	}
}

// TestParseQuotedDecodes pins a few answers, so that the two passes are not
// the only witness.
func TestParseQuotedDecodes(t *testing.T) {
	var x Index
	doc, end, err := x.ParseQuoted(nil, []byte(`{"m": "{\"a\": \"caf\u00e9 \\\"b\\\"\", \"n\": [1, \"\ud800\"]}", "z": 1}`), 7)
	if err != nil || end != 63 {
		t.Fatalf("end %d, err %v", end, err)
	}
	if want := `{"a": "café \"b\"", "n": [1, "` + "\uFFFD" + `"]}`; string(doc) != want {
		t.Fatalf("decoded %q, want %q", doc, want)
	}
	if k, s, e := x.Lookup("a"); k != String || string(doc[s:e]) != `café \"b\"` {
		t.Fatalf("a = %v %q", k, doc[s:e])
	}
	if k, s, e := x.Lookup("n.1"); k != String || string(doc[s:e]) != "\uFFFD" {
		t.Fatalf("n.1 = %v %q", k, doc[s:e])
	}
	for _, c := range []struct {
		src string
		end int
		err error
	}{
		{`{\"a\": 1}"`, 10, nil},
		{`{\"a\": \"\n\"}"`, 15, ErrSyntax},    // the document refuses
		{"{\\\"a\\\": \x01}\"", -1, ErrSyntax}, // the string refuses
		{`{\"a\": 1}`, -1, ErrSyntax},
		{string(bytes.Repeat([]byte("["), MaxDepth+1)) + `"`, MaxDepth + 1, ErrDepth},
	} {
		_, end, err := x.ParseQuoted(nil, []byte(c.src), 0)
		if end != c.end || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("ParseQuoted(%q) = %d, %v; want %d, %v", c.src, end, err, c.end, c.err)
		}
		if err != nil && x.Valid() {
			t.Errorf("ParseQuoted(%q) failed, yet Valid", c.src)
		}
	}
}

// TestParseQuotedAllocatesNothingWarm: with the storage passed back, a
// second decode allocates nothing, alone or within ParseWrapped.
func TestParseQuotedAllocatesNothingWarm(t *testing.T) {
	src := quotedSeeds(t)[len(quotedSeeds(t))-1] // the nova sample
	var x Index
	buf, _, err := x.ParseQuoted(nil, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		buf, _, _ = x.ParseQuoted(buf, src, 0)
	})
	if allocs != 0 {
		t.Errorf("ParseQuoted allocates %v times warm", allocs)
	}
	env := []byte(`{"oslo.version": "2.0", "oslo.message": "` + string(src) + `}`)
	var outer, inner Index
	if k, b, err := outer.ParseWrapped(env, `oslo\.message`, &inner, nil); err != nil || k != String || !inner.Valid() {
		t.Fatalf("ParseWrapped: %v %v %v", k, err, inner.Valid())
	} else {
		buf = b
	}
	allocs = testing.AllocsPerRun(100, func() {
		_, buf, _ = outer.ParseWrapped(env, `oslo\.message`, &inner, buf)
	})
	if allocs != 0 {
		t.Errorf("ParseWrapped allocates %v times warm", allocs)
	}
}

func FuzzParseQuoted(f *testing.F) {
	for _, s := range quotedSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		checkQuoted(t, src)
	})
}

// twoPassWrapped is what ParseWrapped reads at once: the document parsed,
// the member looked up, its string unquoted and parsed.
func twoPassWrapped(x, inner *Index, src []byte, name string) (Kind, error) {
	inner.Reset()
	if err := x.Parse(src); err != nil {
		return Missing, err
	}
	k, s, e := x.Lookup(name)
	if k == String {
		doc, err := AppendUnquote(nil, src[s:e])
		if err != nil {
			return k, err
		}
		_ = inner.Parse(doc)
	}
	return k, nil
}

func checkWrapped(t *testing.T, src []byte, name string) {
	t.Helper()
	var x, inner, wx, winner Index
	k, _, err := x.ParseWrapped(src, name, &inner, nil)
	wk, werr := twoPassWrapped(&wx, &winner, src, name)
	sameErr(t, src, err, werr)
	if k != wk {
		t.Fatalf("%q: kind %v, the two passes %v", src, k, wk)
	}
	sameIndex(t, src, &x, &wx)
	if k == String {
		sameIndex(t, src, &inner, &winner)
	}
}

// wrappedSeeds: oslo envelopes and bare bodies from the fixture corpus, and
// envelopes that break a rule, wrap twice, or are not quite envelopes.
func wrappedSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, pat := range []string{"../../runtime/pipeline/testdata/*.body", "../../runtime/input/broker/testdata/wire/*.body",
		"../../mappers/testdata/envelope/*.body", "../../examples/publisher/testdata/*.body"} {
		files, err := filepath.Glob(pat)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v (%d files)", pat, err, len(files))
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	env := func(members string) []byte { return []byte(`{"oslo.version": "2.0", ` + members + `}`) }
	for _, q := range quotedSeeds(t) {
		if end := bytes.LastIndexByte(q, '"'); end >= 0 {
			seeds = append(seeds, env(`"oslo.message": "`+string(q[:end+1])))
		}
	}
	seeds = append(seeds,
		env(`"oslo.message": "{}", "oslo.message": "{\"a\": 1}"`),   // the last one counts
		env(`"oslo.message": "{\"a\": 1}", "oslo.message": "nope"`), // even when it is not JSON
		env(`"oslo.message": "nope", "oslo.message": "[2]"`),
		env(`"oslo.message": "[1]", "oslo.message": 3`),                    // nor a string
		env(`"oslo\u002emessage": "[1]", "oslo.message\u0000": "[2]"`),     // escaped names
		env(`"m": "[1]", "x": {"oslo.message": "[2]"}, "oslo.message": 0`), // a member deeper down
		[]byte(`["oslo.message", "[1]"]`),
		[]byte(`{"oslo.message": "[1]"} x`),
		[]byte(`{"oslo.message": "[1]`),
		[]byte(`{"oslo.message": "[1]", }`),
		[]byte(`{"m": "[1]", "m": "{\"x\": \"\\u00e9\"}"}`),
	)
	return seeds
}

// TestParseWrappedAsTwoPasses: on every seed, ParseWrapped answers what
// Parse, Lookup, AppendUnquote and Parse answer.
func TestParseWrappedAsTwoPasses(t *testing.T) {
	for _, src := range wrappedSeeds(t) {
		checkWrapped(t, src, `oslo\.message`)
		checkWrapped(t, src, "m")
	}
}

func FuzzParseWrapped(f *testing.F) {
	for _, s := range wrappedSeeds(f) {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, src []byte, short bool) {
		name := `oslo\.message`
		if short {
			name = "m"
		}
		checkWrapped(t, src, name)
	})
}
