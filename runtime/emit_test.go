package runtime_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Operation codes of tally.emit (docs/abi.md, "emit").
const (
	opEvent     = 1
	opObject    = 2
	opEnd       = 3
	opText      = 4
	opString    = 5
	opNumber    = 6
	opInt       = 7
	opBool      = 8
	opTime      = 9
	opFromInput = 1 << 8
)

// inputBase is where testdata/emitops.wat keeps its input.
const inputBase = 65536

// emitInput builds an input of emitops.wat: a header, the bytes the
// operations point to, then the table.
type emitInput struct {
	mode  uint32
	data  []byte
	ops   []byte
	count int    // when not -1 (set by newEmitInput), the count passed instead of the table's
	table uint32 // when not 0, the table's address passed instead of its own
}

func newEmitInput(mode uint32) *emitInput { return &emitInput{mode: mode, count: -1} }

// mem puts s into the input and returns its address in guest memory.
func (b *emitInput) mem(s string) (uint32, uint32) {
	off := 16 + len(b.data)
	b.data = append(b.data, s...)
	return inputBase + uint32(off), uint32(len(s))
}

// in puts s into the input and returns its offset in the input.
func (b *emitInput) in(s string) (uint32, uint32) {
	p, n := b.mem(s)
	return p - inputBase, n
}

func (b *emitInput) op(code uint32, key string, a, v uint32) *emitInput {
	var kp, kl uint32
	if key != "" {
		kp, kl = b.mem(key)
	}
	b.ops = binary.LittleEndian.AppendUint32(b.ops, code)
	b.ops = binary.LittleEndian.AppendUint32(b.ops, kp)
	b.ops = binary.LittleEndian.AppendUint32(b.ops, kl)
	b.ops = binary.LittleEndian.AppendUint32(b.ops, a)
	b.ops = binary.LittleEndian.AppendUint32(b.ops, v)
	return b
}

func (b *emitInput) text(key, val string) *emitInput {
	p, n := b.mem(val)
	return b.op(opText, key, p, n)
}

func (b *emitInput) val(code uint32, key, val string) *emitInput {
	p, n := b.mem(val)
	return b.op(code, key, p, n)
}

func (b *emitInput) fromInput(code uint32, key, val string) *emitInput {
	p, n := b.in(val)
	return b.op(code|opFromInput, key, p, n)
}

// required writes the required members but event_type.
func (b *emitInput) required() *emitInput {
	return b.text("event_id", "e1").text("timestamp", "2024-05-01T12:00:00Z").text("service", "test").
		text("resource_type", "thing").text("resource_id", "r1").text("project_id", "p1").text("action", "emit")
}

func (b *emitInput) bytes() []byte {
	for len(b.data)%4 != 0 {
		b.data = append(b.data, 0)
	}
	count := uint32(len(b.ops) / 20)
	if b.count >= 0 {
		count = uint32(b.count)
	}
	table := inputBase + 16 + uint32(len(b.data))
	if b.table != 0 {
		table = b.table
	}
	var out []byte
	out = binary.LittleEndian.AppendUint32(out, b.mode)
	out = binary.LittleEndian.AppendUint32(out, count)
	out = binary.LittleEndian.AppendUint32(out, table)
	out = binary.LittleEndian.AppendUint32(out, 0)
	out = append(out, b.data...)
	return append(out, b.ops...)
}

// keyOutside appends a text operation whose key lies outside memory.
func keyOutside(b *emitInput) *emitInput {
	for _, w := range []uint32{opText, 1 << 30, 3, 0, 0} {
		b.ops = binary.LittleEndian.AppendUint32(b.ops, w)
	}
	return b
}

// rawIndex indexes input as the host does a non-JSON input.
func rawIndex(input []byte) *jsonindex.Index {
	var x jsonindex.Index
	if err := x.Parse(input); err != nil {
		x.SetRaw(input)
	}
	return &x
}

// TestEmitWritesEvents maps through tally.emit an event that uses every
// operation, and finds the events, their keys and what the contract left
// out exactly as the output check gives them for the document the SDK's
// builder writes for the same calls.
func TestEmitWritesEvents(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	m := load(t, e, "emitops")
	b := newEmitInput(0)
	b.op(opEvent, "", 0, 0).
		fromInput(opString, "event_type", `compute\u002einstance.exists`).
		text("event_id", "e\"1").
		fromInput(opTime, "timestamp", "2024-05-01 12:00:00.123456").
		text("service", "test").text("resource_type", "thing").
		val(opString, "resource_id", `r\u00e91`).text("project_id", "p1").text("action", "emit").
		text("nope", "left out").
		op(opObject, "attributes", 0, 0).
		val(opNumber, "vcpus", "4").op(opInt, "memory_mb", uint32(2048), 0).
		op(opInt, "neg", 0xFFFFFFFF, 0xFFFFFFFF).
		op(opBool, "b", 1, 0).op(opBool, "f", 0, 0).
		val(opTime, "launched_at", "2024-05-01T14:00:00+02:00").
		val(opTime, "deleted_at", "").                                                // not a timestamp: omitted
		val(opTime, "terminated_at", "2024-05-01 12:00:00."+strings.Repeat("0", 30)). // too long: omitted unread
		op(opObject, "nested", 0, 0).text("x", "y").op(opEnd, "", 0, 0).
		text("flavor", "m1.\x01small").
		val(opString, "note", "caf\xe9").                // invalid UTF-8: escaped again
		fromInput(opString, "note2", "a\\u00e9\xff\\n"). // an escape and invalid UTF-8
		op(opString|opFromInput, "empty", 0, 0).
		op(opEnd, "", 0, 0).
		op(opEnd, "", 0, 0).
		op(opEvent, "", 0, 0).required().text("event_type", "second").text("event_id", "dup")
	// (the second event is left open: closed by the host)
	in := b.bytes()
	res, err := m.Map(context.Background(), rawIndex(in), src)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"events":[{"event_type":"compute\u002einstance.exists","event_id":"e\"1","timestamp":"2024-05-01T12:00:00.123456Z",` +
		`"service":"test","resource_type":"thing","resource_id":"r\u00e91","project_id":"p1","action":"emit","nope":"left out",` +
		`"attributes":{"vcpus":4,"memory_mb":2048,"neg":-1,"b":true,"f":false,"launched_at":"2024-05-01T12:00:00Z","nested":{"x":"y"},"flavor":"m1.\u0001small",` +
		`"note":"caf\ufffd","note2":"a\u00e9\ufffd\n","empty":""}},` +
		`{"event_id":"e1","timestamp":"2024-05-01T12:00:00Z","service":"test","resource_type":"thing","resource_id":"r1","project_id":"p1","action":"emit","event_type":"second","event_id":"dup"}]}`
	want, err := runtime.CheckOutput([]byte(doc), rawIndex(in), m.ID(), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 2 || len(want.Events) != 2 {
		t.Fatalf("events %q, want %q", res.Events, want.Events)
	}
	for i := range want.Events {
		if !bytes.Equal(res.Events[i], want.Events[i]) {
			t.Errorf("event %d:\n got %s\nwant %s", i, res.Events[i], want.Events[i])
		}
		if res.Keys[i] != want.Keys[i] {
			t.Errorf("event %d: keys %+v, want %+v", i, res.Keys[i], want.Keys[i])
		}
	}
	if res.Dropped != want.Dropped || res.Dropped.Total() == 0 {
		t.Errorf("dropped %v, want %v (not none)", res.Dropped, want.Dropped)
	}
	for _, want := range []string{`"event_type":"compute.instance.exists"`, "\"note\":\"caf\uFFFD\"", "\"note2\":\"a\u00e9\uFFFD\\n\""} {
		if !strings.Contains(string(res.Events[0]), want) {
			t.Errorf("%s not in %s", want, res.Events[0])
		}
	}
}

// TestEmitRefuses runs hostile and malformed tables: each fails its call with
// its reason and an error naming what is wrong, and the next call on the
// same module maps as before.
func TestEmitRefuses(t *testing.T) {
	e := newEngine(t, runtime.Config{MaxOutputBytes: 4096, MaxEventBytes: 2048})
	m := load(t, e, "emitops")
	ev := func(mode uint32) *emitInput { return newEmitInput(mode).op(opEvent, "", 0, 0) }
	deep := newEmitInput(5).op(opEvent, "", 0, 0)
	for i := 0; i < 254; i++ { // an event and 253 objects inside it: as deep as a document may go
		deep.op(opObject, "o", 0, 0)
	}
	cases := []struct {
		name   string
		in     *emitInput
		reason runtime.Reason
		err    string
	}{
		{"unknown code", ev(5).op(10, "k", 0, 0), runtime.ReasonInvalidOutput, "operation 1 (unknown): unknown operation code 10"},
		{"code 0", ev(5).op(0, "k", 0, 0), runtime.ReasonInvalidOutput, "unknown operation code 0"},
		{"unknown flag", ev(5).val(opString|1<<9, "k", "v"), runtime.ReasonInvalidOutput, "flags 0x200 not allowed"},
		{"input flag on text", ev(5).val(opText|opFromInput, "k", "v"), runtime.ReasonInvalidOutput, "operation 1 (text): flags 0x100 not allowed"},
		{"event with a key", newEmitInput(5).op(opEvent, "k", 0, 0), runtime.ReasonInvalidOutput, "operation 0 (event): takes no key and no value"},
		{"end with a value", ev(5).op(opEnd, "", 1, 0), runtime.ReasonInvalidOutput, "operation 1 (end): takes no key and no value"},
		{"event inside an object", ev(5).op(opObject, "a", 0, 0).op(opEvent, "", 0, 0), runtime.ReasonInvalidOutput, "operation 2 (event): an event begun inside an open object (depth 2)"},
		{"end with nothing open", ev(5).op(opEnd, "", 0, 0).op(opEnd, "", 0, 0), runtime.ReasonInvalidOutput, "operation 2 (end): no object is open"},
		{"member outside an event", newEmitInput(5).text("k", "v"), runtime.ReasonInvalidOutput, "operation 0 (text): a member outside an event"},
		{"object with a value", ev(5).op(opObject, "a", 1, 0), runtime.ReasonInvalidOutput, "operation 1 (object): takes no value"},
		{"bool not 0 or 1", ev(5).op(opBool, "b", 2, 0), runtime.ReasonInvalidOutput, "operation 1 (bool): value 2 is neither 0 nor 1"},
		{"not a number", ev(5).val(opNumber, "n", "1e"), runtime.ReasonInvalidOutput, `operation 1 (number): "1e" is not a JSON number`},
		{"number with a sign", ev(5).val(opNumber, "n", "+1"), runtime.ReasonInvalidOutput, "is not a JSON number"},
		{"bare quote", ev(5).val(opString, "s", `a"b`), runtime.ReasonInvalidOutput, "operation 1 (string): a bare quote at byte 1 of the string"},
		{"bad escape", ev(5).val(opString, "s", `a\qb`), runtime.ReasonInvalidOutput, `an invalid escape \q at byte 1`},
		{"cut \\u escape", ev(5).val(opString, "s", `a\u12`), runtime.ReasonInvalidOutput, `an invalid \u escape at byte 1`},
		{"trailing backslash", ev(5).val(opString, "s", `a\`), runtime.ReasonInvalidOutput, "a backslash at the end of the string"},
		{"too deep", deep, runtime.ReasonInvalidOutput, "operation 254 (object): objects nested deeper than 254"},
		{"too many operations", func() *emitInput { b := ev(5); b.count = 1<<20 + 1; return b }(), runtime.ReasonInvalidOutput, "1048577 operations, not within [0, 1048576]"},
		{"negative count", func() *emitInput { b := ev(5); b.count = 1<<32 - 1; return b }(), runtime.ReasonInvalidOutput, "-1 operations"},
		{"table outside memory", func() *emitInput { b := ev(5); b.table = 1 << 30; return b }(), runtime.ReasonABI, "the table of 1 operations at 1073741824 lies outside memory"},
		{"key outside memory", keyOutside(ev(5)), runtime.ReasonABI, "operation 1 (text): key [1073741824,+3) outside memory"},
		{"value outside memory", ev(5).op(opText, "k", 1<<30, 4), runtime.ReasonABI, "operation 1 (text): value [1073741824,+4) outside memory"},
		{"value outside the input", ev(5).op(opString|opFromInput, "k", 1<<20, 4), runtime.ReasonABI, "operation 1 (string): value [1048576,+4) outside the input"},
		{"output over the limit", ev(5).text("k", strings.Repeat("x", 4096)), runtime.ReasonInvalidOutput, "output over the limit of 4096 bytes at operation 1"},
		{"a document after emit", ev(1).required().text("event_type", "t"), runtime.ReasonInvalidOutput, "tally_map returned an output document ([300,+13)) after tally.emit; it must return 0"},
		{"emit twice", ev(2).required().text("event_type", "t"), runtime.ReasonInvalidOutput, "tally.emit called a second time in one tally_map call"},
		{"a trap after emit", ev(3).required().text("event_type", "t"), runtime.ReasonTrap, "unreachable"},
		{"event_type missing", ev(0).required(), runtime.ReasonInvalidEvent, "event 0: event_type missing"},
		{"event_type too long", ev(0).required().text("event_type", strings.Repeat("t", 256)), runtime.ReasonInvalidEvent, "event_type is over 255 bytes"},
		{"timestamp not a timestamp", ev(0).text("event_type", "t").text("event_id", "e").val(opTime, "timestamp", "yesterday").
			text("service", "s").text("resource_type", "r").text("resource_id", "r").text("project_id", "p").text("action", "a"),
			runtime.ReasonInvalidEvent, "timestamp missing"},
	}
	good := ev(0).required().text("event_type", "ok").bytes()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in.bytes()
			_, err := m.Map(context.Background(), rawIndex(in), src)
			var me *runtime.MapError
			if !errors.As(err, &me) {
				t.Fatalf("err = %v, want a MapError", err)
			}
			if me.Reason != c.reason || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("reason %s, error %q; want %s and %q", me.Reason, err, c.reason, c.err)
			}
			res, err := m.Map(context.Background(), rawIndex(good), src)
			if err != nil || len(res.Events) != 1 {
				t.Fatalf("the next call: events %q, err %v", res.Events, err)
			}
		})
	}
}

// TestEmitLimits: an event over the per-event limit is left out and counted,
// as for a document; no events at all is an empty result; a call outside
// tally_map (the manifest's) is answered -1; nesting, the number of
// operations and the output are bounded as a document is.
func TestEmitLimits(t *testing.T) {
	// A call's deadline far above what any of these calls takes on a loaded
	// machine (70,000 operations among them): the limits are counts, never
	// times.
	e := newEngine(t, runtime.Config{MaxEventBytes: 1024, CallTimeout: time.Minute})
	m := load(t, e, "emitops")
	b := newEmitInput(0).op(opEvent, "", 0, 0).required().text("event_type", "big").
		op(opObject, "attributes", 0, 0).text("pad", strings.Repeat("x", 1024)).op(opEnd, "", 0, 0).op(opEnd, "", 0, 0).
		op(opEvent, "", 0, 0).required().text("event_type", "small").op(opEnd, "", 0, 0)
	res, err := m.Map(context.Background(), rawIndex(b.bytes()), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 || res.Oversize != 1 || !strings.Contains(string(res.Events[0]), `"small"`) {
		t.Fatalf("events %q, oversize %d", res.Events, res.Oversize)
	}
	res, err = m.Map(context.Background(), rawIndex(newEmitInput(0).bytes()), src)
	if err != nil || len(res.Events) != 0 {
		t.Fatalf("no operations: events %q, err %v", res.Events, err)
	}
	res, err = m.Map(context.Background(), rawIndex(newEmitInput(4).bytes()), src)
	if err != nil || len(res.Events) != 0 {
		t.Fatalf("emit outside tally_map: events %q, err %v", res.Events, err)
	}
	// The deepest nesting emit writes is the deepest a document may hold:
	// an event and 253 objects inside it, 256 levels with the document's
	// object and array.
	b = newEmitInput(0).op(opEvent, "", 0, 0).required().text("event_type", "deep")
	for range 253 {
		b.op(opObject, "o", 0, 0)
	}
	if res, err = m.Map(context.Background(), rawIndex(b.bytes()), src); err != nil || len(res.Events) != 1 {
		t.Fatalf("253 objects deep: events %q, err %v", res.Events, err)
	}
	for _, n := range []int{253, 254} {
		doc := `{"events":[{"event_type":"deep","event_id":"e1","timestamp":"2024-05-01T12:00:00Z","service":"test",` +
			`"resource_type":"thing","resource_id":"r1","project_id":"p1","action":"emit",` +
			strings.Repeat(`"o":{`, n) + strings.Repeat("}", n) + `}]}`
		_, err := runtime.CheckOutput([]byte(doc), nil, m.ID(), src)
		if (err == nil) != (n == 253) {
			t.Fatalf("a document %d objects deep: err %v", n, err)
		}
	}
	// More operations than 65,536 are taken when the output limit allows
	// what they write (the event, over the per-event limit, is then left out
	// and counted as a document's would be), and the count is bounded by the
	// output limit when it is the larger.
	b = newEmitInput(0).op(opEvent, "", 0, 0).required().text("event_type", "many").op(opObject, "attributes", 0, 0)
	for i := range 70_000 {
		b.op(opBool, "b"+strconv.Itoa(i), 1, 0)
	}
	if res, err = m.Map(context.Background(), rawIndex(b.bytes()), src); err != nil || res.Oversize != 1 {
		t.Fatalf("70,000 operations: oversize %d, err %v", res.Oversize, err)
	}
	e3 := newEngine(t, runtime.Config{MaxOutputBytes: 2 << 20, CallTimeout: time.Minute})
	m3 := load(t, e3, "emitops")
	b = newEmitInput(5).op(opEvent, "", 0, 0)
	b.count = 2<<20 + 1
	if _, err = m3.Map(context.Background(), rawIndex(b.bytes()), src); err == nil || !strings.Contains(err.Error(), "2097153 operations, not within [0, 2097152]") {
		t.Fatalf("err = %v", err)
	}
	// The output limit counts the document as written: {"events":[...]}.
	e2 := newEngine(t, runtime.Config{MaxOutputBytes: 200, CallTimeout: time.Minute})
	m2 := load(t, e2, "emitops")
	b = newEmitInput(5).op(opEvent, "", 0, 0).required().text("event_type", strings.Repeat("t", 60))
	_, err = m2.Map(context.Background(), rawIndex(b.bytes()), src)
	if err == nil || !strings.Contains(err.Error(), "over the limit of 200") {
		t.Fatalf("err = %v", err)
	}
}
