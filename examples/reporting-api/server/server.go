// Package server is the reference Reporting API: the receiving end of the
// collector's sender, used by the tests and by `make run`.
//
// It implements POST /api/v1/events as the collector expects it (bearer
// token, body limit, dedup per (event_id, timestamp), validation with
// reasons into a dead-letter view), read-only listings, and switches that
// inject failures. Data lives in Badger under Options.DataDir and survives
// restarts; without DataDir it is kept in memory.
//
// Routes (all but /healthz need the bearer token when one is set):
//
//	POST   /api/v1/events        {"events":[...]} -> {"accepted":N,"duplicates":N,"rejected":[{"event_id":..,"reason":..}]}
//	GET    /api/v1/events        ?after=SEQ&limit=N&event_type=&project_id=&resource_id=&event_id=
//	                             -> {"events":[...],"next":SEQ,"more":bool}
//	GET    /api/v1/dead-letters  ?after=SEQ&limit=N -> {"dead_letters":[{"seq","event_id","reason","event","received_at"}],"next","more"}
//	GET    /api/v1/events/counts ?from=T&to=T (RFC 3339) -> {"counts":[{"hour","project_id","resource_type","events"}]}:
//	                             the events stored, each once, per hour of their timestamp in [from, to)
//	GET    /api/v1/stats         -> {"accepted","duplicates","rejected","events","requests":{"200":N,...},"max_body_bytes"}
//	POST   /admin/fail           {"status":503,"count":2,"retry_after":"2","delay_ms":100}
//	DELETE /admin/fail           clear the injected failure
//	POST   /admin/limits         {"max_body_bytes":N}
//	POST   /admin/refuse         {"event_ids":[...],"status":400,"max_event_bytes":N}: refuse whole batches (see Refusal)
//	DELETE /admin/refuse         stop refusing
//	POST   /admin/drop           {"count":N}: answer the next N new events as accepted without storing them
//	                             (a silent loss, for testing reconciliation)
//	POST   /admin/reset          delete every event, dead letter and counter
//	GET    /healthz              200 "ok"
package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/rs/zerolog"
)

// DefaultMaxBodyBytes is the body limit when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 4 << 20

// Options configures New.
type Options struct {
	Token        string // bearer token; "" accepts every request
	DataDir      string // Badger directory; "" keeps everything in memory
	MaxBodyBytes int64  // POST body limit (413 past it); default 4 MiB
	Logger       zerolog.Logger
}

// Fault is an injected failure for POST /api/v1/events.
type Fault struct {
	Status     int    `json:"status"`      // answer with this status instead of storing; 0: store normally (after the delay)
	Count      int    `json:"count"`       // requests affected; 0: every request until cleared
	RetryAfter string `json:"retry_after"` // Retry-After header to send with Status, as given
	DelayMS    int    `json:"delay_ms"`    // wait before answering
}

// Refusal makes POST /api/v1/events refuse whole batches for what one of
// their events holds, the way a strict API answers malformed input: the
// batch is answered with an error and nothing of it is stored.
type Refusal struct {
	// EventIDs: a batch holding an event with one of these event_ids is
	// answered Status.
	EventIDs []string `json:"event_ids"`
	// Status for EventIDs: 400 (the default) or 422.
	Status int `json:"status"`
	// MaxEventBytes: a batch holding an event larger than this is answered
	// 413, however small the batch. 0: no limit per event.
	MaxEventBytes int64 `json:"max_event_bytes"`
}

// Stats are the server's counters.
type Stats struct {
	Accepted     int64            `json:"accepted"`   // distinct events stored
	Duplicates   int64            `json:"duplicates"` // events received again for a stored (event_id, timestamp)
	Rejected     int64            `json:"rejected"`   // events refused by validation (dead letters)
	Events       int64            `json:"events"`     // events held (= Accepted unless reset)
	Requests     map[string]int64 `json:"requests"`   // POST /api/v1/events answers by status code
	MaxBodyBytes int64            `json:"max_body_bytes"`
	// ClientCerts counts the POSTs to /api/v1/events by the subject of the
	// client certificate they came with ("" for none, or over plain http).
	ClientCerts map[string]int64 `json:"client_certs"`
}

// Server is an http.Handler.
type Server struct {
	db   *badger.DB
	opts Options
	log  zerolog.Logger
	mux  *http.ServeMux

	mu       sync.Mutex // serialises ingestion and admin changes
	fault    *Fault
	refusal  *Refusal
	maxBody  int64
	requests map[string]int64
	certs    map[string]int64 // POSTs by client certificate subject
	drop     int              // new events still to be lost silently (POST /admin/drop)
}

var (
	metaSeq      = []byte("mseq")
	metaDeadSeq  = []byte("mdseq")
	metaAccepted = []byte("maccepted")
	metaDups     = []byte("mdups")
	metaRejected = []byte("mrejected")
)

// New opens the store and returns the server.
func New(opts Options) (*Server, error) {
	bo := badger.DefaultOptions(opts.DataDir).WithLogger(nil)
	if opts.DataDir == "" {
		bo = bo.WithInMemory(true)
	}
	bo.MemTableSize = 8 << 20
	bo.NumMemtables = 2
	bo.BlockCacheSize = 8 << 20
	bo.IndexCacheSize = 4 << 20
	bo.NumCompactors = 2
	bo.SyncWrites = true
	bo.MetricsEnabled = false
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("reporting-api: open store %q: %w", opts.DataDir, err)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	s := &Server{db: db, opts: opts, log: opts.Logger, maxBody: opts.MaxBodyBytes, requests: map[string]int64{}, certs: map[string]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /api/v1/events", s.auth(s.postEvents))
	mux.HandleFunc("GET /api/v1/events", s.auth(s.listEvents))
	mux.HandleFunc("GET /api/v1/dead-letters", s.auth(s.listDeadLetters))
	mux.HandleFunc("GET /api/v1/events/counts", s.auth(s.counts))
	mux.HandleFunc("GET /api/v1/stats", s.auth(s.stats))
	mux.HandleFunc("POST /admin/drop", s.auth(s.setDrop))
	mux.HandleFunc("POST /admin/fail", s.auth(s.setFault))
	mux.HandleFunc("DELETE /admin/fail", s.auth(func(w http.ResponseWriter, _ *http.Request) {
		s.SetFault(nil)
		writeJSON(w, 200, map[string]bool{"ok": true})
	}))
	mux.HandleFunc("POST /admin/limits", s.auth(s.setLimits))
	mux.HandleFunc("POST /admin/refuse", s.auth(s.setRefusal))
	mux.HandleFunc("DELETE /admin/refuse", s.auth(func(w http.ResponseWriter, _ *http.Request) {
		_ = s.SetRefusal(nil) // clearing the refusal cannot fail: only a new one is checked
		writeJSON(w, 200, map[string]bool{"ok": true})
	}))
	mux.HandleFunc("POST /admin/reset", s.auth(s.reset))
	s.mux = mux
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close closes the store.
func (s *Server) Close() error { return s.db.Close() }

// SetFault injects f into POST /api/v1/events; nil clears it.
func (s *Server) SetFault(f *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// SetRefusal makes POST /api/v1/events refuse the batches r describes; nil
// stops it. It answers an error for a Status other than 0, 400 or 422.
func (s *Server) SetRefusal(r *Refusal) error {
	if r != nil {
		c := *r
		switch c.Status {
		case 0:
			c.Status = http.StatusBadRequest
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
		default:
			return fmt.Errorf("reporting-api: refusal status %d: want 400 or 422", c.Status)
		}
		c.EventIDs = append([]string(nil), c.EventIDs...)
		r = &c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusal = r
	return nil
}

// refused answers the status and body a batch gets under the refusal in
// force; 0 when it is not refused.
func (s *Server) refused(events []json.RawMessage) (int, map[string]any) {
	s.mu.Lock()
	r := s.refusal
	s.mu.Unlock()
	if r == nil {
		return 0, nil
	}
	for _, raw := range events {
		if r.MaxEventBytes > 0 && int64(len(raw)) > r.MaxEventBytes {
			id, _, _ := validate(raw)
			return http.StatusRequestEntityTooLarge, map[string]any{
				"error": "event too large", "event_id": id, "event_bytes": len(raw), "max_event_bytes": r.MaxEventBytes,
			}
		}
		if len(r.EventIDs) == 0 {
			continue
		}
		id, _, _ := validate(raw)
		for _, want := range r.EventIDs {
			if id == want {
				return r.Status, map[string]any{"error": "event " + id + " is malformed; batch refused", "event_id": id}
			}
		}
	}
	return 0, nil
}

// SetMaxBodyBytes changes the body limit at run time.
func (s *Server) SetMaxBodyBytes(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		n = DefaultMaxBodyBytes
	}
	s.maxBody = n
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) != 1 {
				if r.URL.Path == "/api/v1/events" && r.Method == http.MethodPost {
					s.count(http.StatusUnauthorized)
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="tally"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or invalid bearer token"})
				return
			}
		}
		h(w, r)
	}
}

func (s *Server) count(status int) {
	s.mu.Lock()
	s.requests[strconv.Itoa(status)]++
	s.mu.Unlock()
}

// takeFault returns the fault to apply to this request, consuming one use.
func (s *Server) takeFault() (Fault, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	max := s.maxBody
	if s.fault == nil {
		return Fault{}, max
	}
	f := *s.fault
	if s.fault.Count > 0 {
		s.fault.Count--
		if s.fault.Count == 0 {
			s.fault = nil
		}
	}
	return f, max
}

type rejection struct {
	EventID string `json:"event_id"`
	Reason  string `json:"reason"`
}

type ingestAnswer struct {
	Accepted   int         `json:"accepted"`
	Duplicates int         `json:"duplicates"`
	Rejected   []rejection `json:"rejected"`
}

func (s *Server) postEvents(w http.ResponseWriter, r *http.Request) {
	subject := ""
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		subject = r.TLS.PeerCertificates[0].Subject.String()
	}
	s.mu.Lock()
	s.certs[subject]++
	s.mu.Unlock()
	f, maxBody := s.takeFault()
	if f.DelayMS > 0 {
		select {
		case <-time.After(time.Duration(f.DelayMS) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	if f.Status != 0 {
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		s.count(f.Status)
		writeJSON(w, f.Status, map[string]string{"error": "injected failure"})
		return
	}
	if r.ContentLength > maxBody {
		s.count(http.StatusRequestEntityTooLarge)
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": "body too large", "max_body_bytes": maxBody})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.count(http.StatusRequestEntityTooLarge)
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": "body too large", "max_body_bytes": maxBody})
			return
		}
		s.count(http.StatusBadRequest)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading body: " + err.Error()})
		return
	}
	var req struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Events == nil {
		s.count(http.StatusBadRequest)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be {"events":[...]}`})
		return
	}
	if status, why := s.refused(req.Events); status != 0 {
		s.count(status)
		writeJSON(w, status, why)
		return
	}
	ans, err := s.ingest(req.Events)
	if err != nil {
		s.log.Error().Err(err).Msg("storing events failed")
		s.count(http.StatusInternalServerError)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "store failure"})
		return
	}
	s.count(http.StatusOK)
	writeJSON(w, http.StatusOK, ans)
}

type required struct {
	EventID      *string         `json:"event_id"`
	Timestamp    *string         `json:"timestamp"`
	EventType    *string         `json:"event_type"`
	Service      *string         `json:"service"`
	ResourceType *string         `json:"resource_type"`
	ResourceID   *string         `json:"resource_id"`
	ProjectID    *string         `json:"project_id"`
	Action       *string         `json:"action"`
	Attributes   json.RawMessage `json:"attributes"`
	Source       json.RawMessage `json:"source"`
}

// validate returns the event_id (when readable), the dedup key and a
// reason when the event is refused.
func validate(raw json.RawMessage) (id string, key []byte, reason string) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return "", nil, "event is not a JSON object"
	}
	var ev required
	if err := json.Unmarshal(t, &ev); err != nil {
		return "", nil, "event fields have the wrong types: " + err.Error()
	}
	if ev.EventID != nil {
		id = *ev.EventID
	}
	fields := []struct {
		name string
		v    *string
	}{
		{"event_id", ev.EventID}, {"timestamp", ev.Timestamp}, {"event_type", ev.EventType}, {"service", ev.Service},
		{"resource_type", ev.ResourceType}, {"resource_id", ev.ResourceID}, {"project_id", ev.ProjectID}, {"action", ev.Action},
	}
	var missing []string
	for _, f := range fields {
		if f.v == nil || strings.TrimSpace(*f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return id, nil, "missing or empty " + strings.Join(missing, ", ")
	}
	ts, err := time.Parse(time.RFC3339Nano, *ev.Timestamp)
	if err != nil {
		return id, nil, "timestamp is not RFC 3339: " + *ev.Timestamp
	}
	if len(ev.Attributes) > 0 && !isObject(ev.Attributes) {
		return id, nil, "attributes is not an object"
	}
	if len(ev.Source) > 0 && !isObject(ev.Source) {
		return id, nil, "source is not an object"
	}
	key = append([]byte{'k'}, id...)
	key = append(key, 0)
	key = append(key, ts.UTC().Format(time.RFC3339Nano)...)
	return id, key, ""
}

func isObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

type deadLetter struct {
	Seq        uint64          `json:"seq"`
	EventID    string          `json:"event_id"`
	Reason     string          `json:"reason"`
	Event      json.RawMessage `json:"event"`
	ReceivedAt time.Time       `json:"received_at"`
}

func (s *Server) ingest(events []json.RawMessage) (ingestAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ans := ingestAnswer{Rejected: []rejection{}}
	now := time.Now().UTC()
	err := s.db.Update(func(txn *badger.Txn) error {
		seq, err := getU64(txn, metaSeq)
		if err != nil {
			return err
		}
		dseq, err := getU64(txn, metaDeadSeq)
		if err != nil {
			return err
		}
		for _, raw := range events {
			id, key, reason := validate(raw)
			if reason != "" {
				dseq++
				ev := raw
				if !json.Valid(ev) {
					ev, _ = json.Marshal(string(raw))
				}
				dl, _ := json.Marshal(deadLetter{Seq: dseq, EventID: id, Reason: reason, Event: ev, ReceivedAt: now})
				if err := txn.Set(seqKey('r', dseq), dl); err != nil {
					return err
				}
				ans.Rejected = append(ans.Rejected, rejection{EventID: id, Reason: reason})
				continue
			}
			if _, err := txn.Get(key); err == nil {
				ans.Duplicates++
				continue
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			if s.drop > 0 {
				s.drop--
				ans.Accepted++
				continue
			}
			seq++
			var compact bytes.Buffer
			if err := json.Compact(&compact, raw); err != nil {
				return err
			}
			if err := txn.Set(seqKey('o', seq), compact.Bytes()); err != nil {
				return err
			}
			if err := txn.Set(key, u64(seq)); err != nil {
				return err
			}
			ans.Accepted++
		}
		for _, kv := range []struct {
			k []byte
			d int
		}{{metaAccepted, ans.Accepted}, {metaDups, ans.Duplicates}, {metaRejected, len(ans.Rejected)}} {
			if err := addU64(txn, kv.k, uint64(kv.d)); err != nil {
				return err
			}
		}
		if err := txn.Set(metaSeq, u64(seq)); err != nil {
			return err
		}
		return txn.Set(metaDeadSeq, u64(dseq))
	})
	return ans, err
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := paging(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	filters := map[string]string{}
	for _, f := range []string{"event_type", "project_id", "resource_id", "event_id", "service", "resource_type"} {
		if v := q.Get(f); v != "" {
			filters[f] = v
		}
	}
	keep := func(v []byte) bool {
		if len(filters) == 0 {
			return true
		}
		var m map[string]any
		if json.Unmarshal(v, &m) != nil {
			return false
		}
		for k, want := range filters {
			if got, _ := m[k].(string); got != want {
				return false
			}
		}
		return true
	}
	s.writePage(w, "events", 'o', after, limit, keep)
}

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := paging(w, r)
	if !ok {
		return
	}
	s.writePage(w, "dead_letters", 'r', after, limit, func([]byte) bool { return true })
}

// writePage answers one page of the records under prefix after sequence
// number after: at most limit of those keep accepts, as {member: [...], "next":
// the last sequence looked at, "more": whether the page was cut}.
func (s *Server) writePage(w http.ResponseWriter, member string, prefix byte, after uint64, limit int, keep func([]byte) bool) {
	out := []json.RawMessage{}
	next, more := after, false
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 100, Prefix: []byte{prefix}})
		defer it.Close()
		for it.Seek(seqKey(prefix, after+1)); it.Valid(); it.Next() {
			if len(out) == limit {
				more = true
				break
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			next = binary.BigEndian.Uint64(it.Item().Key()[1:])
			if keep(v) {
				out = append(out, v)
			}
		}
		return nil
	})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{member: out, "next": next, "more": more})
}

// Stats returns the counters.
func (s *Server) Stats() (Stats, error) {
	st := Stats{Requests: map[string]int64{}, ClientCerts: map[string]int64{}}
	err := s.db.View(func(txn *badger.Txn) error {
		for _, kv := range []struct {
			k []byte
			p *int64
		}{{metaAccepted, &st.Accepted}, {metaDups, &st.Duplicates}, {metaRejected, &st.Rejected}} {
			v, err := getU64(txn, kv.k)
			if err != nil {
				return err
			}
			*kv.p = int64(v)
		}
		st.Events = st.Accepted // events are only ever removed all at once, by Reset
		return nil
	})
	s.mu.Lock()
	for k, v := range s.requests {
		st.Requests[k] = v
	}
	for k, v := range s.certs {
		st.ClientCerts[k] = v
	}
	st.MaxBodyBytes = s.maxBody
	s.mu.Unlock()
	return st, err
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	st, err := s.Stats()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) setFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if f.Status != 0 && (f.Status < 100 || f.Status > 599) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "status must be 100-599"})
		return
	}
	s.SetFault(&f)
	s.log.Info().Int("status", f.Status).Int("count", f.Count).Int("delay_ms", f.DelayMS).Msg("failure injected")
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) setLimits(w http.ResponseWriter, r *http.Request) {
	var l struct {
		MaxBodyBytes int64 `json:"max_body_bytes"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&l); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.SetMaxBodyBytes(l.MaxBodyBytes)
	s.mu.Lock()
	n := s.maxBody
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]int64{"max_body_bytes": n})
}

func (s *Server) setRefusal(w http.ResponseWriter, r *http.Request) {
	var rf Refusal
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&rf); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err := s.SetRefusal(&rf); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.log.Info().Int("event_ids", len(rf.EventIDs)).Int("status", rf.Status).Int64("max_event_bytes", rf.MaxEventBytes).Msg("refusal set")
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// Reset deletes every event, dead letter and counter.
func (s *Server) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = map[string]int64{}
	s.fault = nil
	s.refusal = nil
	return s.db.DropAll()
}

func (s *Server) reset(w http.ResponseWriter, _ *http.Request) {
	if err := s.Reset(); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func paging(w http.ResponseWriter, r *http.Request) (after uint64, limit int, ok bool) {
	q := r.URL.Query()
	limit = 100
	var err error
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "after must be a sequence number"})
			return 0, 0, false
		}
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "limit must be a positive integer"})
			return 0, 0, false
		}
	}
	return after, min(limit, 10000), true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func seqKey(p byte, seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = p
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func getU64(txn *badger.Txn, k []byte) (uint64, error) {
	it, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var v uint64
	err = it.Value(func(b []byte) error {
		if len(b) == 8 {
			v = binary.BigEndian.Uint64(b)
		}
		return nil
	})
	return v, err
}

func addU64(txn *badger.Txn, k []byte, d uint64) error {
	if d == 0 {
		return nil
	}
	v, err := getU64(txn, k)
	if err != nil {
		return err
	}
	return txn.Set(k, u64(v+d))
}

// TLS are the files of an https listener (PEM).
type TLS struct {
	CertFile, KeyFile string // the server's certificate and key; empty: plain http
	// ClientCAFile, when set, makes every client present a certificate
	// signed by one of its CAs (the handshake fails otherwise); Stats
	// counts requests by the certificate's subject.
	ClientCAFile string
}

// Serve serves the handler on ln until ctx is done (https when
// t.CertFile is set), then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener, t TLS) error {
	// Failed handshakes and the like go to the server's log.
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ErrorLog: stdlog.New(s.log, "", 0)}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return fmt.Errorf("reporting-api: client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("reporting-api: client CA file %s holds no PEM certificate", t.ClientCAFile)
		}
		hs.TLSConfig = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	}
	errc := make(chan error, 1)
	go func() {
		if t.CertFile != "" {
			errc <- hs.ServeTLS(ln, t.CertFile, t.KeyFile)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	}
}

// SetDrop makes the next n new events be answered as accepted and not
// stored: a silent loss, which only a reconciliation finds.
func (s *Server) SetDrop(n int) {
	s.mu.Lock()
	s.drop = n
	s.mu.Unlock()
}

func (s *Server) setDrop(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count int `json:"count"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Count < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be {"count":N}`})
		return
	}
	s.SetDrop(req.Count)
	writeJSON(w, http.StatusOK, map[string]int{"count": req.Count})
}

// Count is one row of GET /api/v1/events/counts.
type Count struct {
	Hour         time.Time `json:"hour"`
	ProjectID    string    `json:"project_id"`
	ResourceType string    `json:"resource_type"`
	Events       int64     `json:"events"`
}

// Counts are the events stored, each once, per hour of their timestamp,
// project and resource type, for the hours in [from, to).
func (s *Server) Counts(from, to time.Time) ([]Count, error) {
	type key struct {
		hour           time.Time
		project, rtype string
	}
	n := map[key]int64{}
	var order []key
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 100, Prefix: []byte{'o'}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var ev struct {
				Timestamp    string `json:"timestamp"`
				ProjectID    string `json:"project_id"`
				ResourceType string `json:"resource_type"`
			}
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &ev) }); err != nil {
				return err
			}
			ts, err := time.Parse(time.RFC3339Nano, ev.Timestamp)
			if err != nil {
				continue // validated on the way in
			}
			h := ts.UTC().Truncate(time.Hour)
			if h.Before(from.Truncate(time.Hour)) || !h.Before(to) {
				continue
			}
			k := key{h, ev.ProjectID, ev.ResourceType}
			if _, ok := n[k]; !ok {
				order = append(order, k)
			}
			n[k]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Count, 0, len(order))
	for _, k := range order {
		out = append(out, Count{Hour: k.hour, ProjectID: k.project, ResourceType: k.rtype, Events: n[k]})
	}
	return out, nil
}

func (s *Server) counts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err1 := time.Parse(time.RFC3339Nano, q.Get("from"))
	to, err2 := time.Parse(time.RFC3339Nano, q.Get("to"))
	if err1 != nil || err2 != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "from and to are required, RFC 3339"})
		return
	}
	counts, err := s.Counts(from, to)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "store failure"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"counts": counts})
}
