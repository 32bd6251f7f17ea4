package ledger

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
)

// Difference is a stored row whose expected count (delivered less the
// duplicates) differs from what the Reporting API counts.
type Difference struct {
	Hour         time.Time `json:"hour"`
	Project      string    `json:"project_id"`
	ResourceType string    `json:"resource_type"`
	Delivered    int64     `json:"delivered"`
	Copies       int64     `json:"copies"`
	Expected     int64     `json:"expected"`
	API          int64     `json:"api"`
}

// Reconciliation compares the ledger's stored rows with the API's counts.
type Reconciliation struct {
	From           time.Time    `json:"from"`
	To             time.Time    `json:"to"`
	Rows           int          `json:"rows"`
	Expected       int64        `json:"expected"`
	API            int64        `json:"api"`
	Differences    []Difference `json:"differences"`
	DifferingHours []time.Time  `json:"differing_hours"`
}

// Reconcile compares the stored rows of d with api, the Reporting API's
// counts (events per StoredKey) for the same hours. The API's keys are named
// as the ledger names them (Name), and those the ledger has no row for, in
// an hour whose keys past the bound were folded, are added into that hour's
// Other row: the ledger counted them there.
func Reconcile(d *Delta, api map[StoredKey]int64, from, to time.Time) *Reconciliation {
	named := make(map[StoredKey]int64, len(api))
	for k, n := range api {
		k.Project, k.ResourceType = Name(k.Project), Name(k.ResourceType)
		other := StoredKey{Hour: k.Hour, Project: Other, ResourceType: Other}
		if d.Stored[k] == nil && d.Stored[other] != nil {
			k = other
		}
		named[k] += n
	}
	api = named
	r := &Reconciliation{From: from, To: to, Differences: []Difference{}, DifferingHours: []time.Time{}}
	keys := map[StoredKey]bool{}
	for k := range d.Stored {
		keys[k] = true
	}
	for k := range api {
		keys[k] = true
	}
	hours := map[int64]bool{}
	for _, k := range slices.SortedFunc(maps.Keys(keys), cmpStoredKey) {
		var c StoredCounts
		if s := d.Stored[k]; s != nil {
			c = *s
		}
		r.Rows++
		r.Expected += c.Expected()
		r.API += api[k]
		if c.Expected() == api[k] {
			continue
		}
		r.Differences = append(r.Differences, Difference{Hour: time.Unix(k.Hour, 0).UTC(), Project: k.Project, ResourceType: k.ResourceType,
			Delivered: c.Delivered, Copies: c.Copies, Expected: c.Expected(), API: api[k]})
		hours[k.Hour] = true
	}
	for _, h := range slices.Sorted(maps.Keys(hours)) {
		r.DifferingHours = append(r.DifferingHours, time.Unix(h, 0).UTC())
	}
	return r
}

const hourLayout = "2006-01-02T15Z"

// WriteText prints the reconciliation: a line per differing row, then a
// summary naming every differing hour.
func (r *Reconciliation) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Differences) > 0 {
		fmt.Fprintln(tw, "HOUR\tPROJECT\tRESOURCE TYPE\tDELIVERED\tCOPIES\tEXPECTED\tAPI\tDIFFERENCE")
		for _, d := range r.Differences {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%+d\n", d.Hour.Format(hourLayout), d.Project, d.ResourceType,
				d.Delivered, d.Copies, d.Expected, d.API, d.API-d.Expected)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d rows (hour, project, resource type) compared from %s to %s: %d events expected, %d stored by the API\n",
		r.Rows, r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), r.Expected, r.API)
	if len(r.DifferingHours) == 0 {
		_, err := fmt.Fprintln(w, "0 differing hours")
		return err
	}
	fmt.Fprintf(w, "%d differing hours:", len(r.DifferingHours))
	for _, h := range r.DifferingHours {
		fmt.Fprintf(w, " %s", h.Format(hourLayout))
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteText prints the report as tables: the intake rows, the stored rows,
// then a line for each hour that does not balance or still has events in
// the outbox.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOUR\tSOURCE\tEVENT TYPE\tCONSUMED\tCOMMITTED\tSKIPPED\tDEAD\tEVENTS\tDELIVERED\tDUPLICATES\tREFUSED\tPENDING\tREPLAYED\tBALANCED")
	for _, row := range r.Intake {
		src, typ := row.Source, row.Type
		if r.By == ByHour || r.By == ByType {
			src = "*"
		}
		if r.By == ByHour || r.By == BySource {
			typ = "*"
		}
		if src == "" {
			src = "-"
		}
		if typ == "" {
			typ = "-"
		}
		bal := "yes"
		if !row.Balanced {
			bal = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", row.Hour.Format(hourLayout), src, typ,
			row.Consumed, row.Committed, reasons(row.Skipped), reasons(row.DeadLettered), row.Events, row.Delivered,
			row.Duplicates, row.Refused+row.Damaged, row.Pending, row.Replayed, bal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Stored) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "HOUR OF TIMESTAMP\tPROJECT\tRESOURCE TYPE\tDELIVERED\tCOPIES\tEXPECTED AT THE API")
		for _, s := range r.Stored {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", s.Hour.Format(hourLayout), s.Project, s.ResourceType, s.Delivered, s.Copies, s.Expected)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(r.Problems) == 0 {
		_, err := fmt.Fprintln(w, "every hour balances; no event left in the outbox")
		return err
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "%s: %s\n", p.Hour.Format(hourLayout), p.Detail)
	}
	return nil
}

// reasons prints a total and its reasons: "3 (unclaimed 2, no_event_type 1)".
func reasons(m map[string]int64) string {
	t := sum(m)
	if t == 0 {
		return "0"
	}
	s := fmt.Sprintf("%d (", t)
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, m[k])
	}
	return s + ")"
}
