package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// module is a loaded mapper as the catalogue holds it; *runtime.Module
// satisfies it.
type module interface {
	pipeline.Mapper
	Close(ctx context.Context) error
}

var _ module = (*runtime.Module)(nil)

type origin uint8

const (
	originBuiltin origin = iota
	originDropIn
)

func (o origin) String() string {
	if o == originBuiltin {
		return "builtin"
	}
	return "drop-in"
}

// loaded is one loaded module and where it came from. Immutable.
type loaded struct {
	mod    module
	origin origin
	file   string // drop-in path, or "builtin:<file>"
	base   string // file name, for the tie rule
	sha    string // hex SHA-256 of the wasm bytes
	at     time.Time
}

func (l *loaded) info() ModuleInfo {
	mf := l.mod.Manifest()
	return ModuleInfo{
		ID:         l.mod.ID(),
		Version:    mf.Version,
		Origin:     l.origin.String(),
		File:       l.file,
		SHA256:     l.sha,
		EventTypes: append([]string(nil), mf.EventTypes...),
		LoadedAt:   l.at,
		Compiled:   compiled(l.mod),
	}
}

// compiled reports whether m's code is compiled and in memory: a drop-in
// always, a built-in once its first call loaded it.
func compiled(m module) bool {
	if lm, ok := m.(*lazyModule); ok {
		return lm.compiled()
	}
	return true
}

// States of a module name.
const (
	StateActive    = "active"
	StateMigrating = "migrating"
)

// ModuleInfo describes one loaded module.
type ModuleInfo struct {
	ID         string    `json:"id"` // name@version
	Version    string    `json:"version"`
	Origin     string    `json:"origin"` // "builtin" or "drop-in"
	File       string    `json:"file"`   // drop-in path, or "builtin:<file>"
	SHA256     string    `json:"sha256"`
	EventTypes []string  `json:"event_types"`
	LoadedAt   time.Time `json:"loaded_at"`
	// Compiled is true when the module's code is compiled and in memory. A
	// built-in module is compiled when the first notification it claims
	// arrives; until then the catalogue knows only its manifest.
	Compiled bool `json:"compiled"`
}

// TypeCounters are the shadow comparisons of one event type.
type TypeCounters struct {
	EventType   string `json:"event_type"`
	Matches     int64  `json:"matches"`
	Differences int64  `json:"differences"`
}

// DiffSample is one difference seen in shadow: both outputs ({"events":[...]}
// documents, or the error of a failed call).
type DiffSample struct {
	At             time.Time       `json:"at"`
	EventType      string          `json:"event_type"`
	Active         json.RawMessage `json:"active,omitempty"`
	ActiveError    string          `json:"active_error,omitempty"`
	Candidate      json.RawMessage `json:"candidate,omitempty"`
	CandidateError string          `json:"candidate_error,omitempty"`
}

// MigrationStatus is a candidate in shadow and what its comparison found.
type MigrationStatus struct {
	Candidate   ModuleInfo     `json:"candidate"`
	Since       time.Time      `json:"since"`
	Matches     int64          `json:"matches"`
	Differences int64          `json:"differences"`
	EventTypes  []TypeCounters `json:"event_types"`
	Samples     []DiffSample   `json:"samples"` // the last differences, oldest first
}

// MigrationOutcome is how a migration ended.
type MigrationOutcome struct {
	Name        string    `json:"name"`
	Result      string    `json:"result"` // "promoted", "aborted", "cancelled", "replaced"
	Active      string    `json:"active"` // the active module afterwards (name@version), "" if none
	Candidate   string    `json:"candidate"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
	Matches     int64     `json:"matches"`
	Differences int64     `json:"differences"`
	// Replicas is set in the answer to an operator's Promote or Abort when
	// the collector shares its decisions (Options.OnDecision):
	// ReplicasShared, or ReplicasPending with the reason in ReplicasError.
	Replicas      string `json:"replicas,omitempty"`
	ReplicasError string `json:"replicas_error,omitempty"`
}

// Values of MigrationOutcome.Replicas.
const (
	// ReplicasShared: the decision is on its way to every replica (the
	// broker confirmed it).
	ReplicasShared = "shared"
	// ReplicasPending: the decision is in effect on this replica only for
	// now; it is kept and sent again until the broker confirms it.
	ReplicasPending = "pending"
)

// ModuleStatus is everything the catalogue knows about one module name.
type ModuleStatus struct {
	Name      string            `json:"name"`
	State     string            `json:"state"` // StateActive or StateMigrating
	Active    ModuleInfo        `json:"active"`
	Migration *MigrationStatus  `json:"migration,omitempty"`
	Builtin   *ModuleInfo       `json:"builtin,omitempty"` // a built-in hidden by a drop-in of the same name
	Last      *MigrationOutcome `json:"last_migration,omitempty"`
}

// PatternStatus is one include pattern of an active module.
type PatternStatus struct {
	Pattern     string `json:"pattern"`
	Active      string `json:"active"` // name@version
	Origin      string `json:"origin"`
	State       string `json:"state"`
	Candidate   string `json:"candidate,omitempty"`
	Matches     int64  `json:"matches"`
	Differences int64  `json:"differences"`
}

// FileStatus is a drop-in file that serves no traffic: rejected (it failed to
// load, validate or pass its fixtures), parked (aborted, superseded, or left
// over from a cancelled migration) or skipped (never read: not a regular
// file, over Options.MaxFileSize, or a link leading out of the directory).
// It stays so until its content changes (a skipped file, until its stat
// does).
type FileStatus struct {
	File   string    `json:"file"`
	SHA256 string    `json:"sha256,omitempty"`
	State  string    `json:"state"` // "rejected", "parked" or "skipped"
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Rejection is a drop-in file a reload refused.
type Rejection struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// ReloadResult is what one reload of the drop-in directory did.
type ReloadResult struct {
	At       time.Time   `json:"at"`
	Trigger  string      `json:"trigger"` // "start", "watch", "periodic", "api"
	OK       bool        `json:"ok"`
	Changed  bool        `json:"changed"`
	Loaded   []string    `json:"loaded,omitempty"` // "name@version (file): active|candidate"
	Removed  []string    `json:"removed,omitempty"`
	Rejected []Rejection `json:"rejected,omitempty"`
	// Skipped are the files this reload did not read: not regular files,
	// files over the size cap, links leading out of the directory.
	Skipped []Rejection `json:"skipped,omitempty"`
	Error   string      `json:"error,omitempty"`
}

// Status is the catalogue as the `mappers` command and GET /mappers show it.
type Status struct {
	Generation uint64 `json:"generation"`
	Dir        string `json:"dir,omitempty"`
	Promote    string `json:"promote"`
	Replica    string `json:"replica,omitempty"`
	// Deferred are decisions of other replicas waiting for their candidate
	// to reach this one, oldest first.
	Deferred   []Decision      `json:"deferred,omitempty"`
	Patterns   []PatternStatus `json:"patterns"`
	Modules    []ModuleStatus  `json:"modules"`
	Files      []FileStatus    `json:"files,omitempty"`
	Conflicts  []string        `json:"conflicts,omitempty"`
	Reloads    map[string]int  `json:"reloads"` // by result: "ok", "error"
	LastReload *ReloadResult   `json:"last_reload,omitempty"`
}

// WriteText writes the status as the `mappers` command prints it.
func (s Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATTERN\tACTIVE\tORIGIN\tSTATE\tCANDIDATE\tMATCHES\tDIFFERENCES")
	for _, p := range s.Patterns {
		cand, m, d := "-", "-", "-"
		if p.Candidate != "" {
			cand, m, d = p.Candidate, fmt.Sprint(p.Matches), fmt.Sprint(p.Differences)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Pattern, p.Active, p.Origin, p.State, cand, m, d)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range s.Modules {
		if m.Migration == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s in shadow of %s since %s: %d matches, %d differences\n",
			m.Name, m.Migration.Candidate.ID, m.Active.ID, m.Migration.Since.Format(time.RFC3339),
			m.Migration.Matches, m.Migration.Differences)
		for _, t := range m.Migration.EventTypes {
			fmt.Fprintf(w, "  %s: %d matches, %d differences\n", t.EventType, t.Matches, t.Differences)
		}
	}
	for _, f := range s.Files {
		fmt.Fprintf(w, "\n%s: %s: %s", f.File, f.State, f.Reason)
	}
	if len(s.Files) > 0 {
		fmt.Fprintln(w)
	}
	for _, d := range s.Deferred {
		fmt.Fprintf(w, "\ndeferred: %s %s (sha256 %s), decided on %s at %s: waiting for the file",
			d.Action, d.Candidate, shortSHA(d.SHA256), d.By, d.At.Format(time.RFC3339))
	}
	if len(s.Deferred) > 0 {
		fmt.Fprintln(w)
	}
	for _, c := range s.Conflicts {
		fmt.Fprintf(w, "\nconflict: %s", c)
	}
	if len(s.Conflicts) > 0 {
		fmt.Fprintln(w)
	}
	if r := s.LastReload; r != nil {
		res := "ok"
		if !r.OK {
			res = "failed"
		}
		fmt.Fprintf(w, "\nlast reload: %s (%s) %s; reloads ok=%d error=%d\n",
			r.At.Format(time.RFC3339), r.Trigger, res, s.Reloads["ok"], s.Reloads["error"])
		for _, rj := range r.Rejected {
			fmt.Fprintf(w, "  rejected %s: %s\n", rj.File, rj.Reason)
		}
		for _, sk := range r.Skipped {
			fmt.Fprintf(w, "  skipped %s: %s\n", sk.File, sk.Reason)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", r.Error)
		}
	}
	return nil
}

// patterns lists every include pattern of the active modules.
func patterns(mods []ModuleStatus) []PatternStatus {
	var out []PatternStatus
	for _, m := range mods {
		var counts map[string]TypeCounters
		if m.Migration != nil {
			counts = map[string]TypeCounters{}
			for _, t := range m.Migration.EventTypes {
				counts[t.EventType] = t
			}
		}
		for _, g := range m.Active.EventTypes {
			if strings.HasPrefix(g, "!") {
				continue
			}
			p := PatternStatus{Pattern: g, Active: m.Active.ID, Origin: m.Active.Origin, State: m.State}
			if m.Migration != nil {
				p.Candidate = m.Migration.Candidate.ID
				for et, t := range counts {
					if globMatch(g, et) {
						p.Matches += t.Matches
						p.Differences += t.Differences
					}
				}
			}
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pattern != out[j].Pattern {
			return out[i].Pattern < out[j].Pattern
		}
		return out[i].Active < out[j].Active
	})
	return out
}

func globMatch(g, et string) bool {
	ok, _ := runtime.Manifest{EventTypes: []string{g}}.Match(et)
	return ok
}
