package ledger

import (
	"fmt"
	"hash/fnv"
	"sync"
	"unicode/utf8"
)

// The strings that key the ledger's rows (source, event type, project,
// resource type) come from what publishers send, and so do the hours of the
// stored rows. The ledger bounds both, so that what a publisher chooses
// changes what the rows are named, never how many there are or how long:
//
//   - Name folds a long string: a name longer than MaxNameBytes, or holding
//     invalid UTF-8 or a control character, becomes its first printable
//     bytes (at most foldPrefixBytes) followed by '~' and the 16 hexadecimal
//     digits of its FNV-1a 64-bit hash. Row and StoredRow apply it, so every
//     count of a string lands in the same row whoever counts it.
//   - A Cap admits at most MaxRowsPerHour distinct keys per hour in each
//     table; the counts of a key past it go to the hour's Other row.
//   - A stored row whose hour is unreadable or out of range (the outbox
//     keeps 2000-01-01 to a day after the delivery) is counted
//     under the delivery's hour as Other / OutOfRange; the new stored keys a
//     Cap admits per hour of delivery are bounded too (Other / TooMany past
//     them).
const (
	// MaxNameBytes is the longest name a row keeps as it is.
	MaxNameBytes = 128
	// foldPrefixBytes is how much of a folded name is kept before its hash.
	foldPrefixBytes = 96

	// MaxRowBytes bounds the stored form of one row: two names of at most
	// MaxNameBytes, each byte escaped at most to two, and its counts. A
	// commit's delta is at most this per row it holds.
	MaxRowBytes = 2048

	// MaxRowsPerHour is how many distinct keys an hour of each table holds
	// besides its Other row.
	MaxRowsPerHour = 512

	// Other names the row of an hour that holds the counts of the keys past
	// MaxRowsPerHour: its source and event type, or its project and resource
	// type.
	Other = "(other)"
	// OutOfRange is the resource type of the stored row (project Other)
	// that counts, under the hour of their delivery, the events whose
	// timestamp was unreadable or too far from it.
	OutOfRange = "(timestamp out of range)"
	// TooMany is the resource type of the stored row (project Other) that
	// counts, under the hour of their delivery, the events of stored keys
	// past the MaxRowsPerHour new stored keys admitted per hour of delivery.
	TooMany = "(too many rows)"
)

// Name returns s as a row names it: s itself, or when longer than
// MaxNameBytes, not valid UTF-8, holding a control character or spelling
// one of the ledger's own names (Other, OutOfRange, TooMany), its folded
// form (see above). Name(Name(s)) == Name(s).
func Name(s string) string {
	if len(s) <= MaxNameBytes && plain(s) && s != Other && s != OutOfRange && s != TooMany {
		return s
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if (r == utf8.RuneError && size <= 1) || r < 0x20 || r == 0x7f || n+size > foldPrefixBytes {
			break
		}
		n += size
	}
	return fmt.Sprintf("%s~%016x", s[:n], h.Sum64())
}

// plain reports whether s is valid UTF-8 without control characters.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s)
}

// IsOther reports whether k is an hour's Other row.
func (k Key) IsOther() bool { return k.Source == Other && k.Type == Other }

// IsOther reports whether k is one of the rows of project Other (an hour's
// Other row, OutOfRange or TooMany).
func (k StoredKey) IsOther() bool { return k.Project == Other }

// keySet is the keys admitted in one hour of one table.
type keySet[K comparable] struct {
	keys map[K]struct{}
	full bool  // admits no new key: MaxRowsPerHour reached, or an Other row exists
	last int64 // the hour a count was last written to it (Forget)
}

func (s *keySet[K]) has(k K) bool { _, ok := s.keys[k]; return ok }

func (s *keySet[K]) add(k K, perHour int) {
	if s.keys == nil {
		s.keys = make(map[K]struct{})
	}
	s.keys[k] = struct{}{}
	if len(s.keys) >= perHour {
		s.full = true
	}
}

// Cap holds the keys each hour of the ledger has admitted, and maps the rows
// of every delta written to the ledger: a key admitted keeps its row; a new
// key is admitted while its hour holds fewer than its bound and has no Other
// row; past that its counts go to the hour's Other row, for good (an hour
// with an Other row admits no new key). Since every count of a key after
// its first is mapped the same way, a key's counts are never split between
// its row and Other: rows that balance still balance.
//
// Only the counts that open a row admit a key: intake counts written with
// the notifications and events they count. The counts of events already
// counted (delivered, refused, pending) follow the decision made for the
// events and admit nothing. A Cap is rebuilt from the stored rows (Learn)
// when the store is opened. Safe for concurrent use.
type Cap struct {
	mu      sync.Mutex
	perHour int
	intake  map[int64]*keySet[Key]
	stored  map[int64]*keySet[StoredKey]
	// admitted counts the stored keys admitted in the hour of delivery
	// budgetHour.
	budgetHour int64
	admitted   int
}

// NewCap returns a Cap admitting perHour keys per hour and table
// (MaxRowsPerHour when perHour <= 0).
func NewCap(perHour int) *Cap {
	if perHour <= 0 {
		perHour = MaxRowsPerHour
	}
	return &Cap{perHour: perHour, intake: map[int64]*keySet[Key]{}, stored: map[int64]*keySet[StoredKey]{}}
}

func set[K comparable](m map[int64]*keySet[K], h int64) *keySet[K] {
	s := m[h]
	if s == nil {
		s = &keySet[K]{}
		m[h] = s
	}
	return s
}

// Learn admits every key of d, rows read back from the store, whatever the
// bound, as written at now (an hour); an hour holding an Other row, or as
// many keys as the bound, admits no more.
func (c *Cap) Learn(d *Delta, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range d.Intake {
		s := set(c.intake, k.Hour)
		s.last = max(s.last, now)
		if k.IsOther() {
			s.full = true
			continue
		}
		s.add(k, c.perHour)
	}
	for k := range d.Stored {
		s := set(c.stored, k.Hour)
		s.last = max(s.last, now)
		if k.IsOther() {
			s.full = s.full || k.ResourceType == Other
			continue
		}
		s.add(k, c.perHour)
	}
}

// Folded is how many rows of a delta a Cap moved into Other rows.
type Folded struct {
	Intake, Stored int
}

// Apply returns d with its rows mapped (see Cap): admitIntake says whether
// its intake counts may admit new keys; its stored rows always may, within
// the bound per hour of the timestamp and per hour of delivery, now. d is
// returned as it is when nothing moves.
func (c *Cap) Apply(d *Delta, admitIntake bool, now int64) (*Delta, Folded) {
	var f Folded
	if d.Empty() {
		return d, f
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now != c.budgetHour {
		c.budgetHour, c.admitted = now, 0
	}
	moveIntake := moves(d.Intake, func(k Key) Key { return c.intakeKey(k, admitIntake) })
	moveStored := moves(d.Stored, func(k StoredKey) StoredKey { return c.storedKey(k, now) })
	if moveIntake == nil && moveStored == nil {
		return d, f
	}
	out := &Delta{}
	for k, cnt := range d.Intake {
		if to, ok := moveIntake[k]; ok {
			k = to
			f.Intake++
		}
		out.Row(k).Add(cnt)
	}
	for k, cnt := range d.Stored {
		if to, ok := moveStored[k]; ok {
			k = to
			f.Stored++
		}
		r := out.StoredRow(k)
		r.Delivered += cnt.Delivered
		r.Copies += cnt.Copies
	}
	return out, f
}

// moves maps each key of rows that mapKey maps to another key to that key;
// it is nil when no key moves.
func moves[K comparable, V any](rows map[K]V, mapKey func(K) K) map[K]K {
	var m map[K]K
	for k := range rows {
		if to := mapKey(k); to != k {
			if m == nil {
				m = map[K]K{}
			}
			m[k] = to
		}
	}
	return m
}

// Intake maps the intake key k without admitting it and without writing
// (the events still in the outbox, counted when the ledger is read).
func (c *Cap) Intake(k Key) Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.intake[k.Hour]; k.IsOther() || (s != nil && s.has(k)) {
		return k
	}
	return Key{Hour: k.Hour, Source: Other, Type: Other}
}

func (c *Cap) intakeKey(k Key, admit bool) Key {
	other := Key{Hour: k.Hour, Source: Other, Type: Other}
	s := set(c.intake, k.Hour)
	s.last = max(s.last, c.budgetHour)
	switch {
	case k.IsOther():
		s.full = true
		return k
	case s.has(k):
		return k
	case admit && !s.full:
		s.add(k, c.perHour)
		return k
	}
	s.full = true
	return other
}

func (c *Cap) storedKey(k StoredKey, now int64) StoredKey {
	s := set(c.stored, k.Hour)
	s.last = max(s.last, now)
	if k.IsOther() {
		s.full = s.full || k.ResourceType == Other
		return k
	}
	switch {
	case s.has(k):
		return k
	case s.full:
		return StoredKey{Hour: k.Hour, Project: Other, ResourceType: Other}
	case c.admitted >= c.perHour:
		return StoredKey{Hour: now, Project: Other, ResourceType: TooMany}
	}
	c.admitted++
	s.add(k, c.perHour)
	return k
}

// Forget drops the keys of the hours no count was written to since cutoff
// (an hour): the store drops the counts written before the retention, and
// the Cap their keys.
func (c *Cap) Forget(cutoff int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, s := range c.intake {
		if s.last < cutoff {
			delete(c.intake, h)
		}
	}
	for h, s := range c.stored {
		if s.last < cutoff {
			delete(c.stored, h)
		}
	}
}
