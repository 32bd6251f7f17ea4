package sender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
)

// ReasonRefused is the reason the sender gives the store's dead-letter area
// for an event the Reporting API refused on its own. It equals
// outbox.ReasonRefusedByAPI.
const ReasonRefused = "refused_by_reporting_api"

const (
	// maxRefusalRead bounds what is kept of a refusal's answer before it is
	// redacted and cut to maxExcerpt.
	maxRefusalRead = 64 << 10
	// maxExcerpt bounds the excerpt of the API's answer kept with a dead
	// letter and logged, in bytes.
	maxExcerpt = 512
)

// refusalState follows the batches the Reporting API refuses for what they
// hold (400, 422, 413), from the first refusal until the events it refuses
// are set aside or the refusal turns out to concern the destination.
type refusalState struct {
	// splitLimit is, while above 0, the batch limit used to split a batch
	// answered 400 or 422 (halved at each refusal), until the refused event
	// is isolated and set aside or the cursor passed splitEnd, the last
	// sequence of the refused batches.
	splitLimit int
	splitEnd   uint64

	// A 413 halving in progress since a batch of several events: the last
	// sequence of that batch, and the batch limit and ceiling before it.
	// When the halving ends with one event set aside, they are restored:
	// the event was the cause, not the destination's body limit.
	shrinkEnd     uint64 // 0: none
	shrinkBatch   int
	shrinkCeiling int

	// proven is the largest body the API accepted since the last event was
	// set aside; 0: none. It is the evidence that the API takes events
	// other than the refused one (and, for a 413, bodies that large), so
	// that a refusal describes the event and not the API as a whole.
	proven int
}

// limit is the number of events to ask the store for.
func (s *Sender) limit() int {
	if s.refusal.splitLimit > 0 {
		return min(s.batch, s.refusal.splitLimit)
	}
	return s.batch
}

// reached notes that the cursor is at first: a split or a 413 halving whose
// refused batch lies behind it is over.
func (r *refusalState) reached(first uint64) {
	if r.splitLimit > 0 && first > r.splitEnd {
		r.splitLimit, r.splitEnd = 0, 0
	}
	if r.shrinkEnd > 0 && first > r.shrinkEnd {
		r.shrinkEnd = 0
	}
}

// split halves the batch after a 400 or 422 for n events ending at last.
func (r *refusalState) split(n int, last uint64) {
	r.splitLimit = max(1, n/2)
	r.splitEnd = max(r.splitEnd, last)
}

// shrinking records the limit before a 413 halving begins at a batch ending
// at last.
func (r *refusalState) shrinking(s *Sender, last uint64) {
	if r.shrinkEnd == 0 {
		r.shrinkEnd, r.shrinkBatch, r.shrinkCeiling = last, s.batch, s.ceiling
	}
}

// accepted records a body of n bytes answered 200.
func (s *Sender) accepted(n int) {
	s.refusal.proven = max(s.refusal.proven, n)
	s.setRefusing(nil)
}

// isolated handles one event the API refused alone (res: 400, 422 or 413).
// It is set aside when the API is known to take other events (and, for a
// 413, bodies at least as large), or when the events behind it, sent on
// their own, are taken. If they are refused as well, the API refuses
// everything: the event stays, the sender backs off and reports not ready.
func (s *Sender) isolated(ctx context.Context, seq uint64, event []byte, res result) (bool, time.Duration, bool) {
	need := 1
	if res.status == http.StatusRequestEntityTooLarge {
		if len(event) > s.opts.MaxEventBytes {
			return s.setAside(ctx, seq, event, res)
		}
		need = res.sent
	}
	if s.refusal.proven >= need {
		return s.setAside(ctx, seq, event, res)
	}
	return s.probe(ctx, seq, event, res, need)
}

// probe sends the events right behind the refused one at seq, at least need
// bytes of body (a single event for a 400 or 422), to tell a refusal of
// that event from a refusal of everything.
func (s *Sender) probe(ctx context.Context, seq uint64, event []byte, res result, need int) (bool, time.Duration, bool) {
	first, last, events, err := s.store.Peek(ctx, s.opts.BatchMax+1)
	if err != nil || first != seq || len(events) == 0 {
		if ctx.Err() != nil {
			return false, 0, false
		}
		if err != nil {
			s.log.Error().Err(err).Msg("reading the outbox failed")
		}
		return false, s.backoff(), false
	}
	rest := events[1:]
	k, size := 0, len(`{"events":[]}`)
	for k < len(rest) && (k == 0 || size < need) {
		size += len(rest[k]) + 1
		k++
	}
	if k == 0 || size < need {
		s.log.Warn().Int("status", res.status).Uint64("seq", seq).Int("event_bytes", len(event)).
			Msg("reporting API refused a single event; too few events behind it yet to tell whether it refuses this event or every event; kept, retrying")
		return false, s.backoff(), false
	}
	probe := rest[:k]
	probeLast := first + uint64(k)
	if probeLast > last {
		probeLast = last
	}
	pres, after, stop := s.send(ctx, probe)
	if stop {
		return false, after, false
	}
	switch {
	case pres.status == http.StatusOK:
		s.sentOK(pres, k)
		empty, wait, wake := s.setAside(ctx, seq, event, res)
		if wait > 0 {
			return empty, wait, wake // the delivered events are sent again later, as duplicates
		}
		if err := s.store.Delivered(ctx, seq+1, probeLast, pres.answer.Duplicates); err != nil {
			s.log.Error().Err(err).Uint64("first", seq+1).Uint64("last", probeLast).Msg("deleting a delivered batch failed")
			return false, s.backoff(), false
		}
		return false, 0, false
	case pres.status == http.StatusBadRequest || pres.status == http.StatusUnprocessableEntity || pres.status == http.StatusRequestEntityTooLarge:
		s.setReady(nil)
		err := fmt.Errorf("%w (HTTP %d, and HTTP %d for the events behind it)", ErrRefusedByAPI, res.status, pres.status)
		s.setRefusing(err)
		ev := s.log.Error().Int("status", res.status).Int("next_status", pres.status).Uint64("seq", seq).
			Str("answer", excerpt(res.refusal, s.token.Current()))
		if res.status == http.StatusRequestEntityTooLarge {
			ev.Int("body_bytes", res.sent).Msg("reporting API refuses bodies this large, not one event: its body limit is too small; events kept, retrying")
		} else {
			ev.Msg("reporting API refuses the events behind the refused one as well: it refuses everything, not one event; events kept, retrying")
		}
		return false, s.backoff(), false
	default:
		s.log.Warn().Int("status", pres.status).Int("events", k).Msg("delivery failed; events kept")
		return false, s.backoff(), false
	}
}

// setAside moves the refused event at seq to the store's dead-letter area
// with the API's status and an excerpt of its answer.
func (s *Sender) setAside(ctx context.Context, seq uint64, event []byte, res result) (bool, time.Duration, bool) {
	answer := excerpt(res.refusal, s.token.Current())
	detail := "HTTP " + strconv.Itoa(res.status)
	if answer != "" {
		detail += ": " + answer
	}
	id, typ := eventIdentity(event)
	if err := s.store.SetAside(ctx, seq, ReasonRefused, detail); err != nil {
		if ctx.Err() != nil {
			return false, 0, false
		}
		s.log.Error().Err(err).Int("status", res.status).Uint64("seq", seq).Str("event_id", id).
			Msg("moving a refused event to the dead-letter area failed; it stays at the head of the outbox, retrying")
		return false, s.backoff(), false
	}
	s.m.setAside.WithLabelValues(strconv.Itoa(res.status)).Inc()
	s.log.Error().Int("status", res.status).Uint64("seq", seq).Str("event_id", id).Str("event_type", typ).
		Int("event_bytes", len(event)).Str("answer", answer).
		Msg("reporting API refused an event on its own; moved to the local dead-letter area, delivering the rest")
	r := &s.refusal
	if r.shrinkEnd > 0 && seq <= r.shrinkEnd {
		s.batch, s.ceiling, s.streak = r.shrinkBatch, r.shrinkCeiling, 0
		s.m.batchLimit.Set(float64(s.batch))
		r.shrinkEnd = 0
	}
	r.splitLimit, r.splitEnd = 0, 0
	r.proven = 0
	s.failures = 0
	return false, 0, false
}

// eventIdentity reads event_id and event_type of a canonical event, for the
// log; empty when unreadable.
func eventIdentity(event []byte) (id, typ string) {
	var ev struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
	}
	if json.Unmarshal(event, &ev) != nil {
		return "", ""
	}
	return clip(ev.EventID, 128), clip(ev.EventType, 128)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// excerpt is what is kept of a refusal's answer: credential-named JSON
// members (internal/redact's policy) and the bearer token replaced by the
// redaction marker, control characters by spaces, cut to maxExcerpt bytes.
func excerpt(body []byte, token string) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	body = redact.JSON(nil, body)
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	s := strings.ToValidUTF8(string(body), "?")
	if len(token) >= 8 {
		s = strings.ReplaceAll(s, token, redact.Marker)
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxExcerpt {
		s = clip(s, maxExcerpt-3) + "..."
	}
	return s
}
