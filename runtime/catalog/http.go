package catalog

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Outbox and Pipeline serve the dead-letter routes; nil Outbox: they
	// answer 404. Replay needs both.
	Outbox   *outbox.Outbox
	Pipeline *pipeline.Pipeline
	// ReplayMessage is ReplayOptions.Message for the replay route.
	ReplayMessage func(outbox.StoredDeadLetter) pipeline.Message
	Logger        zerolog.Logger
}

// maxListLimit bounds one page of GET /deadletters.
const maxListLimit = 1000

// LedgerPageHours is how many hours with rows one answer of GET /ledger
// holds at most; the answer names the first hour of the next page (Next).
// An hour holds at most 2 × (ledger.MaxRowsPerHour + 1) rows and two more,
// so a page is bounded whatever publishers sent.
const LedgerPageHours = 24

type handler struct {
	c        *Catalog
	opts     HandlerOptions
	replayMu sync.Mutex
}

// NewHandler returns the HTTP face of the catalogue and the dead-letter area,
// for cmd to mount on its server:
//
//	GET  /mappers                  Status
//	POST /mappers/{name}/promote   Promote
//	POST /mappers/{name}/abort     Abort
//	GET  /deadletters?after=N&limit=N   ListDeadLetters ({"dead_letters":[...]})
//	GET  /deadletters/{seq}        ShowDeadLetter
//	POST /deadletters/replay       Replay; optional body {"seqs":[...]}
//	POST /deadletters/purge        PurgeDeadLetters; body {"from":N,"to":N,"mapper":"..","older_than":"72h"} or {"all":true}
//	GET  /ledger?from=T&to=T       the completeness ledger of the hours in [from, to) (RFC 3339, each optional),
//	                               every row (ledger.Report, ungrouped) of the first LedgerPageHours hours
//	                               with rows; "next" names the first hour of the next page
//
// The handler authenticates no one: every route, the reading ones included
// (dead letters hold whole notifications), must be mounted behind the
// server's authentication. Client sends its Token as a bearer token, and maps
// 401 and 403 to ErrUnauthorized. Errors are JSON: {"error":"..."}. To mount
// it beside other routes:
//
//	h := catalog.NewHandler(cat, catalog.HandlerOptions{Outbox: ob, Pipeline: p})
//	mux.Handle("/", requireToken(h))
func NewHandler(c *Catalog, opts HandlerOptions) http.Handler {
	h := &handler{c: c, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mappers", h.status)
	mux.HandleFunc("POST /mappers/{name}/promote", h.promote)
	mux.HandleFunc("POST /mappers/{name}/abort", h.abort)
	mux.HandleFunc("GET /deadletters", h.listDead)
	mux.HandleFunc("GET /deadletters/{seq}", h.showDead)
	mux.HandleFunc("POST /deadletters/replay", h.replay)
	mux.HandleFunc("POST /deadletters/purge", h.purge)
	mux.HandleFunc("GET /ledger", h.ledger)
	return mux
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.c.Status())
}

func (h *handler) promote(w http.ResponseWriter, r *http.Request) {
	out, err := h.c.Promote(r.Context(), r.PathValue("name"))
	h.migrationReply(w, out, err)
}

func (h *handler) abort(w http.ResponseWriter, r *http.Request) {
	out, err := h.c.Abort(r.Context(), r.PathValue("name"))
	h.migrationReply(w, out, err)
}

func (h *handler) migrationReply(w http.ResponseWriter, out MigrationOutcome, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, out)
	case errors.Is(err, ErrUnknownModule):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrNoMigration):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}

func (h *handler) listDead(w http.ResponseWriter, r *http.Request) {
	if h.opts.Outbox == nil {
		writeError(w, http.StatusNotFound, ErrNoDeadLetters.Error())
		return
	}
	q := r.URL.Query()
	after, err1 := parseUint(q.Get("after"), 0)
	limit, err2 := parseUint(q.Get("limit"), 100)
	if err := errors.Join(err1, err2); err != nil || limit == 0 {
		writeError(w, http.StatusBadRequest, "after and limit must be positive integers")
		return
	}
	ds, err := ListDeadLetters(r.Context(), h.opts.Outbox, after, int(min(limit, maxListLimit)))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, deadLetterPage{DeadLetters: ds})
}

type deadLetterPage struct {
	DeadLetters []DeadLetterInfo `json:"dead_letters"`
}

func (h *handler) showDead(w http.ResponseWriter, r *http.Request) {
	if h.opts.Outbox == nil {
		writeError(w, http.StatusNotFound, ErrNoDeadLetters.Error())
		return
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "the dead letter is named by its sequence number")
		return
	}
	d, err := ShowDeadLetter(r.Context(), h.opts.Outbox, seq)
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeJSON(w, http.StatusOK, d)
	}
}

func (h *handler) replay(w http.ResponseWriter, r *http.Request) {
	if h.opts.Outbox == nil || h.opts.Pipeline == nil {
		writeError(w, http.StatusNotFound, ErrNoDeadLetters.Error())
		return
	}
	var opts ReplayOptions
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &opts); err != nil {
			writeError(w, http.StatusBadRequest, "request body: want {\"seqs\":[...]}: "+err.Error())
			return
		}
	}
	if !h.replayMu.TryLock() {
		writeError(w, http.StatusConflict, ErrReplayBusy.Error())
		return
	}
	defer h.replayMu.Unlock()
	opts.Message = h.opts.ReplayMessage
	rep, err := Replay(r.Context(), h.opts.Outbox, h.opts.Pipeline, opts)
	h.opts.Logger.Info().Int("examined", rep.Examined).Int("replayed", rep.Replayed).Int("events", rep.Events).
		Int("remaining", rep.Remaining).Err(err).Msg("dead letters replayed")
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, replayError{ReplayReport: rep, Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (h *handler) purge(w http.ResponseWriter, r *http.Request) {
	if h.opts.Outbox == nil {
		writeError(w, http.StatusNotFound, ErrNoDeadLetters.Error())
		return
	}
	var opts PurgeOptions
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&opts); err != nil {
		writeError(w, http.StatusBadRequest, `request body: want {"from":N,"to":N,"mapper":"..","older_than":"72h"} or {"all":true}: `+err.Error())
		return
	}
	rep, err := PurgeDeadLetters(r.Context(), h.opts.Outbox, opts)
	h.opts.Logger.Info().Uint64("from", opts.From).Uint64("to", opts.To).Str("mapper", opts.Mapper).Str("older_than", opts.OlderThan).
		Bool("all", opts.All).Int("examined", rep.Examined).Int("purged", rep.Purged).Err(err).Msg("dead letters purged")
	switch {
	case errors.Is(err, ErrInvalidPurge):
		writeError(w, http.StatusBadRequest, err.Error())
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, purgeError{PurgeReport: rep, Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, rep)
	}
}

type purgeError struct {
	PurgeReport
	Error string `json:"error"`
}

type replayError struct {
	ReplayReport
	Error string `json:"error"`
}

func parseUint(s string, def uint64) (uint64, error) {
	if s == "" {
		return def, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

func (h *handler) ledger(w http.ResponseWriter, r *http.Request) {
	if h.opts.Outbox == nil {
		writeError(w, http.StatusNotFound, ErrNoLedger.Error())
		return
	}
	var from, to time.Time
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		if v := r.URL.Query().Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, p.name+" must be an RFC 3339 time")
				return
			}
			*p.t = t
		}
	}
	// One page: the first LedgerPageHours hours with rows from from on.
	hours, err := h.opts.Outbox.LedgerHours(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	pageTo, n := to, 0
	var next time.Time
	for _, hour := range hours {
		if (!from.IsZero() && hour < ledger.HourOf(from)) || (!to.IsZero() && hour >= to.Unix()) {
			continue
		}
		if n == LedgerPageHours {
			next = time.Unix(hour, 0).UTC()
			pageTo = next
			break
		}
		n++
	}
	d, err := h.opts.Outbox.Ledger(r.Context(), from, pageTo)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	rep, err := ledger.NewReport(d, from, pageTo, "")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rep.Next = next
	writeJSON(w, http.StatusOK, rep)
}
