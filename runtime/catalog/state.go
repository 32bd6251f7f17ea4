package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// StateStore keeps the catalogue's decisions across restarts: which version
// of each module name is in service, which candidate shadows it, and which
// files were set aside. *outbox.Outbox implements it, so the decisions live
// with the collector's other durable state. LoadRecord answers nil and no
// error when nothing was saved under name.
type StateStore interface {
	LoadRecord(name string) ([]byte, error)
	SaveRecord(name string, value []byte) error
}

// stateRecord is the name the catalogue saves its decisions under.
const stateRecord = "catalog"

// stateFormat is the version of savedState's encoding.
const stateFormat = 1

// savedState is what the catalogue saves after every change of its
// decisions. Versions are identified by the SHA-256 of their bytes, not by
// file name, so a file renamed while the collector was stopped keeps its
// role; the IDs are there for a person reading it.
type savedState struct {
	Format int                  `json:"format"`
	Names  map[string]savedSlot `json:"names"`
	// Parked maps the SHA-256 of every parked drop-in to the reason it was
	// parked.
	Parked map[string]string `json:"parked,omitempty"`
	// Deferred are the decisions of other replicas whose candidate this one
	// does not hold in shadow yet, oldest first (decision.go).
	Deferred []Decision `json:"deferred,omitempty"`
}

type savedSlot struct {
	Active      string    `json:"active"`
	ActiveID    string    `json:"active_id"`
	Candidate   string    `json:"candidate,omitempty"`
	CandidateID string    `json:"candidate_id,omitempty"`
	Since       time.Time `json:"since,omitzero"`
}

// loadState reads the decisions saved by an earlier run. An unreadable or
// unknown record is logged and ignored: the directory is then taken as it
// stands, as on a first start.
func (c *Catalog) loadState() {
	if c.opts.State == nil || c.opts.Dir == "" {
		return
	}
	b, err := c.opts.State.LoadRecord(stateRecord)
	if err != nil {
		c.log.Error().Err(err).Msg("mapper decisions of the last run unreadable; the directory is taken as it stands")
		return
	}
	if b == nil {
		return
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil || st.Format != stateFormat {
		c.log.Error().Err(err).Int("format", st.Format).
			Msg("mapper decisions of the last run not understood; the directory is taken as it stands")
		return
	}
	c.saved = &st
	c.lastSaved = b
	for _, d := range st.Deferred {
		if d.check() == nil {
			c.deferred = append(c.deferred, d)
		}
	}
	c.metrics.deferred.Set(float64(len(c.deferred)))
}

// save records the decisions as they stand, if they changed since the last
// save. It does nothing before the directory was read once (a start that
// could not read it must not erase what the last run decided). A failed
// save is logged and returned; the decisions hold in memory and the next
// change tries again. c.mu held.
func (c *Catalog) save() error {
	if c.opts.State == nil || c.opts.Dir == "" || !c.scanned || c.closed {
		return nil
	}
	st := savedState{Format: stateFormat, Names: make(map[string]savedSlot, len(c.slots))}
	for n, s := range c.slots {
		sv := savedSlot{Active: s.active.sha, ActiveID: s.active.mod.ID()}
		if s.mig != nil {
			sv.Candidate, sv.CandidateID, sv.Since = s.mig.cand.sha, s.mig.cand.mod.ID(), s.mig.since
		}
		st.Names[n] = sv
	}
	for _, fs := range c.files {
		if fs.state == "parked" && fs.sha != "" {
			if st.Parked == nil {
				st.Parked = map[string]string{}
			}
			st.Parked[fs.sha] = fs.reason
		}
	}
	st.Deferred = c.deferred
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("catalog: encode the decisions: %w", err)
	}
	if bytes.Equal(b, c.lastSaved) {
		return nil
	}
	if err := c.opts.State.SaveRecord(stateRecord, b); err != nil {
		c.log.Error().Err(err).Msg("could not save the mapper decisions; they hold until the collector stops, and the next change tries again")
		return fmt.Errorf("%w: %w", ErrNotSaved, err)
	}
	c.lastSaved = b
	return nil
}

// restore says how the start-up scan places a drop-in when the last run
// saved its decisions.
type restore uint8

const (
	// restoreNone: nothing saved applies; the directory is taken as it
	// stands (every valid module active, the higher version of a name
	// winning).
	restoreNone restore = iota
	// restoreActive: the version in service before the restart.
	restoreActive
	// restorePark: set aside before the restart, or a candidate whose
	// active version is gone.
	restorePark
	// restoreLater: another version of a name whose saved active version is
	// here: placed as if it had been dropped in after the start, so a
	// candidate goes back into shadow and a file added while the collector
	// was stopped becomes a candidate (or, with PromoteImmediate, active).
	restoreLater
)

// restoreRank orders the start-up placements so that the saved active
// version of every name is in place before the other versions of it.
func (c *Catalog) restoreRank(sha string) int {
	for _, sv := range c.saved.Names {
		if sv.Active == sha {
			return 0
		}
	}
	for _, sv := range c.saved.Names {
		if sv.Candidate == sha {
			return 1
		}
	}
	return 2
}

// restoreOf decides how a drop-in of the module name is placed at start-up
// given the saved decisions, s being the name's slot so far (nil if none).
// The reason is set for restorePark. c.mu held.
func (c *Catalog) restoreOf(name string, s *slot, ld *loaded) (restore, string) {
	sv, known := c.saved.Names[name]
	if reason, ok := c.saved.Parked[ld.sha]; ok && (!known || (ld.sha != sv.Active && ld.sha != sv.Candidate)) {
		return restorePark, reason
	}
	if !known {
		return restoreNone, ""
	}
	if ld.sha == sv.Active {
		return restoreActive, ""
	}
	if s == nil || s.active.sha != sv.Active {
		// The version in service before the restart is gone (its file
		// removed or changed while the collector was stopped, or a built-in
		// replaced by an upgrade). Deletion wins over a migration: its
		// candidate is not promoted by the back door.
		if ld.sha == sv.Candidate {
			return restorePark, "migration cancelled: " + sv.ActiveID + ", in service before the restart, is gone"
		}
		return restoreNone, ""
	}
	return restoreLater, ""
}
