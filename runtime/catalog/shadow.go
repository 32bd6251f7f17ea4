package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// Defaults of the shadow comparison.
const (
	defaultSampleSize = 20
	// maxShadowTypes bounds the per-event-type counters of one migration;
	// further types are counted under otherTypes.
	maxShadowTypes = 1024
	otherTypes     = "(other)"
	// maxSampleBytes bounds each output kept in a difference sample.
	maxSampleBytes = 16 << 10
)

// migration is a candidate in shadow of an active module. Its counters are
// updated lock-free from the hot path; the sample ring is behind a mutex that is
// never held across a mapper call.
type migration struct {
	cand  *loaded
	since time.Time
	size  int

	matches     atomic.Int64
	differences atomic.Int64
	types       sync.Map // event type -> *typeCounters
	ntypes      atomic.Int64

	mu      sync.Mutex
	samples []DiffSample // ring, len <= size
	next    int

	onCompare func(match bool) // metrics hook; may be nil
}

type typeCounters struct {
	matches, differences atomic.Int64
}

func newMigration(cand *loaded, size int, onCompare func(bool)) *migration {
	if size <= 0 {
		size = defaultSampleSize
	}
	return &migration{cand: cand, since: time.Now().UTC(), size: size, onCompare: onCompare}
}

// counters returns the counters of eventType, creating them (bounded).
func (m *migration) counters(eventType string) *typeCounters {
	if v, ok := m.types.Load(eventType); ok {
		return v.(*typeCounters)
	}
	if m.ntypes.Load() >= maxShadowTypes || len(eventType) > maxCachedTypeBytes {
		eventType = otherTypes
	}
	v, loaded := m.types.LoadOrStore(eventType, new(typeCounters))
	if !loaded {
		m.ntypes.Add(1)
	}
	return v.(*typeCounters)
}

// record counts one comparison and keeps a sample of a difference.
func (m *migration) record(eventType string, tc *typeCounters, activeID string, a runtime.Result, aerr error, c runtime.Result, cerr error) {
	same := sameOutcomeIDs(a, aerr, c, cerr, activeID, m.cand.mod.ID())
	if tc == nil {
		tc = m.counters(eventType)
	}
	if same {
		m.matches.Add(1)
		tc.matches.Add(1)
	} else {
		m.differences.Add(1)
		tc.differences.Add(1)
		m.sample(eventType, a, aerr, c, cerr)
	}
	if m.onCompare != nil {
		m.onCompare(same)
	}
}

func (m *migration) sample(eventType string, a runtime.Result, aerr error, c runtime.Result, cerr error) {
	s := DiffSample{At: time.Now().UTC(), EventType: eventType}
	s.Active, s.ActiveError = sampleOutput(a, aerr)
	s.Candidate, s.CandidateError = sampleOutput(c, cerr)
	m.mu.Lock()
	if len(m.samples) < m.size {
		m.samples = append(m.samples, s)
	} else {
		m.samples[m.next] = s
	}
	m.next = (m.next + 1) % m.size
	m.mu.Unlock()
}

// status returns the counters and the samples, oldest sample first.
func (m *migration) status() MigrationStatus {
	st := MigrationStatus{
		Candidate:   m.cand.info(),
		Since:       m.since,
		Matches:     m.matches.Load(),
		Differences: m.differences.Load(),
	}
	m.types.Range(func(k, v any) bool {
		tc := v.(*typeCounters)
		st.EventTypes = append(st.EventTypes, TypeCounters{
			EventType: k.(string), Matches: tc.matches.Load(), Differences: tc.differences.Load(),
		})
		return true
	})
	sort.Slice(st.EventTypes, func(i, j int) bool { return st.EventTypes[i].EventType < st.EventTypes[j].EventType })
	m.mu.Lock()
	if len(m.samples) < m.size {
		st.Samples = append(st.Samples, m.samples...)
	} else {
		st.Samples = append(st.Samples, m.samples[m.next:]...)
		st.Samples = append(st.Samples, m.samples[:m.next]...)
	}
	m.mu.Unlock()
	return st
}

func sampleOutput(r runtime.Result, err error) (json.RawMessage, string) {
	if err != nil {
		return nil, err.Error()
	}
	var b bytes.Buffer
	b.WriteString(`{"events":[`)
	for i, e := range r.Events {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteString(`]}`)
	if b.Len() <= maxSampleBytes {
		return b.Bytes(), ""
	}
	// Too large to keep whole: keep the beginning as a JSON string.
	cut, _ := json.Marshal(string(b.Bytes()[:maxSampleBytes]) + "...")
	return cut, ""
}

// sameOutcomeIDs reports whether the candidate's outcome equals the active
// one's: both failed for the same reason, or both produced the same events in
// the same order, compared as JSON values with "source.mapper" left out (it
// names the module and so always differs). Knowing the two module IDs allows
// a byte comparison of events that differ only in the trailing
// "mapper":"<id>"}} the host writes last.
func sameOutcomeIDs(a runtime.Result, aerr error, c runtime.Result, cerr error, aID, cID string) bool {
	if aerr != nil || cerr != nil {
		if aerr == nil || cerr == nil {
			return false
		}
		return failReason(aerr) == failReason(cerr)
	}
	if len(a.Events) != len(c.Events) || a.Oversize != c.Oversize {
		return false
	}
	for i := range a.Events {
		if !sameTail(a.Events[i], c.Events[i], aID, cID) && !sameEvent(a.Events[i], c.Events[i]) {
			return false
		}
	}
	return true
}

func failReason(err error) string {
	var me *runtime.MapError
	if errors.As(err, &me) {
		return string(me.Reason)
	}
	return err.Error()
}

// sameTail reports whether a and b are byte for byte the same but for the
// mapper ID at their very end, where the host puts source.mapper.
func sameTail(a, b []byte, aID, bID string) bool {
	if aID == "" || bID == "" {
		return false
	}
	const head, tail = `,"mapper":"`, `"}}`
	na, nb := len(head)+len(aID)+len(tail), len(head)+len(bID)+len(tail)
	if len(a) < na || len(b) < nb || len(a)-na != len(b)-nb {
		return false
	}
	ta, tb := a[len(a)-na:], b[len(b)-nb:]
	if string(ta) != head+aID+tail || string(tb) != head+bID+tail {
		return false
	}
	return bytes.Equal(a[:len(a)-na], b[:len(b)-nb])
}

// sameEvent compares two event documents ignoring source.mapper.
func sameEvent(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	av, err := decodeEvent(a)
	if err != nil {
		return false
	}
	bv, err := decodeEvent(b)
	if err != nil {
		return false
	}
	return reflect.DeepEqual(av, bv)
}

func decodeEvent(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if m, ok := v.(map[string]any); ok {
		if src, ok := m["source"].(map[string]any); ok {
			delete(src, "mapper")
		}
	}
	return v, nil
}
