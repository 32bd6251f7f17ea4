package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// defaultReplayBatch is the number of dead letters replayed per outbox commit.
const defaultReplayBatch = 100

// maxReplayFailures bounds the failures a ReplayReport lists.
const maxReplayFailures = 50

// DeadLetterInfo is a dead letter as listed: everything but the body.
type DeadLetterInfo struct {
	Seq        uint64    `json:"seq"`
	At         time.Time `json:"at"`
	Exchange   string    `json:"exchange,omitempty"`
	RoutingKey string    `json:"routing_key,omitempty"`
	EventType  string    `json:"event_type,omitempty"`
	Module     string    `json:"module,omitempty"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail,omitempty"`
	BodyBytes  int       `json:"body_bytes"`
	// Undeliverable marks a body no replay can deliver (oversized,
	// undecodable, refused by its decoder), kept as evidence within a
	// budget of its own (docs/outbox.md).
	Undeliverable bool `json:"undeliverable,omitempty"`
}

// DeadLetterDetail is one dead letter with its message, credentials
// redacted: the inner oslo message (unwrapped from its envelope) as JSON, or
// nothing when the body is not JSON.
type DeadLetterDetail struct {
	DeadLetterInfo
	Message json.RawMessage `json:"message,omitempty"`
}

func infoOf(d outbox.StoredDeadLetter) DeadLetterInfo {
	return DeadLetterInfo{
		Seq: d.Seq, At: d.At, Exchange: d.Exchange, RoutingKey: d.RoutingKey, EventType: d.EventType,
		Module: d.Module, Reason: d.Reason, Detail: d.Detail, BodyBytes: len(d.Body), Undeliverable: d.Undeliverable,
	}
}

// ListDeadLetters lists up to limit dead letters after the sequence after,
// oldest first (page on with the last Seq returned). Bodies are left out.
func ListDeadLetters(ctx context.Context, ob *outbox.Outbox, after uint64, limit int) ([]DeadLetterInfo, error) {
	ds, err := ob.ListDeadLetters(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetterInfo, 0, len(ds))
	for _, d := range ds {
		out = append(out, infoOf(d))
	}
	return out, nil
}

// ShowDeadLetter returns one dead letter with its message, every member named
// like a credential (internal/redact) redacted, at any depth and inside JSON
// held in strings. It wraps outbox.ErrNotFound for an unknown sequence.
func ShowDeadLetter(ctx context.Context, ob *outbox.Outbox, seq uint64) (DeadLetterDetail, error) {
	d, err := ob.GetDeadLetter(ctx, seq)
	if err != nil {
		return DeadLetterDetail{}, err
	}
	return DeadLetterDetail{DeadLetterInfo: infoOf(d), Message: redactedMessage(d.Body)}, nil
}

// redactedMessage unwraps an oslo envelope and returns the message, compact,
// with every credential-named member replaced by the redaction marker; nil when
// the body is not JSON. An envelope whose inner message does not parse is
// shown whole, the inner text redacted as a string holding JSON.
func redactedMessage(body []byte) json.RawMessage {
	if !json.Valid(body) {
		return nil
	}
	msg := body
	var env struct {
		Message *string `json:"oslo.message"`
	}
	if json.Unmarshal(body, &env) == nil && env.Message != nil && json.Valid([]byte(*env.Message)) {
		msg = []byte(*env.Message)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, redact.JSON(nil, msg)); err != nil {
		return nil
	}
	return b.Bytes()
}

// ReplayOptions select what Replay does.
type ReplayOptions struct {
	// Seqs are the dead letters to replay; empty means all of them.
	Seqs []uint64 `json:"seqs,omitempty"`
	// BatchSize is the number of letters per outbox commit (default 100).
	BatchSize int `json:"-"`
	// Message builds the message a letter is replayed as; nil: an AMQP
	// message of its body, exchange and routing key. An input whose messages
	// need Canonical or DeriveID (plog) says so here.
	Message func(outbox.StoredDeadLetter) pipeline.Message `json:"-"`
}

// ReplayFailure is a dead letter that still does not map.
type ReplayFailure struct {
	Seq       uint64 `json:"seq"`
	EventType string `json:"event_type,omitempty"`
	Module    string `json:"module,omitempty"`
	Reason    string `json:"reason"`
}

// ReplayReport says what a replay did.
type ReplayReport struct {
	Examined int `json:"examined"`
	// Replayed letters mapped (to zero or more events), were committed to the
	// outbox and removed from the dead-letter area.
	Replayed int `json:"replayed"`
	Events   int `json:"events"`
	// Remaining letters still fail (or are skipped); they stay, with the reason
	// of this attempt.
	Remaining int             `json:"remaining"`
	Failures  []ReplayFailure `json:"failures,omitempty"` // the first few
}

// Replay maps dead letters again through the pipeline (and so through the
// catalogue as it stands) and commits the resulting events to the outbox.
// An event the Reporting API refused (outbox.ReasonRefusedByAPI) is not
// mapped: it goes back to the outbox as it is, to be sent again. The bytes of
// a damaged segment (outbox.ReasonDamagedSegment) cannot be replayed and are
// left, listed among the failures. A
// letter is removed only after its events are committed; a crash in between
// replays it again later, which the Reporting API absorbs (events are
// idempotent by event_id). A letter that fails again stays, updated with the
// new reason and module. Letters stored after the replay started are left
// for the next one. Letters are replayed as AMQP messages (body, exchange,
// routing key) unless ReplayOptions.Message says otherwise. Do not run two
// replays on one outbox at once.
//
// On an outbox error (ErrFull, ErrRefused) Replay stops and returns what it
// did so far with the error.
func Replay(ctx context.Context, ob *outbox.Outbox, p *pipeline.Pipeline, opts ReplayOptions) (ReplayReport, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = defaultReplayBatch
	}
	var rep ReplayReport
	if len(opts.Seqs) > 0 {
		for i := 0; i < len(opts.Seqs); i += opts.BatchSize {
			var batch []outbox.StoredDeadLetter
			for _, seq := range opts.Seqs[i:min(i+opts.BatchSize, len(opts.Seqs))] {
				d, err := ob.GetDeadLetter(ctx, seq)
				if errors.Is(err, outbox.ErrNotFound) {
					continue
				}
				if err != nil {
					return rep, err
				}
				batch = append(batch, d)
			}
			if err := replayBatch(ctx, ob, p, batch, opts.Message, &rep); err != nil {
				return rep, err
			}
		}
		return rep, nil
	}
	// Only letters dead-lettered before the replay started are replayed: a
	// letter that fails again is stored anew (stamped now, under a higher
	// sequence) and must not be met twice, and a letter the consumer adds
	// meanwhile was just refused by the same catalogue.
	start := time.Now().UTC()
	var after uint64
	for {
		page, err := ob.ListDeadLetters(ctx, after, opts.BatchSize)
		if err != nil {
			return rep, err
		}
		if len(page) == 0 {
			return rep, nil
		}
		after = page[len(page)-1].Seq
		batch := page[:0]
		for _, d := range page {
			if d.At.Before(start) {
				batch = append(batch, d)
			}
		}
		if err := replayBatch(ctx, ob, p, batch, opts.Message, &rep); err != nil {
			return rep, err
		}
	}
}

func replayBatch(ctx context.Context, ob *outbox.Outbox, p *pipeline.Pipeline, batch []outbox.StoredDeadLetter,
	message func(outbox.StoredDeadLetter) pipeline.Message, rep *ReplayReport) error {
	if message == nil {
		message = func(d outbox.StoredDeadLetter) pipeline.Message {
			return pipeline.Message{Body: d.Body, Exchange: d.Exchange, RoutingKey: d.RoutingKey, Compression: d.Compression}
		}
	}
	var events []ledger.Keyed
	var done, stale []uint64
	var renewed []outbox.DeadLetter
	for _, d := range batch {
		rep.Examined++
		switch d.Reason {
		case outbox.ReasonRefusedByAPI:
			// An event the Reporting API refused: sent again as it is.
			events = append(events, ledger.Keyed{Bytes: d.Body})
			done = append(done, d.Seq)
			continue
		case outbox.ReasonDamagedSegment:
			// Stored bytes of an unreadable segment: nothing to map.
			rep.Remaining++
			if len(rep.Failures) < maxReplayFailures {
				rep.Failures = append(rep.Failures, ReplayFailure{Seq: d.Seq, Reason: outbox.ReasonDamagedSegment})
			}
			continue
		}
		r := p.Process(ctx, message(d))
		if r.Outcome == pipeline.Mapped {
			events = r.AppendKeyed(events)
			done = append(done, d.Seq)
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rep.Remaining++
		reason := r.Reason
		if len(rep.Failures) < maxReplayFailures {
			rep.Failures = append(rep.Failures, ReplayFailure{Seq: d.Seq, EventType: r.EventType, Module: r.Module, Reason: reason})
		}
		if reason == d.Reason && r.Module == d.Module {
			continue // fails the same way: left as it is
		}
		nd := d.DeadLetter
		nd.Reason, nd.Module, nd.At = reason, r.Module, time.Now().UTC()
		nd.Undeliverable = r.Outcome == pipeline.Unparseable
		if r.EventType != "" {
			nd.EventType = r.EventType
		}
		nd.Detail = ""
		if r.Err != nil {
			nd.Detail = r.Err.Error()
		}
		renewed = append(renewed, nd)
		stale = append(stale, d.Seq)
	}
	if len(events) > 0 {
		// The ledger counts the letters replayed into events, in the
		// transaction that commits the events.
		now := time.Now()
		tally := &ledger.Delta{}
		replayed := map[uint64]bool{}
		for _, seq := range done {
			replayed[seq] = true
		}
		for _, d := range batch {
			if replayed[d.Seq] {
				tally.Row(ledger.Key{Hour: ledger.HourOf(now), Source: d.Exchange, Type: d.EventType}).Replayed++
			}
		}
		if err := ob.AppendKeyed(ctx, events, now, tally); err != nil {
			rep.Remaining += len(done)
			return fmt.Errorf("replay: commit events: %w", err)
		}
	}
	if len(done) > 0 {
		if _, err := ob.DeleteDeadLetters(ctx, done...); err != nil {
			return fmt.Errorf("replay: remove replayed letters: %w", err)
		}
		rep.Replayed += len(done)
		rep.Events += len(events)
	}
	if len(renewed) > 0 {
		// One transaction: never both versions, never none, and not held
		// to the dead-letter bounds (one replaces the other).
		if err := ob.ReplaceDeadLetters(ctx, stale, renewed); err != nil {
			return fmt.Errorf("replay: update failing letters: %w", err)
		}
	}
	return nil
}

// PurgeOptions select the dead letters PurgeDeadLetters removes: those that
// match every criterion given. At least one criterion, or All, is required.
type PurgeOptions struct {
	// From and To bound the sequence numbers, inclusive; 0 leaves that end
	// open.
	From uint64 `json:"from,omitempty"`
	To   uint64 `json:"to,omitempty"`
	// Mapper is a module name (every version of it) or name@version.
	Mapper string `json:"mapper,omitempty"`
	// OlderThan keeps letters written less than this long ago, as a Go
	// duration ("72h").
	OlderThan string `json:"older_than,omitempty"`
	// All removes every dead letter when no other criterion is given.
	All bool `json:"all,omitempty"`
}

// PurgeReport says what a purge did.
type PurgeReport struct {
	Examined int `json:"examined"`
	Purged   int `json:"purged"`
}

// purgePage is the number of dead letters examined, and removed, at a time.
const purgePage = 500

// PurgeDeadLetters removes the dead letters opts selects, for good: the
// way to make room in the dead-letter area for letters that will never be
// replayed. It answers ErrInvalidPurge for options that select nothing
// explicitly (or are malformed).
func PurgeDeadLetters(ctx context.Context, ob *outbox.Outbox, opts PurgeOptions) (PurgeReport, error) {
	var rep PurgeReport
	var older time.Duration
	if opts.OlderThan != "" {
		d, err := time.ParseDuration(opts.OlderThan)
		if err != nil || d <= 0 {
			return rep, fmt.Errorf("%w: older_than %q is not a positive duration", ErrInvalidPurge, opts.OlderThan)
		}
		older = d
	}
	if opts.From == 0 && opts.To == 0 && opts.Mapper == "" && older == 0 && !opts.All {
		return rep, fmt.Errorf("%w: give a sequence range, a mapper, an age, or all", ErrInvalidPurge)
	}
	if opts.To != 0 && opts.From > opts.To {
		return rep, fmt.Errorf("%w: from %d is after to %d", ErrInvalidPurge, opts.From, opts.To)
	}
	cutoff := time.Now().Add(-older)
	match := func(d outbox.StoredDeadLetter) bool {
		if opts.Mapper != "" && d.Module != opts.Mapper && !strings.HasPrefix(d.Module, opts.Mapper+"@") {
			return false
		}
		return older == 0 || d.At.Before(cutoff)
	}
	after := uint64(0)
	if opts.From > 0 {
		after = opts.From - 1
	}
	for {
		page, err := ob.ListDeadLetters(ctx, after, purgePage)
		if err != nil {
			return rep, err
		}
		var seqs []uint64
		done := len(page) == 0
		for _, d := range page {
			if opts.To != 0 && d.Seq > opts.To {
				done = true
				break
			}
			rep.Examined++
			if match(d) {
				seqs = append(seqs, d.Seq)
			}
		}
		if len(seqs) > 0 {
			n, err := ob.DeleteDeadLetters(ctx, seqs...)
			rep.Purged += n
			if err != nil {
				return rep, err
			}
		}
		if done {
			return rep, nil
		}
		after = page[len(page)-1].Seq
	}
}
