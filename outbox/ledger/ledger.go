package ledger

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Counts are the numbers of one intake row (see the package documentation).
type Counts struct {
	Consumed     int64            `json:"consumed"`
	Committed    int64            `json:"committed"`
	Skipped      map[string]int64 `json:"skipped,omitempty"`
	DeadLettered map[string]int64 `json:"dead_lettered,omitempty"`
	Events       int64            `json:"events"`
	Delivered    int64            `json:"delivered"`
	Duplicates   int64            `json:"duplicates"`
	Refused      int64            `json:"refused"`
	Damaged      int64            `json:"damaged,omitempty"`
	Replayed     int64            `json:"replayed,omitempty"`
	// Pending is not stored: the events still in the outbox, filled in
	// when the ledger is read.
	Pending int64 `json:"pending"`
}

// Add adds o to c.
func (c *Counts) Add(o *Counts) {
	c.Consumed += o.Consumed
	c.Committed += o.Committed
	c.Skipped = addMap(c.Skipped, o.Skipped)
	c.DeadLettered = addMap(c.DeadLettered, o.DeadLettered)
	c.Events += o.Events
	c.Delivered += o.Delivered
	c.Duplicates += o.Duplicates
	c.Refused += o.Refused
	c.Damaged += o.Damaged
	c.Replayed += o.Replayed
	c.Pending += o.Pending
}

func addMap(dst, src map[string]int64) map[string]int64 {
	for k, v := range src {
		if v == 0 {
			continue
		}
		if dst == nil {
			dst = make(map[string]int64, len(src))
		}
		dst[k] += v
	}
	return dst
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// Skip counts one notification consumed and skipped for reason.
func (c *Counts) Skip(reason string) {
	c.Consumed++
	c.Skipped = addMap(c.Skipped, map[string]int64{reason: 1})
}

// DeadLetter counts one notification consumed and dead-lettered for reason.
func (c *Counts) DeadLetter(reason string) {
	c.Consumed++
	c.DeadLettered = addMap(c.DeadLettered, map[string]int64{reason: 1})
}

// Commit counts one notification consumed and committed as events.
func (c *Counts) Commit() {
	c.Consumed++
	c.Committed++
}

// SkippedTotal is the sum of Skipped over its reasons.
func (c *Counts) SkippedTotal() int64 { return sum(c.Skipped) }

// DeadTotal is the sum of DeadLettered over its reasons.
func (c *Counts) DeadTotal() int64 { return sum(c.DeadLettered) }

// Settled is committed + skipped + dead-lettered: what consumed must equal.
func (c *Counts) Settled() int64 { return c.Committed + c.SkippedTotal() + c.DeadTotal() }

// Accounted is delivered + refused + damaged + pending: what events must equal.
func (c *Counts) Accounted() int64 { return c.Delivered + c.Refused + c.Damaged + c.Pending }

// Balanced reports whether every notification consumed is settled once and
// every event committed is delivered, refused, lost to damage or pending.
func (c *Counts) Balanced() bool { return c.Consumed == c.Settled() && c.Events == c.Accounted() }

// Key identifies an intake row. Hour is unix seconds, a multiple of 3600.
type Key struct {
	Hour   int64
	Source string
	Type   string
}

// StoredKey identifies a stored row: the hour of the events' timestamp
// (unix seconds), their project and resource type.
type StoredKey struct {
	Hour         int64
	Project      string
	ResourceType string
}

// StoredCounts are the numbers of one stored row.
type StoredCounts struct {
	Delivered int64 `json:"delivered"`
	// Copies are the delivered events whose (event_id, timestamp) was
	// delivered before by another event of the outbox (a notification
	// committed twice): the API stores them once.
	Copies int64 `json:"copies"`
}

// Expected is what the Reporting API holds for the row: each event once.
func (s StoredCounts) Expected() int64 { return s.Delivered - s.Copies }

// Delta is what one transaction adds to the ledger, or a sum of them.
type Delta struct {
	Intake map[Key]*Counts
	Stored map[StoredKey]*StoredCounts
}

// HourOf truncates t to its hour, as unix seconds.
func HourOf(t time.Time) int64 { return t.Unix() - mod(t.Unix(), 3600) }

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// Row returns the intake row of k, created when missing. Its source and
// type are taken through Name, except in an hour's Other row.
func (d *Delta) Row(k Key) *Counts {
	if !k.IsOther() {
		k.Source, k.Type = Name(k.Source), Name(k.Type)
	}
	return row(&d.Intake, k)
}

// StoredRow returns the stored row of k, created when missing. Its project
// and resource type are taken through Name, except in the rows of project
// Other that a Cap writes.
func (d *Delta) StoredRow(k StoredKey) *StoredCounts {
	if !k.IsOther() || (k.ResourceType != Other && k.ResourceType != OutOfRange && k.ResourceType != TooMany) {
		k.Project, k.ResourceType = Name(k.Project), Name(k.ResourceType)
	}
	return row(&d.Stored, k)
}

// row returns the entry of k in *rows, creating the map and a zero entry
// when missing.
func row[K comparable, C any](rows *map[K]*C, k K) *C {
	if *rows == nil {
		*rows = make(map[K]*C)
	}
	c := (*rows)[k]
	if c == nil {
		c = new(C)
		(*rows)[k] = c
	}
	return c
}

// Empty reports whether d adds nothing.
func (d *Delta) Empty() bool { return d == nil || (len(d.Intake) == 0 && len(d.Stored) == 0) }

// Add adds o to d.
func (d *Delta) Add(o *Delta) {
	if o == nil {
		return
	}
	for k, c := range o.Intake {
		d.Row(k).Add(c)
	}
	for k, c := range o.Stored {
		r := d.StoredRow(k)
		r.Delivered += c.Delivered
		r.Copies += c.Copies
	}
}

// Clone returns a copy of d that shares nothing with it.
func (d *Delta) Clone() *Delta {
	c := &Delta{}
	c.Add(d)
	return c
}

// Redirect files one notification counted as dead-lettered for reason, in a
// row of source and event type, as skipped for skip instead: what an input
// set aside was not kept after all. It reports whether such a count was
// found (the row's hour is the first that has one).
func (d *Delta) Redirect(source, eventType, reason, skip string) bool {
	if d == nil {
		return false
	}
	source, eventType = Name(source), Name(eventType)
	for _, k := range slices.SortedFunc(maps.Keys(d.Intake), cmpKey) {
		c := d.Intake[k]
		if k.Source != source || k.Type != eventType || c.DeadLettered[reason] <= 0 {
			continue
		}
		c.DeadLettered[reason]--
		if c.DeadLettered[reason] == 0 {
			delete(c.DeadLettered, reason)
		}
		c.Consumed-- // counted again by Skip
		c.Skip(skip)
		return true
	}
	return false
}

// Hours is every hour d has a row for, intake and stored, in order.
func (d *Delta) Hours() []int64 {
	set := map[int64]bool{}
	for k := range d.Intake {
		set[k.Hour] = true
	}
	for k := range d.Stored {
		set[k.Hour] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// Split cuts d into one delta per hour.
func (d *Delta) Split() map[int64]*Delta {
	out := map[int64]*Delta{}
	get := func(h int64) *Delta {
		if out[h] == nil {
			out[h] = &Delta{}
		}
		return out[h]
	}
	for k, c := range d.Intake {
		get(k.Hour).Row(k).Add(c)
	}
	for k, c := range d.Stored {
		r := get(k.Hour).StoredRow(k)
		r.Delivered += c.Delivered
		r.Copies += c.Copies
	}
	return out
}

// Prune removes the rows of hours before cutoff (unix seconds).
func (d *Delta) Prune(cutoff int64) {
	for k := range d.Intake {
		if k.Hour < cutoff {
			delete(d.Intake, k)
		}
	}
	for k := range d.Stored {
		if k.Hour < cutoff {
			delete(d.Stored, k)
		}
	}
}

// wire is the stored form of a Delta.
type wire struct {
	I []wireIntake `json:"i,omitempty"`
	S []wireStored `json:"s,omitempty"`
}

type wireIntake struct {
	H int64  `json:"h"`
	S string `json:"s"`
	T string `json:"t"`
	Counts
}

type wireStored struct {
	H int64  `json:"h"`
	P string `json:"p"`
	R string `json:"r"`
	StoredCounts
}

// Encode returns the stored form of d.
func (d *Delta) Encode() ([]byte, error) {
	var w wire
	for k, c := range d.Intake {
		w.I = append(w.I, wireIntake{H: k.Hour, S: k.Source, T: k.Type, Counts: *c})
	}
	for k, c := range d.Stored {
		w.S = append(w.S, wireStored{H: k.Hour, P: k.Project, R: k.ResourceType, StoredCounts: *c})
	}
	// Without HTML escaping a name's '<', '>' and '&' take one byte, not
	// six; the names hold no control character (Name), so a row's names
	// take at most twice MaxNameBytes (a quote or backslash is escaped).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Decode adds the stored form b to d.
func (d *Delta) Decode(b []byte) error { return d.DecodeWindow(b, time.Time{}, time.Time{}) }

// DecodeWindow adds the rows of the stored form b whose hours are in
// [from, to) (zero: no bound, as Window) to d: a reading of some hours holds
// only their rows.
func (d *Delta) DecodeWindow(b []byte, from, to time.Time) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	in := window(from, to)
	for i := range w.I {
		r := &w.I[i]
		if in(r.H) {
			d.Row(Key{Hour: r.H, Source: r.S, Type: r.T}).Add(&r.Counts)
		}
	}
	for _, r := range w.S {
		if !in(r.H) {
			continue
		}
		s := d.StoredRow(StoredKey{Hour: r.H, Project: r.P, ResourceType: r.R})
		s.Delivered += r.Delivered
		s.Copies += r.Copies
	}
	return nil
}

// DecodeHours adds to hours the hour of every row of the stored form b.
func DecodeHours(b []byte, hours map[int64]bool) error {
	var w struct {
		I []struct {
			H int64 `json:"h"`
		} `json:"i"`
		S []struct {
			H int64 `json:"h"`
		} `json:"s"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	for _, r := range w.I {
		hours[r.H] = true
	}
	for _, r := range w.S {
		hours[r.H] = true
	}
	return nil
}

// window reports whether an hour is in [from, to) (zero: no bound).
func window(from, to time.Time) func(int64) bool {
	return func(h int64) bool {
		return (from.IsZero() || h >= HourOf(from)) && (to.IsZero() || h < to.Unix())
	}
}

// IntakeRow is one intake row of a Report.
type IntakeRow struct {
	Hour   time.Time `json:"hour"`
	Source string    `json:"source,omitempty"`
	Type   string    `json:"event_type,omitempty"`
	Counts
	Balanced bool `json:"balanced"`
}

// StoredRow is one stored row of a Report.
type StoredRow struct {
	Hour         time.Time `json:"hour"`
	Project      string    `json:"project_id"`
	ResourceType string    `json:"resource_type"`
	StoredCounts
	Expected int64 `json:"expected"`
}

// Problem names an hour that does not balance or still has events in the
// outbox.
type Problem struct {
	Hour   time.Time `json:"hour"`
	Detail string    `json:"detail"`
}

// Report is the ledger between two hours, as `ledger` prints it.
type Report struct {
	From     time.Time   `json:"from"`
	To       time.Time   `json:"to"`
	By       string      `json:"by,omitempty"`
	Intake   []IntakeRow `json:"intake"`
	Stored   []StoredRow `json:"stored"`
	Problems []Problem   `json:"problems"`
	// Next, on a page of a longer report (GET /ledger), is the first hour
	// of the next page: ask again from it. Zero on the last page.
	Next time.Time `json:"next,omitzero"`
}

// Append adds the rows and problems of p, the next page of the same report
// (its hours after r's), to r.
func (r *Report) Append(p *Report) {
	r.Intake = append(r.Intake, p.Intake...)
	r.Stored = append(r.Stored, p.Stored...)
	r.Problems = append(r.Problems, p.Problems...)
}

// Window keeps the rows of the hours in [from, to) (zero: unbounded).
func (d *Delta) Window(from, to time.Time) *Delta {
	out := &Delta{}
	in := window(from, to)
	for k, c := range d.Intake {
		if in(k.Hour) {
			out.Row(k).Add(c)
		}
	}
	for k, c := range d.Stored {
		if in(k.Hour) {
			r := out.StoredRow(k)
			r.Delivered += c.Delivered
			r.Copies += c.Copies
		}
	}
	return out
}

// Grouping of the intake rows of a Report.
const (
	BySource = "source"
	ByType   = "type"
	ByHour   = "hour"
)

// NewReport builds the report of d, its intake rows grouped by (one of
// BySource, ByType, ByHour; "" keeps every hour, source and type).
func NewReport(d *Delta, from, to time.Time, by string) (*Report, error) {
	switch by {
	case "", BySource, ByType, ByHour:
	default:
		return nil, fmt.Errorf("%w: --by %q: source, type or hour", ErrInvalid, by)
	}
	r := &Report{From: from, To: to, By: by, Intake: []IntakeRow{}, Stored: []StoredRow{}, Problems: []Problem{}}
	// Problems are found per hour over the full rows, before grouping.
	perHour := map[int64]*Counts{}
	unbalanced := map[int64][]string{}
	for k, c := range d.Intake {
		h := perHour[k.Hour]
		if h == nil {
			h = &Counts{}
			perHour[k.Hour] = h
		}
		h.Add(c)
		if !c.Balanced() {
			unbalanced[k.Hour] = append(unbalanced[k.Hour], rowName(k))
		}
	}
	for _, hour := range slices.Sorted(maps.Keys(perHour)) {
		c := perHour[hour]
		at := time.Unix(hour, 0).UTC()
		if rows := unbalanced[hour]; len(rows) > 0 {
			slices.Sort(rows)
			r.Problems = append(r.Problems, Problem{Hour: at, Detail: fmt.Sprintf(
				"does not balance: consumed %d, settled %d (committed %d, skipped %d, dead-lettered %d); events %d, accounted %d (delivered %d, refused %d, damaged %d, pending %d); rows: %s",
				c.Consumed, c.Settled(), c.Committed, c.SkippedTotal(), c.DeadTotal(),
				c.Events, c.Accounted(), c.Delivered, c.Refused, c.Damaged, c.Pending, strings.Join(rows, ", "))})
		}
		if c.Pending > 0 {
			r.Problems = append(r.Problems, Problem{Hour: at, Detail: fmt.Sprintf("%d events still in the outbox", c.Pending)})
		}
	}
	grouped := map[Key]*Counts{}
	for k, c := range d.Intake {
		g := k
		switch by {
		case BySource:
			g.Type = ""
		case ByType:
			g.Source = ""
		case ByHour:
			g.Source, g.Type = "", ""
		}
		if grouped[g] == nil {
			grouped[g] = &Counts{}
		}
		grouped[g].Add(c)
	}
	for _, k := range slices.SortedFunc(maps.Keys(grouped), cmpKey) {
		c := grouped[k]
		r.Intake = append(r.Intake, IntakeRow{Hour: time.Unix(k.Hour, 0).UTC(), Source: k.Source, Type: k.Type, Counts: *c, Balanced: c.Balanced()})
	}
	for _, k := range slices.SortedFunc(maps.Keys(d.Stored), cmpStoredKey) {
		c := d.Stored[k]
		r.Stored = append(r.Stored, StoredRow{Hour: time.Unix(k.Hour, 0).UTC(), Project: k.Project, ResourceType: k.ResourceType,
			StoredCounts: *c, Expected: c.Expected()})
	}
	return r, nil
}

func rowName(k Key) string {
	src, typ := k.Source, k.Type
	if src == "" {
		src = "-"
	}
	if typ == "" {
		typ = "-"
	}
	return src + "/" + typ
}

func cmpKey(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Hour, b.Hour), strings.Compare(a.Source, b.Source), strings.Compare(a.Type, b.Type))
}

func cmpStoredKey(a, b StoredKey) int {
	return cmp.Or(cmp.Compare(a.Hour, b.Hour), strings.Compare(a.Project, b.Project), strings.Compare(a.ResourceType, b.ResourceType))
}

// Delta returns the rows of the report back as a delta (for adding up the
// reports of several replicas). Only a report built without grouping keeps
// every key.
func (r *Report) Delta() *Delta {
	d := &Delta{}
	for _, row := range r.Intake {
		c := row.Counts
		d.Row(Key{Hour: row.Hour.Unix(), Source: row.Source, Type: row.Type}).Add(&c)
	}
	for _, row := range r.Stored {
		s := d.StoredRow(StoredKey{Hour: row.Hour.Unix(), Project: row.Project, ResourceType: row.ResourceType})
		s.Delivered += row.Delivered
		s.Copies += row.Copies
	}
	return d
}
