package ledger

import (
	"hash/fnv"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/jsonindex"
)

// Event is what the ledger reads from a canonical event.
type Event struct {
	// Key of its intake row (Hour left to the caller: the hour the
	// notification was taken, which the event does not carry).
	Source string
	Type   string
	// Stored is its stored row; Hour is NoHour when the timestamp is
	// unreadable.
	Stored StoredKey
	// Identity hashes (event_id, timestamp), the pair the Reporting API
	// stores an event once for.
	Identity uint64
}

// NoHour is the hour of an unreadable timestamp: no hour (hours are
// multiples of 3600).
const NoHour int64 = -1

// Reader reads canonical events; its zero value is ready. Not safe for
// concurrent use (it reuses its index and its buffer).
//
// The members that key the ledger's rows (exchange, event type, project,
// resource type) take few values, and one Reader reads every event of an
// outbox: it answers the same string for the same value each time, so that
// reading an event allocates only its timestamp.
type Reader struct {
	x     jsonindex.Index
	buf   []byte
	names map[string]string
}

// maxNames bounds the strings a Reader keeps; past it, it starts again.
const maxNames = 4096

// Read reads ev. An event that is not JSON yields empty members.
func (r *Reader) Read(ev []byte) Event {
	var out Event
	out.Stored.Hour = NoHour
	if r.x.Parse(ev) != nil {
		out.Identity = hash(ev, nil)
		return out
	}
	out.Source = r.name("source.exchange")
	out.Type = r.name("event_type")
	out.Stored.Project = r.name("project_id")
	out.Stored.ResourceType = r.name("resource_type")
	var ts string
	if b, ok := r.unquote("timestamp"); ok {
		ts = string(b)
	}
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		out.Stored.Hour = HourOf(t)
	}
	id, _ := r.unquote("event_id")
	out.Identity = hash(id, []byte(ts))
	return out
}

// unquote answers the string member at path, unquoted into the Reader's
// buffer (valid until the next call), or false when it is not a string.
func (r *Reader) unquote(path string) ([]byte, bool) {
	k, s, e := r.x.Lookup(path)
	if k != jsonindex.String {
		return nil, false
	}
	var err error
	r.buf, err = jsonindex.AppendUnquote(r.buf[:0], r.x.Bytes()[s:e])
	if err != nil {
		return nil, false
	}
	return r.buf, true
}

// name answers the string member at path ("" when it is not a string), one
// string per value while fewer than maxNames are kept. A value longer than
// MaxNameBytes is answered as the ledger names it (Name) and not kept, so
// the kept strings take at most maxNames × MaxNameBytes bytes.
func (r *Reader) name(path string) string {
	b, ok := r.unquote(path)
	if !ok {
		return ""
	}
	if len(b) > MaxNameBytes {
		return Name(string(b))
	}
	if s, ok := r.names[string(b)]; ok {
		return s
	}
	if r.names == nil || len(r.names) >= maxNames {
		r.names = make(map[string]string)
	}
	s := string(b)
	r.names[s] = s
	return s
}

func hash(a, b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(a)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(b)
	return h.Sum64()
}
