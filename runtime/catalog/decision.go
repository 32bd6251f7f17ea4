package catalog

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Decision is an operator's promote or abort of a candidate, as it is shared
// between the replicas of one deployment. The candidate is named by the
// SHA-256 of its bytes, so a replica applies the decision to the same code
// whatever the file is called there.
type Decision struct {
	Action    string    `json:"action"`    // DecisionPromote or DecisionAbort
	Module    string    `json:"module"`    // the module name
	Candidate string    `json:"candidate"` // name@version, for people
	SHA256    string    `json:"sha256"`    // hex SHA-256 of the candidate's bytes
	By        string    `json:"by"`        // the replica the operator asked
	At        time.Time `json:"at"`        // when it took effect there
}

// Actions of a Decision.
const (
	DecisionPromote = "promote"
	DecisionAbort   = "abort"
)

// Results of ApplyDecision, also the result label of
// tally_collector_mapper_decisions_received_total.
const (
	// DecisionApplied: the candidate was in shadow here and is now promoted
	// or aborted.
	DecisionApplied = "applied"
	// DecisionDeferred: the candidate is not in shadow here (its file has
	// not arrived, or was rejected): the decision is kept with the saved
	// decisions and applied when the candidate appears.
	DecisionDeferred = "deferred"
	// DecisionIgnored: this replica's own decision come back, a decision
	// already in effect, one that contradicts what serves here, or one that
	// does not parse.
	DecisionIgnored = "ignored"
)

// DecisionResult is what ApplyDecision made of a decision.
type DecisionResult struct {
	Result string `json:"result"` // DecisionApplied, DecisionDeferred or DecisionIgnored
	Reason string `json:"reason"`
}

// MaxDeferred bounds the decisions kept waiting for their candidate; past it
// the oldest is dropped (and logged).
const MaxDeferred = 100

// check validates a decision received from elsewhere.
func (d Decision) check() error {
	switch {
	case d.Action != DecisionPromote && d.Action != DecisionAbort:
		return fmt.Errorf("action %q is not promote or abort", d.Action)
	case d.Module == "" || len(d.Module) > 256:
		return errors.New("no module name, or one over 256 bytes")
	case len(d.SHA256) != 64:
		return errors.New("sha256 is not 64 hexadecimal digits")
	case len(d.By) > 256 || len(d.Candidate) > 512:
		return errors.New("by or candidate over its length bound")
	}
	if _, err := hex.DecodeString(d.SHA256); err != nil {
		return errors.New("sha256 is not 64 hexadecimal digits")
	}
	return nil
}

func (d Decision) String() string {
	return fmt.Sprintf("%s %s (sha256 %s) decided on %s at %s",
		d.Action, d.Candidate, shortSHA(d.SHA256), d.By, d.At.UTC().Format(time.RFC3339))
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// ApplyDecision applies a decision another replica took (see Decision):
//
//   - its own decision come back (Decision.By is Options.Replica), and a
//     decision already in effect (a promoted candidate that is the version
//     in service here, an aborted one whose file is parked here), are
//     ignored;
//   - a candidate in shadow here with the decision's SHA-256 is promoted or
//     aborted, as Promote and Abort would, the reason naming the replica;
//   - a candidate this replica does not hold in shadow (its file has not
//     arrived, or was rejected here) defers the decision: it is kept with
//     the saved decisions, so it survives a restart, and applied when that
//     version becomes the candidate here. A newer promote of the same module
//     replaces an older deferred one; at most MaxDeferred are kept;
//   - a decision that contradicts this replica (promoting a version parked
//     here, aborting the version in service here) is ignored and logged:
//     a promotion is never taken back by an abort, nor a parked file
//     revived by a promote.
//
// The error is nil once the decision is applied, deferred or ignored and the
// decisions are saved; it is set only when the catalogue is closed or the
// decisions could not be saved (the caller should offer the decision again
// later). Every decision is logged and counted in
// tally_collector_mapper_decisions_received_total{action,result}.
func (c *Catalog) ApplyDecision(ctx context.Context, d Decision) (DecisionResult, error) {
	if err := ctx.Err(); err != nil {
		return DecisionResult{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return DecisionResult{}, ErrClosed
	}
	res, changed := c.applyLocked(d)
	c.metrics.decisions.WithLabelValues(labelAction(d.Action), res.Result).Inc()
	ev := c.log.Info()
	if res.Result == DecisionIgnored && res.Reason != reasonOwn && res.Reason != reasonInEffect {
		ev = c.log.Warn()
	}
	ev.Str("mapper", d.Module).Str("candidate", d.Candidate).Str("sha256", d.SHA256).Str("action", d.Action).
		Str("by", d.By).Time("decided_at", d.At).Str("result", res.Result).Str("reason", res.Reason).
		Msg("mapper decision of a replica")
	if changed {
		c.publish()
	}
	if res.Result == DecisionDeferred && c.opts.State != nil && !c.scanned {
		// Nothing may be saved before the directory was read once; the
		// decision is kept in memory, and offered again it is saved then.
		return res, fmt.Errorf("%w: the drop-in directory was not read yet", ErrNotSaved)
	}
	return res, c.save()
}

const (
	reasonOwn      = "this replica's own decision"
	reasonInEffect = "already in effect"
)

// labelAction keeps the metric's label values to the two actions.
func labelAction(a string) string {
	if a == DecisionPromote || a == DecisionAbort {
		return a
	}
	return "invalid"
}

// applyLocked decides what d does here and does it; changed reports whether
// a new snapshot must be published. c.mu held.
func (c *Catalog) applyLocked(d Decision) (res DecisionResult, changed bool) {
	if err := d.check(); err != nil {
		return DecisionResult{DecisionIgnored, "not a valid decision: " + err.Error()}, false
	}
	if c.opts.Replica != "" && d.By == c.opts.Replica {
		return DecisionResult{DecisionIgnored, reasonOwn}, false
	}
	if c.opts.Dir == "" {
		return DecisionResult{DecisionIgnored, "this replica has no drop-in directory"}, false
	}
	s := c.slots[d.Module]
	reason := "decided on replica " + d.By + " at " + d.At.UTC().Format(time.RFC3339)
	switch d.Action {
	case DecisionPromote:
		switch {
		case s != nil && s.active.sha == d.SHA256:
			c.dropDeferred(d.SHA256)
			return DecisionResult{DecisionIgnored, reasonInEffect}, false
		case s != nil && s.mig != nil && s.mig.cand.sha == d.SHA256:
			c.promoteCandidate(s, reason)
			c.supersedeDeferred(d)
			return DecisionResult{DecisionApplied, "promoted " + s.active.mod.ID()}, true
		}
		if why, ok := c.parkedHere(d.SHA256); ok {
			c.dropDeferred(d.SHA256)
			return DecisionResult{DecisionIgnored, "the candidate is parked here (" + why + "); a promote does not revive it"}, false
		}
	case DecisionAbort:
		switch {
		case s != nil && s.mig != nil && s.mig.cand.sha == d.SHA256:
			id := s.mig.cand.mod.ID()
			c.abortCandidate(s, reason)
			c.dropDeferred(d.SHA256)
			return DecisionResult{DecisionApplied, "aborted " + id}, true
		case s != nil && s.active.sha == d.SHA256:
			c.dropDeferred(d.SHA256)
			return DecisionResult{DecisionIgnored, "the version is in service here; an abort does not take back a promotion"}, false
		}
		if _, ok := c.parkedHere(d.SHA256); ok {
			c.dropDeferred(d.SHA256)
			return DecisionResult{DecisionIgnored, reasonInEffect}, false
		}
	}
	c.deferDecision(d)
	return DecisionResult{DecisionDeferred, "the candidate is not in shadow here; applied when it is"}, false
}

// parkedHere reports whether a drop-in with that SHA-256 is parked here.
// c.mu held.
func (c *Catalog) parkedHere(sha string) (string, bool) {
	for _, fs := range c.files {
		if fs.sha == sha && fs.state == "parked" {
			return fs.reason, true
		}
	}
	return "", false
}

// deferDecision keeps d until its candidate appears. c.mu held.
func (c *Catalog) deferDecision(d Decision) {
	c.supersedeDeferred(d)
	c.deferred = append(c.deferred, d)
	if n := len(c.deferred) - MaxDeferred; n > 0 {
		for _, old := range c.deferred[:n] {
			c.log.Warn().Str("decision", old.String()).Int("max", MaxDeferred).
				Msg("deferred mapper decision dropped: too many decisions wait for their candidate")
		}
		c.deferred = append([]Decision(nil), c.deferred[n:]...)
	}
	c.metrics.deferred.Set(float64(len(c.deferred)))
}

// supersedeDeferred drops the deferred decisions d replaces: any about the
// same candidate, and, for a promote, the other deferred promotes of the
// same module (the newer promote wins). c.mu held.
func (c *Catalog) supersedeDeferred(d Decision) {
	kept := c.deferred[:0]
	for _, o := range c.deferred {
		if o.SHA256 == d.SHA256 || (d.Action == DecisionPromote && o.Action == DecisionPromote && o.Module == d.Module) {
			continue
		}
		kept = append(kept, o)
	}
	c.deferred = kept
	c.metrics.deferred.Set(float64(len(c.deferred)))
}

// dropDeferred forgets the deferred decisions about one candidate. c.mu held.
func (c *Catalog) dropDeferred(sha string) {
	kept := c.deferred[:0]
	for _, o := range c.deferred {
		if o.SHA256 != sha {
			kept = append(kept, o)
		}
	}
	c.deferred = kept
	c.metrics.deferred.Set(float64(len(c.deferred)))
}

// applyDeferred applies a deferred decision to ld, just placed under the
// module name: a candidate in shadow is promoted or aborted; a version that
// went into service by another way (a new name, PromoteImmediate, a start
// that took the directory as it stands) settles a deferred promote and
// makes a deferred abort moot. A parked or superseded ld leaves the decision
// waiting. It returns what it did, for the reload's report, or "". c.mu
// held.
func (c *Catalog) applyDeferred(name string, ld *loaded) string {
	var d Decision
	found := false
	for _, o := range c.deferred {
		if o.SHA256 == ld.sha && o.Module == name {
			d, found = o, true
		}
	}
	s := c.slots[name]
	if !found || s == nil {
		return ""
	}
	reason := "decided on replica " + d.By + " at " + d.At.UTC().Format(time.RFC3339)
	var res DecisionResult
	switch {
	case s.mig != nil && s.mig.cand == ld && d.Action == DecisionPromote:
		c.promoteCandidate(s, reason)
		res = DecisionResult{DecisionApplied, "promoted " + ld.mod.ID() + " (" + reason + ")"}
	case s.mig != nil && s.mig.cand == ld:
		c.abortCandidate(s, reason)
		res = DecisionResult{DecisionApplied, "aborted " + ld.mod.ID() + " (" + reason + ")"}
	case s.active == ld && d.Action == DecisionPromote:
		res = DecisionResult{DecisionIgnored, reasonInEffect}
	case s.active == ld:
		res = DecisionResult{DecisionIgnored, "the version went into service here on its own; an abort does not take it back"}
	default:
		return ""
	}
	c.dropDeferred(ld.sha)
	c.metrics.decisions.WithLabelValues(d.Action, res.Result).Inc()
	ev := c.log.Info()
	if res.Result == DecisionIgnored && res.Reason != reasonInEffect {
		ev = c.log.Warn()
	}
	ev.Str("mapper", name).Str("candidate", d.Candidate).Str("sha256", d.SHA256).Str("action", d.Action).
		Str("by", d.By).Time("decided_at", d.At).Str("result", res.Result).Str("reason", res.Reason).
		Msg("deferred mapper decision of a replica")
	return "deferred decision " + res.Result + ": " + res.Reason
}
