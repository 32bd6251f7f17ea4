package jsonindex

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// padMembers answers n members "p0":0,... each followed by a comma.
func padMembers(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `"p%d":%d,`, i, i)
	}
	return b.String()
}

// TestDuplicateMembersLastWins: of members with the same name, compared
// after unescaping ("a" and "\u0061"), every lookup answers the last, as
// Python's json (oslo.messaging, Ceilometer) and encoding/json read them: in
// an object small enough to be walked and in one with a table, with the
// duplicates next to each other or far apart, through Lookup, LookupBytes
// and a Cursor. AppendChildren still lists every member.
func TestDuplicateMembersLastWins(t *testing.T) {
	for _, pad := range []int{0, 3, smallContainer, 1000} {
		t.Run(strconv.Itoa(pad), func(t *testing.T) {
			doc := `{"payload":{` + padMembers(pad) +
				`"a":1,"b":{"x":1},"c.d":1,"e\\f":1,"z":[1],"n":{"k":1},` +
				padMembers(pad) +
				`"\u0061":2,"b":{"y":2},"c\u002ed":3,"e\u005cf":4,"z":{"0":"o"},"n":{"k":1,"k":5},"last":true}}`
			var x Index
			mustParse(t, &x, doc)
			checkLookups(t, &x, []lookupCase{
				{"payload.a", Number, "2"},
				{"payload.\\a", Number, "2"},
				{"payload.b.x", Missing, ""},
				{"payload.b.y", Number, "2"},
				{"payload.b", Object, `{"y":2}`},
				{`payload.c\.d`, Number, "3"},
				{`payload.e\\f`, Number, "4"},
				{"payload.z.0", String, "o"},
				{"payload.n.k", Number, "5"},
				{"payload.last", True, "true"},
				{"payload.nope", Missing, ""},
			})
			if got, want := len(x.AppendChildren(nil, "payload")), 2*pad+13; got != want {
				t.Errorf("AppendChildren lists %d members, want %d", got, want)
			}
			check(t, &x, []byte(doc))
		})
	}
}

// TestContainerSizes: objects and arrays of every size around the point
// where lookups switch from walking to a table answer every member, element
// and missing path as encoding/json reads the document (check), in objects
// with plain and escaped names.
func TestContainerSizes(t *testing.T) {
	sizes := []int{0, 1, 2, smallContainer - 1, smallContainer, smallContainer + 1, 2 * smallContainer, 100, 1000}
	for _, n := range sizes {
		var obj, esc, arr strings.Builder
		obj.WriteString(`{"o":{`)
		esc.WriteString(`{"o":{`)
		arr.WriteString(`{"a":[`)
		for i := 0; i < n; i++ {
			if i > 0 {
				obj.WriteByte(',')
				esc.WriteByte(',')
				arr.WriteByte(',')
			}
			fmt.Fprintf(&obj, `"m%d":{"v":%d}`, i, i)
			fmt.Fprintf(&esc, `"\u006d%d.\\":%d`, i, i)
			fmt.Fprintf(&arr, `[%d]`, i)
		}
		for _, doc := range []string{obj.String() + "}}", esc.String() + "}}", arr.String() + "]}"} {
			var x Index
			mustParse(t, &x, doc)
			check(t, &x, []byte(doc))
			for _, p := range []string{"o.m" + strconv.Itoa(n), "o.nope", "o.", "o.m", "a." + strconv.Itoa(n), "a." + strconv.Itoa(n+1000), "a.x", "a.-1"} {
				if k, _, _ := x.Lookup(p); k != Missing {
					t.Errorf("%d members: %q answers %v", n, p, k)
				}
			}
		}
	}
}

// TestTablesFollowParse: a new Parse forgets the tables of the previous
// document, whose containers sit at the same nodes.
func TestTablesFollowParse(t *testing.T) {
	var x Index
	for round := 0; round < 3; round++ {
		var b strings.Builder
		b.WriteString(`{"o":{`)
		for i := 0; i < 100; i++ {
			fmt.Fprintf(&b, `"m%d":%d,`, (i+round)%100, round)
		}
		b.WriteString(`"z":0},"a":[`)
		for i := 0; i < 100; i++ {
			fmt.Fprintf(&b, `%d,`, i*round)
		}
		b.WriteString(`0]}`)
		mustParse(t, &x, b.String())
		check(t, &x, []byte(b.String()))
	}
}

// TestTableBounds: a lookup in a 50,000-member object builds its table once,
// of at most 32 bytes a member, and the longest probe in it stays short; an
// object of smallContainer members gets none.
func TestTableBounds(t *testing.T) {
	const n = 50000
	src := largeObject(n)
	var x Index
	if err := x.Parse(src); err != nil {
		t.Fatal(err)
	}
	if k, _, _ := x.Lookup("payload.m49999"); k != Number {
		t.Fatalf("payload.m49999: %v", k)
	}
	built := len(x.tabs)
	if built == 0 || x.tableOf(1) != 1 {
		t.Fatalf("no table for the object (%d entries, tab %d)", built, x.tableOf(1))
	}
	if built*4 > 32*n+4 {
		t.Errorf("table of %d bytes for %d members", built*4, n)
	}
	for i := 0; i < n; i += 97 {
		x.Lookup(fmt.Sprintf("payload.m%05d", i))
	}
	if len(x.tabs) != built {
		t.Errorf("tables grew from %d to %d entries on later lookups", built, len(x.tabs))
	}
	// Longest run of occupied slots: the most slots a probe can visit.
	tabs, longest, run := x.tabs, 0, 0
	for i := 0; i < 2*int(tabs[0]+1); i++ { // twice round, for a run that wraps
		if tabs[1+2*(i&int(tabs[0]))] != 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	if longest > 200 {
		t.Errorf("a run of %d occupied slots", longest)
	}
	t.Logf("table of %d slots for %d members, longest run %d", tabs[0]+1, n, longest)

	mustParse(t, &x, `{"o":{`+strings.TrimSuffix(padMembers(smallContainer), ",")+`}}`)
	if k, _, _ := x.Lookup("o.p15"); k != Number || len(x.tabs) != 0 {
		t.Fatalf("object of %d members: %v, %d table entries", smallContainer, k, len(x.tabs))
	}
}

// TestLargeLookupsAllocateNothing: once its buffers have grown, an Index
// parses a document with a large object and a large array, builds their
// tables and answers lookups in them without allocating, escaped names
// included.
func TestLargeLookupsAllocateNothing(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"o":{`)
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, `"m%d":%d,"\u006e%d":%d,`, i, i, i, i)
	}
	b.WriteString(`"z":0},"a":[`)
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, `{"id":%d},`, i)
	}
	b.WriteString(`0]}`)
	src := []byte(b.String())
	var x Index
	var c Cursor
	paths := [][]byte{[]byte("o.m999"), []byte("o.n500"), []byte(`o.\n7`), []byte("a.999.id"), []byte("a.20.id"), []byte("o.nope")}
	allocs := testing.AllocsPerRun(50, func() {
		if err := x.Parse(src); err != nil {
			t.Fatal(err)
		}
		c.Reset(&x)
		for _, p := range paths {
			x.LookupBytes(p)
			c.LookupBytes(p)
		}
		x.Lookup("o.m3")
	})
	if allocs != 0 {
		t.Errorf("Parse and lookups in large containers allocate %v times after warm-up", allocs)
	}
	if k, s, e := x.Lookup(`o.\n7`); k != Number || string(src[s:e]) != "7" {
		t.Errorf(`o.\n7 = %v %q`, k, src[s:e])
	}
}

// BenchmarkObjectSize: one lookup of each member of an object of n members
// (ns/op is per object, n lookups), by walking the members (walk), through
// the object's table built beforehand (table), and building the table first
// (build+table, what an object read once after Parse costs). smallContainer
// is chosen from these.
func BenchmarkObjectSize(b *testing.B) {
	for _, n := range []int{4, 8, 16, 32, 64} {
		src := []byte(`{"resource":{` + strings.TrimSuffix(padMembers(n), ",") + `}}`)
		var x Index
		if err := x.Parse(src); err != nil {
			b.Fatal(err)
		}
		segs := make([][]byte, n)
		for i := range segs {
			segs[i] = []byte("p" + strconv.Itoa(i))
		}
		b.Run(fmt.Sprintf("n=%d/walk", n), func(b *testing.B) {
			for b.Loop() {
				for _, s := range segs {
					if c, _ := scanMembers(&x, 1, s, false, math.MaxInt32); c < 0 {
						b.Fatal("missing")
					}
				}
			}
		})
		lookups := func(b *testing.B) {
			for _, s := range segs {
				if _, ok := findMember(&x, x.tableOf(1)-1, s, false); !ok {
					b.Fatal("missing")
				}
			}
		}
		b.Run(fmt.Sprintf("n=%d/build+table", n), func(b *testing.B) {
			for b.Loop() {
				x.tabsOn, x.tabs = false, x.tabs[:0]
				if !x.buildMembers(1) {
					b.Fatal("no table")
				}
				lookups(b)
			}
		})
		b.Run(fmt.Sprintf("n=%d/table", n), func(b *testing.B) {
			for b.Loop() {
				lookups(b)
			}
		})
	}
}
