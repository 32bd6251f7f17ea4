package jsonindex

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// checkMany fails unless LookupMany answers every path exactly as Lookup
// does: the paths in one batch, in the reverse order, shuffled, and in
// batches of a few.
func checkMany(t testing.TB, x *Index, paths []string, rnd *rand.Rand) {
	t.Helper()
	if len(paths) == 0 {
		return
	}
	want := make([]Span, len(paths))
	for i, p := range paths {
		k, s, e := x.Lookup(p)
		want[i] = Span{k, s, e}
	}
	batch := func(order []int) {
		t.Helper()
		ps := make([][]byte, len(order))
		for j, i := range order {
			ps[j] = []byte(paths[i])
		}
		out := make([]Span, len(order)+1) // longer than needed: allowed
		out[len(order)] = Span{Kind: Number, Start: 7, End: 9}
		x.LookupMany(ps, out)
		for j, i := range order {
			if out[j] != want[i] {
				doc := x.Bytes()
				if len(doc) > 400 {
					doc = doc[:400]
				}
				t.Fatalf("LookupMany: path %q answers %v %q, Lookup %v %q; batch of %d in %q",
					paths[i], out[j].Kind, x.Bytes()[out[j].Start:out[j].End], want[i].Kind,
					x.Bytes()[want[i].Start:want[i].End], len(order), doc)
			}
		}
		if out[len(order)] != (Span{Kind: Number, Start: 7, End: 9}) {
			t.Fatal("LookupMany wrote past len(paths)")
		}
	}
	order := make([]int, len(paths))
	for i := range order {
		order[i] = i
	}
	batch(order)
	rev := make([]int, len(order))
	for i := range order {
		rev[i] = order[len(order)-1-i]
	}
	batch(rev)
	rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	batch(order)
	for lo := 0; lo < len(order); {
		hi := min(len(order), lo+1+rnd.IntN(5))
		batch(order[lo:hi])
		lo = hi
	}
}

// docPaths lists the path of every value of the document x holds, as the
// ABI spells it (names escaped), through AppendChildren.
func docPaths(x *Index) []string {
	var paths []string
	var walk func(path string)
	walk = func(path string) {
		paths = append(paths, path)
		kind, _, _ := x.Lookup(path)
		for i, ch := range x.AppendChildren(nil, path) {
			seg := strconv.Itoa(i)
			if kind == Object {
				name, err := AppendUnquote(nil, x.Bytes()[ch.KeyStart:ch.KeyEnd])
				if err != nil {
					panic(err)
				}
				seg = pathEscaper.Replace(string(name))
			}
			if path == "" {
				if seg == "" {
					continue // "" alone is the document itself
				}
				walk(seg)
				continue
			}
			walk(path + "." + seg)
		}
	}
	walk("")
	return paths
}

// pathVariants adds, for each path, paths that lead elsewhere or nowhere:
// every byte of the last segment escaped, a member or element further down,
// a sibling that is not there, the last segment cut short or made longer,
// an empty segment before, inside and after, and array indexes out of
// range, with a sign, escaped or with leading zeros.
func pathVariants(paths []string) []string {
	out := append([]string(nil), paths...)
	for _, p := range paths {
		parent, last := "", p
		if i := strings.LastIndexByte(p, '.'); i >= 0 && (i == 0 || p[i-1] != '\\') {
			parent, last = p[:i+1], p[i+1:]
		}
		var esc strings.Builder
		for i := 0; i < len(last); i++ {
			if last[i] == '\\' && i+1 < len(last) {
				esc.WriteString(last[i : i+2])
				i++
				continue
			}
			esc.WriteByte('\\')
			esc.WriteByte(last[i])
		}
		out = append(out, parent+esc.String(), p+".x", p+".0", p+".16", p+".17", parent+"nope", p+".", "."+p,
			parent+last+"z", p+`\`, p+`.\0`, p+".00", p+".-1", p+".+1", p+"..x")
		if len(last) > 1 {
			out = append(out, parent+last[:len(last)-1])
		}
	}
	return out
}

func TestLookupMany(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var x Index
	mustParse(t, &x, pathsDoc)
	paths := append(slices.Clone(pathsOfDoc), "b.\\1", "b.01", "b.1\\",
		"esc.q", "esc.q", "", "payload.fixed_ips.1", "payload.fixed_ips.1.address")
	checkMany(t, &x, pathVariants(paths), rnd)

	// Not an object nor an array at the top, and no document.
	for _, doc := range []string{`"s"`, `12`, `[]`, `{}`, `[[1,2],{"0":3}]`} {
		mustParse(t, &x, doc)
		checkMany(t, &x, pathVariants([]string{"", "0", "0.0", "1.0", "a", "."}), rnd)
	}
	x.SetRaw([]byte(`{"a":1}`))
	out := []Span{{Kind: Number, Start: 1, End: 2}}
	x.LookupMany([][]byte{[]byte("a")}, out)
	if out[0] != (Span{}) {
		t.Fatalf("an Index that is not Valid answers %v", out[0])
	}
	x.LookupMany(nil, nil)
}

// TestLookupManyDuplicates: of members with the same name, compared after
// unescaping, LookupMany answers the last, as Lookup does, in objects that
// are walked and in objects with a table, with the table built before the
// batch or by it.
func TestLookupManyDuplicates(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, pad := range []int{0, 3, smallContainer, 40, 1000} {
		t.Run(strconv.Itoa(pad), func(t *testing.T) {
			doc := `{"payload":{` + padMembers(pad) +
				`"a":1,"b":{"x":1},"c.d":1,"e\\f":1,"z":[1],"n":{"k":1},` +
				padMembers(pad) +
				`"\u0061":2,"b":{"y":2},"c\u002ed":3,"e\u005cf":4,"z":{"0":"o"},"n":{"k":1,"k":5},"last":true}}`
			paths := []string{"payload.a", "payload.\\a", "payload.b.x", "payload.b.y", "payload.b", `payload.c\.d`,
				`payload.e\\f`, "payload.z.0", "payload.n.k", "payload.last", "payload.nope", "payload.p0", "payload.p2"}
			var x Index
			mustParse(t, &x, doc)
			want := map[string]string{"payload.a": "2", "payload.\\a": "2", "payload.b.y": "2", `payload.c\.d`: "3",
				`payload.e\\f`: "4", "payload.z.0": "o", "payload.n.k": "5"}
			ps := make([][]byte, len(paths))
			for i, p := range paths {
				ps[i] = []byte(p)
			}
			out := make([]Span, len(ps))
			x.LookupMany(ps, out)
			for i, p := range paths {
				if w, ok := want[p]; ok && doc[out[i].Start:out[i].End] != w {
					t.Errorf("LookupMany %q = %q, want the last duplicate's %q", p, doc[out[i].Start:out[i].End], w)
				}
			}
			checkMany(t, &x, pathVariants(paths), rnd)
			// With the table built first by Lookup.
			mustParse(t, &x, doc)
			x.Lookup("payload.last")
			checkMany(t, &x, pathVariants(paths), rnd)
		})
	}
}

// TestLookupManyWalkOrTable: a batch walks an object of up to
// smallContainer + 4 members per path through it, and builds the table of
// a larger one instead of walking it, so that asking for one member of a
// large object again and again costs a probe each time, not a walk.
func TestLookupManyWalkOrTable(t *testing.T) {
	cases := []struct {
		members, paths int
		table          bool
	}{
		{smallContainer, 1, false},
		{smallContainer + walkPerPath, 1, false},
		{smallContainer + walkPerPath + 1, 1, true},
		{40, 6, false},
		{40, 5, true},
		{1000, 20, true},
		{1000, maxWanted + 1, true}, // each path on its own: the table again
	}
	for _, tc := range cases {
		var x Index
		mustParse(t, &x, `{"o":{`+strings.TrimSuffix(padMembers(tc.members), ",")+`}}`)
		ps := make([][]byte, tc.paths)
		for i := range ps {
			ps[i] = fmt.Appendf(nil, "o.p%d", (i*7)%tc.members)
		}
		out := make([]Span, len(ps))
		x.LookupMany(ps, out)
		for i, sp := range out {
			if want := strconv.Itoa((i * 7) % tc.members); sp.Kind != Number || string(x.Bytes()[sp.Start:sp.End]) != want {
				t.Fatalf("%d members: %s = %v %q", tc.members, ps[i], sp.Kind, x.Bytes()[sp.Start:sp.End])
			}
		}
		if got := x.tableOf(1) != 0; got != tc.table {
			t.Errorf("%d members, %d paths: table %v, want %v", tc.members, tc.paths, got, tc.table)
		}
	}
}

// TestLookupManyAllocatesNothing: once its buffers have grown, a batch
// allocates nothing, walking or with tables.
func TestLookupManyAllocatesNothing(t *testing.T) {
	src := readNova(t)
	big := largeObject(5000)
	paths := append([][]byte(nil), mapperPaths...)
	paths = append(paths, []byte("payload.nope"), []byte(`payload.nova_object\.data.x`), []byte(""), []byte("payload.m00017"))
	out := make([]Span, len(paths))
	var x Index
	run := func() {
		for _, doc := range [][]byte{src, big} {
			if err := x.Parse(doc); err != nil {
				t.Fatal(err)
			}
			x.LookupMany(paths, out)
		}
	}
	run()
	if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
		t.Fatalf("Parse+LookupMany allocate %v times after warm-up", allocs)
	}
}

// corpus lists the notifications of the repository's fixtures: the inputs
// of every mapper's fixture pairs and the runtime's and the broker's
// samples.
func corpus(t testing.TB) []string {
	var files []string
	for _, glob := range []string{"../../mappers/*/testdata/*.in.json", "../../mappers/testdata/*/*.in.json",
		"../../runtime/testdata/*.json", "../../runtime/input/broker/testdata/notifications/*.json"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 100 {
		t.Fatalf("only %d fixture files found", len(files))
	}
	return files
}

// novaPaths are the lookups of the nova mapper, unversioned and versioned.
var novaPaths = []string{`payload.nova_object\.data`, "event_type", "message_id", "timestamp", "payload.instance_id",
	"payload.tenant_id", "payload.user_id", "payload.instance_type", "payload.instance_flavor_id", "payload.vcpus",
	"payload.memory_mb", "payload.root_gb", "payload.ephemeral_gb", "payload.disk_gb", "payload.state",
	"payload.image_ref", "payload.availability_zone", "payload.host", "payload.launched_at", "payload.terminated_at",
	"payload.deleted_at", "payload.audit_period_beginning", "payload.audit_period_ending",
	`payload.nova_object\.data.uuid`, `payload.nova_object\.data.tenant_id`, `payload.nova_object\.data.user_id`,
	`payload.nova_object\.data.flavor.nova_object\.data.name`, `payload.nova_object\.data.flavor.nova_object\.data.flavorid`,
	`payload.nova_object\.data.flavor.nova_object\.data.vcpus`, `payload.nova_object\.data.flavor.nova_object\.data.memory_mb`,
	`payload.nova_object\.data.flavor.nova_object\.data.root_gb`, `payload.nova_object\.data.disk_gb`,
	`payload.nova_object\.data.state`, `payload.nova_object\.data.image_uuid`,
	`payload.nova_object\.data.audit_period.nova_object\.data.audit_period_beginning`,
	`payload.nova_object\.data.audit_period.nova_object\.data.audit_period_ending`}

// TestLookupManyCorpus: on every notification of the fixtures (and on the
// payload inside an oslo.messaging v2 envelope), LookupMany answers the path
// of every value, the variants of those paths and the nova mapper's paths
// as Lookup does.
func TestLookupManyCorpus(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	for _, f := range corpus(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var x Index
		if err := x.Parse(src); err != nil {
			continue // the fixtures of inputs that are not JSON
		}
		docs := [][]byte{src}
		if k, s, e := x.Lookup(`oslo\.message`); k == String {
			inner, err := AppendUnquote(nil, src[s:e])
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, inner)
		}
		for _, doc := range docs {
			if err := x.Parse(doc); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			paths := append(pathVariants(docPaths(&x)), novaPaths...)
			checkMany(t, &x, paths, rnd)
			mustParse(t, &x, string(doc))
			checkMany(t, &x, novaPaths, rnd)
		}
	}
}

// randomDoc writes a random JSON value of at most depth levels: objects of
// 0 to 40 members (sometimes many more), with names drawn from a small set
// so that they repeat, some spelled with escapes, arrays of 0 to 20
// elements, and scalars.
func randomDoc(b *bytes.Buffer, rnd *rand.Rand, depth int) {
	names := []string{"a", "b", "ab", "ba", "x.y", `x\\y`, "", "0", "1", "17", "payload", "id", "é", "aa"}
	switch k := rnd.IntN(10); {
	case depth > 0 && k < 4:
		n := rnd.IntN(20)
		if rnd.IntN(4) == 0 {
			n = rnd.IntN(60)
		}
		if rnd.IntN(50) == 0 {
			n = 200 + rnd.IntN(200)
		}
		b.WriteByte('{')
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			var name string
			if rnd.IntN(3) == 0 {
				name = "m" + strconv.Itoa(rnd.IntN(n+1))
			} else {
				name = names[rnd.IntN(len(names))]
			}
			b.WriteByte('"')
			for _, c := range []byte(name) {
				if rnd.IntN(6) == 0 && c < 0x80 && c != '\\' {
					fmt.Fprintf(b, `\u%04x`, c)
				} else {
					b.WriteByte(c)
				}
			}
			b.WriteString(`":`)
			randomDoc(b, rnd, depth-1)
		}
		b.WriteByte('}')
	case depth > 0 && k < 6:
		n := rnd.IntN(8)
		if rnd.IntN(4) == 0 {
			n = rnd.IntN(30)
		}
		b.WriteByte('[')
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			randomDoc(b, rnd, depth-1)
		}
		b.WriteByte(']')
	case k < 7:
		fmt.Fprintf(b, `"s%d"`, rnd.IntN(100))
	case k < 8:
		b.WriteString(strconv.Itoa(rnd.IntN(1000)))
	case k < 9:
		b.WriteString("null")
	default:
		b.WriteString("true")
	}
}

// TestLookupManyRandom: random documents, random sets of paths (their
// values' paths, variants of them, and paths made of random segments).
func TestLookupManyRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	segs := []string{"a", "b", "ab", `x\.y`, `x.y`, `x\\\\y`, `\a`, "", "0", "1", "17", "16", "01", "m1", "m20", `\0`, "é", `a\`}
	runs := 1500
	if testing.Short() {
		runs = 300
	}
	for range runs {
		var b bytes.Buffer
		randomDoc(&b, rnd, 1+rnd.IntN(4))
		if b.Len() > 16<<10 {
			continue
		}
		var x Index
		mustParse(t, &x, b.String())
		all := pathVariants(docPaths(&x))
		var paths []string
		for range 1 + rnd.IntN(80) {
			if rnd.IntN(3) > 0 {
				paths = append(paths, all[rnd.IntN(len(all))])
				continue
			}
			var p []string
			for range rnd.IntN(4) {
				p = append(p, segs[rnd.IntN(len(segs))])
			}
			paths = append(paths, strings.Join(p, "."))
		}
		checkMany(t, &x, paths, rnd)
		if len(all) < 400 {
			checkMany(t, &x, all, rnd)
		}
	}
}

// FuzzLookupMany: a document and a set of paths (the lines of the second
// input), answered by LookupMany as by Lookup, beside every path of the
// document and their variants.
func FuzzLookupMany(f *testing.F) {
	f.Add([]byte(`{"a":[1,2,{"b":"c\u00e9"}],"d.e":null,"a":{"b":1}}`), []byte("a.2.b\na.b\nd\\.e\n\n.\na.\\2"))
	f.Add([]byte(`{"payload":{"nova_object.data":{"uuid":"u","flavor":{"nova_object.data":{"name":"n"}}}}}`),
		[]byte(strings.Join(novaPaths, "\n")))
	f.Add([]byte(`{"o":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,`+
		`"n":14,"o":15,"p":16,"q":17,"\u0061":{"x":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]},"b":null}}`),
		[]byte("o.a\no.a.x.17\no.b\no.q\no.\\a.x.3\no.z"))
	if src, err := os.ReadFile("../../runtime/testdata/nova-compute.instance.exists.json"); err == nil {
		f.Add(src, []byte(strings.Join(novaPaths, "\n")))
	}
	f.Fuzz(func(t *testing.T, src, lines []byte) {
		var x Index
		if x.Parse(src) != nil {
			return
		}
		paths := strings.Split(string(lines), "\n")
		if len(paths) > 300 {
			paths = paths[:300]
		}
		rnd := rand.New(rand.NewPCG(uint64(len(src)), uint64(len(lines))))
		checkMany(t, &x, paths, rnd)
		if all := pathVariants(docPaths(&x)); len(all) < 2000 {
			checkMany(t, &x, append(all, paths...), rnd)
		}
	})
}

// BenchmarkLookupManyNova: the nova mapper's 23 lookups of an unversioned
// notification after each Parse (the tables, when there are any, are built
// for each document), one at a time through a Cursor (what tally.fields
// did) and in one batch; parse alone for the difference.
func BenchmarkLookupManyNova(b *testing.B) {
	for _, f := range []struct{ name, file string }{
		{"1.6KB", "../../runtime/testdata/nova-compute.instance.exists.json"},
		{"2.5KB", "../../mappers/nova/testdata/edge__exists_2024_1.in.json"},
	} {
		src, err := os.ReadFile(f.file)
		if err != nil {
			b.Fatal(err)
		}
		paths := make([][]byte, 23)
		for i := range paths {
			paths[i] = []byte(novaPaths[i])
		}
		var x Index
		b.Run(f.name+"/parse", func(b *testing.B) {
			for b.Loop() {
				if err := x.Parse(src); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.name+"/parse+cursor", func(b *testing.B) {
			var c Cursor
			for b.Loop() {
				if err := x.Parse(src); err != nil {
					b.Fatal(err)
				}
				c.Reset(&x)
				for _, p := range paths {
					c.LookupBytes(p)
				}
			}
		})
		b.Run(f.name+"/parse+many", func(b *testing.B) {
			out := make([]Span, len(paths))
			for b.Loop() {
				if err := x.Parse(src); err != nil {
					b.Fatal(err)
				}
				x.LookupMany(paths, out)
			}
		})
	}
}

// A path longer than an indexed document may be (math.MaxInt32 bytes) answers
// missing, by LookupMany as by Lookup, and is not read: its offsets would not
// fit the int32 the walk keeps them in. The path's pages are never touched,
// so the test costs no memory.
func TestLookupManyRefusesAPathLongerThanADocument(t *testing.T) {
	var x Index
	if err := x.Parse([]byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	long := make([]byte, maxInput+1)
	long[0] = 'a' // one page touched
	out := make([]Span, 2)
	x.LookupMany([][]byte{long, []byte("a")}, out)
	if out[0] != (Span{}) || out[1].Kind != Number {
		t.Fatalf("LookupMany: %+v", out)
	}
	if k, _, _ := x.LookupBytes(long); k != Missing {
		t.Fatalf("LookupBytes: %v", k)
	}
}
