package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// The event contract (docs/events.md, "The contract"), as the host applies it
// to every event before it is committed, whatever wrote it: a module's
// output (buildResult), a canonical event a plog client sent (CanonicalWriter,
// which gives one without a timestamp the time of receipt, Source.Received).
//
//   - The required members (event_id, timestamp, event_type, service,
//     resource_type, resource_id, project_id, action) are present, strings,
//     not blank, printable and at most contract.MaxIDBytes long; the
//     timestamp is in the contract's form and within [earliestTimestamp,
//     now+maxFutureSkew]. An event that fails one fails the whole call with
//     ReasonInvalidEvent, naming the member: the notification becomes a dead
//     letter, and a replay after a fix delivers it.
//   - Everything else that breaks the contract is left out and counted
//     (Result.Dropped): an optional member (user_id) or an attribute that is
//     not what it must be, a quantity out of its range, a member the event
//     does not have, the earlier of two members of one name (the last one
//     counts, as in the JSON readers of oslo and the Reporting API).
//   - Strings are written as a JSON reader decodes them, escaped only where
//     JSON requires: "compute\u002einstance.exists" is written
//     "compute.instance.exists", so that the ledger and the Reporting API see
//     one text for one value.

// Bounds of the timestamp window.
var (
	// earliestTimestamp is the earliest timestamp an event may carry.
	earliestTimestamp = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	// maxFutureSkew is how far past the collector's clock a timestamp may be.
	maxFutureSkew = 24 * time.Hour
)

// Drops counts the members left out of the events of one call, by the
// contract.Violation they broke.
type Drops [contract.NumViolations]uint32

// Total is the number of members left out.
func (d *Drops) Total() int {
	n := 0
	for _, c := range d {
		n += int(c)
	}
	return n
}

// member is what the contract says of a top-level member.
type member uint8

const (
	mUnknown member = iota
	mRequired
	mTimestamp
	mOptional
	mAttributes
	mSource
	mEventID
)

func memberOf(name []byte) (kind member, required int) {
	for i, n := range requiredMembers {
		if string(name) == n {
			switch i {
			case 0:
				return mEventID, i
			case 1:
				return mTimestamp, i
			}
			return mRequired, i
		}
	}
	switch string(name) {
	case "user_id":
		return mOptional, -1
	case "attributes":
		return mAttributes, -1
	case "source":
		return mSource, -1
	}
	return mUnknown, -1
}

// timestampLayout is the contract's form of a timestamp the collector
// writes itself (wasm-sdk/contract.CheckTimestamp): UTC, microseconds.
const timestampLayout = "2006-01-02T15:04:05.000000Z"

// requiredMembers are checked for presence, in this order (event_id and
// timestamp first: memberOf gives them kinds of their own).
var requiredMembers = [...]string{"event_id", "timestamp", "event_type", "service",
	"resource_type", "resource_id", "project_id", "action"}

// eventWriter writes events checked against the contract. Its buffers are
// reused; it is not safe for concurrent use (one per instance).
type eventWriter struct {
	members, attrs []jsonindex.Child
	path           []byte
	ix             indexAttrs
	text           []byte   // decoded scratch
	names, anames  [][]byte // decoded member names; nil: written again later
	last           map[string]int
	// until is the latest timestamp accepted, in the contract's form
	// without the fraction, refreshed by begin.
	until    [19]byte
	untilSec int64
	// received, when set, is the timestamp written for an event that has
	// none, in the contract's form (CanonicalWriter: the time of receipt).
	received []byte
}

// begin prepares a call at the time now.
func (w *eventWriter) begin(now time.Time) {
	if s := now.Unix(); s != w.untilSec {
		w.untilSec = s
		now.Add(maxFutureSkew).UTC().AppendFormat(w.until[:0], "2006-01-02T15:04:05")
	}
}

// idSeed derives the event_id of events that carry none: the hex SHA-256 of
// the body (its first 16 bytes), with "-<i>" after the first event, so that a
// message sent again yields the same ids.
type idSeed struct {
	body []byte
	hex  [32]byte
	done bool
}

func (s *idSeed) append(dst []byte, i int) []byte {
	if !s.done {
		sum := sha256.Sum256(s.body)
		hex.Encode(s.hex[:], sum[:16])
		s.done = true
	}
	dst = append(dst, '"')
	dst = append(dst, s.hex[:]...)
	if i > 0 {
		dst = append(dst, '-')
		dst = strconv.AppendInt(dst, int64(i), 10)
	}
	return append(dst, '"')
}

// sourceMember is the `"source":{...}` member of the events of one call, and
// where the content of its exchange lies in it.
type sourceMember struct {
	b        []byte
	exchange ledger.Span
}

// keyOf is the member of ledger.Keys a required member is (by its index in
// requiredMembers), or nil for those the ledger does not read.
func keyOf(k *ledger.Keys, req int) *ledger.Span {
	switch req {
	case 0: // event_id
		return &k.ID
	case 1: // timestamp
		return &k.Timestamp
	case 2: // event_type
		return &k.Type
	case 4: // resource_type
		return &k.ResourceType
	case 6: // project_id
		return &k.Project
	}
	return nil
}

// spanOf is the span of the content of the string that ends dst (its
// closing quote last), from its opening quote at open, relative to begin.
func spanOf(dst []byte, begin, open int) ledger.Span {
	return ledger.Span{Start: uint32(open + 1 - begin), End: uint32(len(dst) - 1 - begin)} //nolint:gosec // G115: offsets within one event, which the output limit bounds far below 4 GiB
}

// write appends the event at path of x (an object) to dst, checked against
// the contract, with src as its source, and sets keys to where the members
// the ledger reads lie in it. ids, when not nil, names an event without a
// usable event_id (the i-th of its call). It returns dst unchanged and an
// error naming the member when a required one fails.
func (w *eventWriter) write(dst []byte, x *jsonindex.Index, path []byte, src sourceMember, ids *idSeed, i int, drops *Drops, keys *ledger.Keys) ([]byte, error) {
	w.members = x.AppendChildrenBytes(w.members[:0], path)
	w.path = append(append(w.path[:0], path...), ".attributes"...)
	if len(path) == 0 {
		w.path = w.path[1:]
	}
	w.ix = indexAttrs{x: x, path: w.path}
	return w.writeMembers(dst, x.Bytes(), w.members, &w.ix, src, ids, i, drops, keys)
}

// attrSource gives the members of the object that is the j-th member of the
// event being written (its "attributes").
type attrSource interface {
	attributes(dst []jsonindex.Child, j int) []jsonindex.Child
}

// indexAttrs is the attrSource of an event in an index: the members at path
// (the event's path and ".attributes", which names the last member of that
// name, the one written).
type indexAttrs struct {
	x    *jsonindex.Index
	path []byte
}

func (a *indexAttrs) attributes(dst []jsonindex.Child, _ int) []jsonindex.Child {
	return a.x.AppendChildrenBytes(dst, a.path)
}

// writeMembers is write for the event whose members are members, in doc,
// the members of its attributes given by attrs.
func (w *eventWriter) writeMembers(dst, doc []byte, members []jsonindex.Child, attrs attrSource, src sourceMember, ids *idSeed, i int, drops *Drops, keys *ledger.Keys) ([]byte, error) {
	begin := len(dst)
	w.names = w.markLast(w.names, doc, members)
	dst = append(dst, '{')
	*keys = ledger.Keys{}
	var have [len(requiredMembers)]bool
	wroteAttrs := false
	for j, mb := range members {
		name := w.names[j]
		if name == nil { // an earlier member of a name written again
			drops[contract.Duplicate]++
			continue
		}
		kind, req := memberOf(name)
		switch kind {
		case mSource:
			continue
		case mUnknown:
			drops[contract.Unknown]++
			continue
		case mAttributes:
			if mb.Kind != jsonindex.Object {
				drops[contract.Nested]++
				continue
			}
			dst = append(dst, `"attributes":`...)
			w.attrs = attrs.attributes(w.attrs[:0], j)
			dst = w.writeAttributes(dst, doc, drops)
			dst = append(dst, ',')
			wroteAttrs = true
			continue
		}
		if kind == mEventID && ids != nil && (mb.Kind != jsonindex.String || mb.End == mb.Start) {
			continue // derived below
		}
		v := w.check(doc, mb, kind)
		if v != contract.OK {
			if kind == mOptional {
				drops[v]++
				continue
			}
			dst = dst[:begin]
			return dst, fmt.Errorf("%s %s", name, describe(v, doc, mb))
		}
		if req >= 0 {
			have[req] = true
		}
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		open := len(dst)
		dst = w.appendString(dst, doc, mb)
		if req >= 0 {
			if k := keyOf(keys, req); k != nil {
				*k = spanOf(dst, begin, open)
			}
		}
		dst = append(dst, ',')
	}
	if !have[0] && ids != nil {
		dst = append(dst, `"event_id":`...)
		open := len(dst)
		dst = ids.append(dst, i)
		keys.ID = spanOf(dst, begin, open)
		dst = append(dst, ',')
		have[0] = true
	}
	if !have[1] && w.received != nil {
		dst = append(dst, `"timestamp":`...)
		open := len(dst)
		dst = append(dst, '"')
		dst = append(dst, w.received...)
		dst = append(dst, '"')
		keys.Timestamp = spanOf(dst, begin, open)
		dst = append(dst, ',')
		have[1] = true
	}
	for r, ok := range have {
		if !ok {
			dst = dst[:begin]
			return dst, fmt.Errorf("%s missing", requiredMembers[r])
		}
	}
	if !wroteAttrs {
		dst = append(dst, `"attributes":{},`...)
	}
	at := uint32(len(dst) - begin) //nolint:gosec // G115: an offset within one event, which the output limit bounds far below 4 GiB
	keys.Exchange = ledger.Span{Start: at + src.exchange.Start, End: at + src.exchange.End}
	dst = append(dst, src.b...)
	return append(dst, '}'), nil
}

// describe says what is wrong with a required member, quoting at most a
// little of its value.
func describe(v contract.Violation, doc []byte, mb jsonindex.Child) string {
	switch v {
	case contract.WrongType:
		return "is a JSON " + mb.Kind.String() + ", not a string"
	case contract.TooLong:
		return fmt.Sprintf("is over %d bytes (%d as written)", contract.MaxIDBytes, mb.End-mb.Start)
	case contract.BadTimestamp:
		val := doc[mb.Start:mb.End]
		if len(val) > 40 {
			val = val[:40]
		}
		return fmt.Sprintf("%q is not a time in [%s, now+%v] in RFC 3339 UTC", val,
			earliestTimestamp.Format(time.RFC3339), maxFutureSkew)
	}
	return "is " + v.String()
}

// check checks a top-level string member.
func (w *eventWriter) check(doc []byte, mb jsonindex.Child, kind member) contract.Violation {
	if mb.Kind != jsonindex.String {
		if mb.Kind == jsonindex.Null {
			return contract.Null
		}
		return contract.WrongType
	}
	raw := doc[mb.Start:mb.End]
	if len(raw) > 6*contract.MaxIDBytes {
		return contract.TooLong
	}
	text := w.decode(raw)
	if kind == mTimestamp {
		if v := contract.CheckTimestamp(text); v != contract.OK {
			return v
		}
		if string(text[:19]) < "2000-01-01T00:00:00" || string(text[:19]) > string(w.until[:]) {
			return contract.BadTimestamp
		}
		return contract.OK
	}
	return contract.CheckText(text, contract.MaxIDBytes)
}

// writeAttributes appends the attributes object whose members are w.attrs,
// leaving out and counting what breaks the contract.
func (w *eventWriter) writeAttributes(dst, doc []byte, drops *Drops) []byte {
	w.anames = w.markLast(w.anames, doc, w.attrs)
	attrNames := w.anames
	dst = append(dst, '{')
	first := true
	for j, a := range w.attrs {
		name := attrNames[j]
		if name == nil {
			drops[contract.Duplicate]++
			continue
		}
		if v := contract.CheckText(name, contract.MaxAttributeNameBytes); v != contract.OK {
			drops[v]++
			continue
		}
		if v := w.checkAttribute(doc, name, a); v != contract.OK {
			drops[v]++
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = jsonstr.AppendQuotedBytes(dst, name)
		dst = append(dst, ':')
		if a.Kind == jsonindex.String {
			dst = w.appendString(dst, doc, a)
		} else {
			dst = append(dst, doc[a.Start:a.End]...)
		}
	}
	return append(dst, '}')
}

// checkAttribute checks one attribute's value.
func (w *eventWriter) checkAttribute(doc []byte, name []byte, a jsonindex.Child) contract.Violation {
	n := unsafe.String(unsafe.SliceData(name), len(name)) //nolint:gosec // G103: read only, and only while name is: no copy
	switch a.Kind {
	case jsonindex.Null:
		return contract.Null
	case jsonindex.Object, jsonindex.Array:
		return contract.Nested
	case jsonindex.True, jsonindex.False:
		if _, q := contract.MaxOf(n); q || contract.IsTimeAttribute(n) {
			return contract.WrongType
		}
		return contract.OK
	case jsonindex.Number:
		if contract.IsTimeAttribute(n) {
			return contract.WrongType
		}
		max, _ := contract.MaxOf(n)
		return contract.CheckQuantity(doc[a.Start:a.End], max)
	}
	// A string.
	if _, q := contract.MaxOf(n); q {
		return contract.WrongType
	}
	raw := doc[a.Start:a.End]
	if len(raw) > 6*contract.MaxAttributeBytes {
		return contract.TooLong
	}
	text := w.decode(raw)
	if contract.IsTimeAttribute(n) {
		return contract.CheckTimestamp(text)
	}
	return contract.CheckAttributeText(text)
}

// decode returns the text of a string's raw content: raw itself when it
// holds no escape, else its decoding in w.text.
func (w *eventWriter) decode(raw []byte) []byte {
	if !hasEscape(raw) {
		return raw
	}
	w.text = jsonstr.AppendUnescaped(w.text[:0], raw)
	return w.text
}

// appendString appends a string member's value, quoted: as it was when it
// holds no escape, else decoded and escaped again only where JSON requires.
func (w *eventWriter) appendString(dst, doc []byte, mb jsonindex.Child) []byte {
	raw := doc[mb.Start:mb.End]
	if !hasEscape(raw) {
		dst = append(dst, '"')
		dst = append(dst, raw...)
		return append(dst, '"')
	}
	return jsonstr.AppendQuotedBytes(dst, w.decode(raw))
}

func hasEscape(raw []byte) bool { return bytes.IndexByte(raw, '\\') >= 0 }

// markLast returns names (reused) with names[j] the decoded name of
// members[j], or nil when a later member has the same name (the last one
// counts). Names that hold no escape share the document's memory.
func (w *eventWriter) markLast(names [][]byte, doc []byte, members []jsonindex.Child) [][]byte {
	names = names[:0]
	for _, mb := range members {
		key := doc[mb.KeyStart:mb.KeyEnd]
		if hasEscape(key) {
			key = jsonstr.AppendUnescaped(nil, key) // rare: a name a mapper escaped
		}
		names = append(names, key)
	}
	if len(names) <= 32 {
		for j := range names {
			for k := j + 1; k < len(names); k++ {
				if string(names[j]) == string(names[k]) {
					names[j] = nil
					break
				}
			}
		}
		return names
	}
	if w.last == nil {
		w.last = make(map[string]int)
	}
	clear(w.last)
	for j, n := range names {
		w.last[string(n)] = j
	}
	for j, n := range names {
		if w.last[string(n)] != j {
			names[j] = nil
		}
	}
	if len(w.last) > 1024 {
		w.last = nil // do not keep a rare large map
	}
	return names
}

// CanonicalWriter checks canonical events that arrive whole (a plog client
// sends them) against the event contract, and writes them as the host writes
// a module's events, "source" filled in, and "timestamp" when the event has
// none and Source.Received is set. Its zero value is ready; it is not safe
// for concurrent use.
type CanonicalWriter struct {
	w        eventWriter
	src      sourceMember
	ids      idSeed
	keys     ledger.Keys
	received []byte
}

// Write checks the event that is the whole of x and returns it as the
// collector commits it, with what the contract left out counted in dropped.
// mapper is written as source.mapper. A required member that breaks the
// contract fails it with an error wrapping ErrInvalidEvent.
func (c *CanonicalWriter) Write(x *jsonindex.Index, src Source, mapper string) (ev []byte, dropped Drops, err error) {
	c.src = appendSource(c.src.b[:0], nil, src, mapper)
	c.w.begin(time.Now())
	var ids *idSeed
	if src.DeriveID != nil {
		c.ids = idSeed{body: src.DeriveID}
		ids = &c.ids
	}
	c.w.received = nil
	if !src.Received.IsZero() {
		c.received = src.Received.UTC().AppendFormat(c.received[:0], timestampLayout)
		c.w.received = c.received
	}
	ev, err = c.w.write(nil, x, nil, c.src, ids, 0, &dropped, &c.keys)
	if err != nil {
		c.keys = ledger.Keys{}
		return nil, dropped, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return ev, dropped, nil
}

// Keys says where the members the completeness ledger reads lie in the event
// Write returned last (the zero Keys after a failed Write).
func (c *CanonicalWriter) Keys() ledger.Keys { return c.keys }
