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
	// Stored is its stored row; Hour is -1 when the timestamp is unreadable.
	Stored StoredKey
	// Identity hashes (event_id, timestamp), the pair the Reporting API
	// stores an event once for.
	Identity uint64
}

// Reader reads canonical events; its zero value is ready. Not safe for
// concurrent use (it reuses its index).
type Reader struct {
	x   jsonindex.Index
	buf []byte
}

// Read reads ev. An event that is not JSON yields empty members.
func (r *Reader) Read(ev []byte) Event {
	var out Event
	out.Stored.Hour = -1
	if r.x.Parse(ev) != nil {
		out.Identity = hash(ev, nil)
		return out
	}
	out.Source = r.str("source.exchange")
	out.Type = r.str("event_type")
	out.Stored.Project = r.str("project_id")
	out.Stored.ResourceType = r.str("resource_type")
	ts := r.str("timestamp")
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		out.Stored.Hour = HourOf(t)
	}
	out.Identity = hash([]byte(r.str("event_id")), []byte(ts))
	return out
}

func (r *Reader) str(path string) string {
	k, s, e := r.x.Lookup(path)
	if k != jsonindex.String {
		return ""
	}
	var err error
	r.buf, err = jsonindex.AppendUnquote(r.buf[:0], r.x.Bytes()[s:e])
	if err != nil {
		return ""
	}
	return string(r.buf)
}

func hash(a, b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(a)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(b)
	return h.Sum64()
}
