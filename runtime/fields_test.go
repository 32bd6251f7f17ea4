package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestFieldsImport runs the WAT module testdata/fields.wat, which calls the
// batch lookup import tally.fields: one call with four paths (one of them
// outside guest memory) and two malformed calls (the result table outside
// memory, a negative count), each answered -1 without writing anything.
func TestFieldsImport(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	for _, g := range []runtime.Guard{runtime.GuardAlways, runtime.GuardNever, runtime.GuardWatched} {
		m := load(t, e, "fields", runtime.WithGuard(g))
		msg := `{"event_type":"compute.instance.exists","payload":{"a":1,"instance_id":"i-\"1\""}}`
		res, err := m.Map(context.Background(), index(t, msg), src)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Events) != 1 {
			t.Fatalf("events = %s", res.Events)
		}
		var ev struct {
			EventType  string `json:"event_type"`
			Attributes struct{ ID, K, N string }
		}
		if err := json.Unmarshal(res.Events[0], &ev); err != nil {
			t.Fatal(err)
		}
		a := ev.Attributes
		if ev.EventType != "compute.instance.exists" || a.ID != `i-"1"` || a.K != "2200" || a.N != "4--" {
			t.Fatalf("guard %v: event %s", g, res.Events[0])
		}
		// Input that is not an object: every path answers missing, so the
		// module finds no event_type and answers its error.
		_, err = m.Map(context.Background(), index(t, `"just a string"`), src)
		if me := (*runtime.MapError)(nil); !errors.As(err, &me) || me.Reason != runtime.ReasonGuestError {
			t.Fatalf("non-object input: %v, want the module's guest error", err)
		}
	}
}

// fieldsAgreePaths are the paths of testdata/fieldsagree.wat, in its order.
var fieldsAgreePaths = []string{"event_type", "message_id", "timestamp", "publisher_id", `payload.nova_object\.data`,
	"payload.instance_id", "payload.tenant_id", "payload.memory_mb", "payload.state", "payload.image_meta.base_image_ref",
	"dup", "dup.x", "dup.y", `\dup`, `d\up.y`, "payload.dup", "payload.dup.k", `payload.\dup.k`, `payload.a\.b`,
	"payload.a.b", `payload.e\\f`, "payload.list.0", "payload.list.1.k", "payload.list.1", "payload.list.9",
	`payload.list.\0`, "payload.list.01", "", ".", "payload.", ".x", "nope", "nope.x", "payload.nope", "payload.p3",
	"payload.p39", "payload.image_meta", "payload.image_meta.nope", "payload.dup.k.z", "event_type.x",
	`payload.nova_object\.data.uuid`, "esc", `payload\.dup`}

// TestFieldsAgreeWithField: the module testdata/fieldsagree.wat asks for
// the same paths with one tally.fields call and with one tally.field call
// each, and reports whether every answer agrees, and the answers. On
// documents with duplicate member names (compared after unescaping; the
// last counts, for both imports), in objects small enough to be walked and
// large enough to have a table, and on every notification of the fixture
// corpus, they agree, and each is what jsonindex's Lookup answers.
func TestFieldsAgreeWithField(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	m := load(t, e, "fieldsagree")
	pad := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `"p%d":%d,`, i, i)
		}
		return b.String()
	}
	var docs []string
	for _, n := range []int{0, 3, 12, 40, 300} {
		docs = append(docs, `{"event_type":"compute.instance.exists","dup":{"x":1},`+pad(n)+`"message_id":"m","dup":{"y":2},`+
			`"d\u0075p":{"y":3},"esc":"\"q\"","timestamp":"t","payload":{`+pad(n)+`"dup":{"k":1},"a.b":1,"e\\f":"s",`+
			`"\u0064up":{"k":[2]},"list":[1,{"k":"v"},{"k":"w","k":"x"}],"instance_id":"i","a":{"b":"n"},`+pad(n/2)+
			`"image_meta":{"base_image_ref":"r","base_image_ref":"r2"},"e\u005cf":"t","nova_object.data":{"uuid":"u"},"state":"on"}}`)
	}
	files := testkit.ReadGlob(t, "../mappers/*/testdata/*.in.json")
	if len(files) < 100 {
		t.Fatalf("fixture corpus: %d files", len(files))
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		docs = append(docs, string(files[p]))
	}
	checked := 0
	for _, doc := range docs {
		var x jsonindex.Index
		if x.Parse([]byte(doc)) != nil {
			continue // the fixtures of inputs that are not JSON
		}
		checked++
		res, err := m.Map(context.Background(), &x, src)
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("map: %v, %d events", err, len(res.Events))
		}
		var ev struct{ Attributes map[string]string }
		if err := json.Unmarshal(res.Events[0], &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Attributes["agree"] != "y" {
			t.Fatalf("tally.fields and tally.field disagree on %.300s", doc)
		}
		var hex string
		for g := 'a'; ev.Attributes["r"+string(g)] != ""; g++ {
			hex += ev.Attributes["r"+string(g)]
		}
		if len(hex) != 16*len(fieldsAgreePaths) {
			t.Fatalf("%d answers, want %d", len(hex)/16, len(fieldsAgreePaths))
		}
		for i, p := range fieldsAgreePaths {
			r, err := strconv.ParseUint(hex[16*i:16*i+16], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			k, s, e := x.Lookup(p)
			want := uint64(k)<<56 | uint64(s)<<28 | uint64(e-s)
			if k == jsonindex.Missing {
				want = 0
			}
			if r != want {
				t.Fatalf("path %q answers %x, Lookup %v %q, in %.300s", p, r, k, doc[s:e], doc)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d documents checked", checked)
	}
	// The duplicates of the first documents answer the last.
	var x jsonindex.Index
	if err := x.Parse([]byte(docs[3])); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"dup.y": "3", "dup.x": "", `payload.dup.k`: "[2]", "payload.list.2.k": "x",
		"payload.image_meta.base_image_ref": "r2", `payload.e\\f`: "t"} {
		if k, s, e := x.Lookup(p); docs[3][s:e] != want || (want == "") != (k == jsonindex.Missing) {
			t.Errorf("%s = %v %q, want the last duplicate's %q", p, k, docs[3][s:e], want)
		}
	}
}
