package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
)

const tok = "tok"

func start(t *testing.T, dir string) (*server.Server, *httptest.Server) {
	t.Helper()
	s, err := server.New(server.Options{Token: tok, DataDir: dir, MaxBodyBytes: 4096, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	return s, ts
}

func do(t *testing.T, method, url, token, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return resp.StatusCode, resp.Header, m
}

func ev(id, ts string) string {
	return fmt.Sprintf(`{"event_id":%q,"timestamp":%q,"event_type":"volume.create.end","service":"cinder","resource_type":"volume",`+
		`"resource_id":"v1","project_id":"p1","action":"create","attributes":{"size_gb":1},"source":{"exchange":"openstack"}}`, id, ts)
}

func TestIngestDedupValidationAndPersistence(t *testing.T) {
	dir := t.TempDir()
	s, ts := start(t, dir)
	post := func(events ...string) (int, map[string]any) {
		code, _, m := do(t, "POST", ts.URL+"/api/v1/events", tok, `{"events":[`+strings.Join(events, ",")+`]}`)
		return code, m
	}
	code, m := post(ev("a", "2024-05-01T12:00:00Z"), ev("b", "2024-05-01T12:00:00.5Z"), ev("a", "2024-05-01T12:00:00Z"),
		ev("a", "2024-05-01T13:00:00Z"), `{"event_id":"c","timestamp":"yesterday"}`, `[1]`)
	if code != 200 || m["accepted"] != 3.0 || m["duplicates"] != 1.0 {
		t.Fatalf("%d %v", code, m)
	}
	rej := m["rejected"].([]any)
	if len(rej) != 2 || rej[0].(map[string]any)["event_id"] != "c" || !strings.Contains(rej[0].(map[string]any)["reason"].(string), "missing") {
		t.Fatalf("rejected %v", rej)
	}
	// The same event with the timestamp written differently is the same event.
	if code, m = post(ev("b", "2024-05-01T12:00:00.500Z")); m["duplicates"] != 1.0 {
		t.Fatalf("%d %v", code, m)
	}
	ts.Close()
	s.Close()

	s, ts = start(t, dir)
	defer func() { ts.Close(); s.Close() }()
	code, _, m = do(t, "GET", ts.URL+"/api/v1/stats", tok, "")
	if code != 200 || m["accepted"] != 3.0 || m["duplicates"] != 2.0 || m["rejected"] != 2.0 {
		t.Fatalf("stats after restart %d %v", code, m)
	}
	if _, m = post(ev("a", "2024-05-01T12:00:00Z")); m["duplicates"] != 1.0 {
		t.Fatalf("dedup lost across restart: %v", m)
	}
	_, _, m = do(t, "GET", ts.URL+"/api/v1/events?limit=2", tok, "")
	if len(m["events"].([]any)) != 2 || m["more"] != true {
		t.Fatalf("page 1 %v", m)
	}
	_, _, m = do(t, "GET", fmt.Sprintf("%s/api/v1/events?after=%v", ts.URL, m["next"]), tok, "")
	if evs := m["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["event_id"] != "a" || m["more"] != false {
		t.Fatalf("page 2 %v", m)
	}
	_, _, m = do(t, "GET", ts.URL+"/api/v1/events?event_id=b", tok, "")
	if len(m["events"].([]any)) != 1 {
		t.Fatalf("filter %v", m)
	}
	_, _, m = do(t, "GET", ts.URL+"/api/v1/dead-letters", tok, "")
	dls := m["dead_letters"].([]any)
	if len(dls) != 2 || dls[1].(map[string]any)["reason"] != "event is not a JSON object" {
		t.Fatalf("dead letters %v", m)
	}
}

func TestAuthBodyLimitAndFaults(t *testing.T) {
	s, ts := start(t, "")
	defer func() { ts.Close(); s.Close() }()
	body := `{"events":[` + ev("a", "2024-05-01T12:00:00Z") + `]}`
	if code, h, _ := do(t, "POST", ts.URL+"/api/v1/events", "", body); code != 401 || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d", code)
	}
	if code, _, _ := do(t, "POST", ts.URL+"/api/v1/events", "nope", body); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _, _ := do(t, "GET", ts.URL+"/api/v1/events", "", ""); code != 401 {
		t.Fatalf("listing without token: %d", code)
	}
	if code, _, _ := do(t, "GET", ts.URL+"/healthz", "", ""); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	big := `{"events":[` + strings.Repeat(ev("x", "2024-05-01T12:00:00Z")+",", 30) + ev("y", "2024-05-01T12:00:00Z") + `]}`
	if code, _, _ := do(t, "POST", ts.URL+"/api/v1/events", tok, big); code != 413 {
		t.Fatalf("over the body limit: %d", code)
	}
	// Chunked body without Content-Length is limited too.
	req, _ := http.NewRequest("POST", ts.URL+"/api/v1/events", io.MultiReader(bytes.NewReader([]byte(big))))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("chunked over the limit: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked over the limit: %d", resp.StatusCode)
	}
	if code, _, m := do(t, "POST", ts.URL+"/admin/limits", tok, `{"max_body_bytes":1000000}`); code != 200 || m["max_body_bytes"] != 1e6 {
		t.Fatalf("limits: %d %v", code, m)
	}
	if code, _, m := do(t, "POST", ts.URL+"/api/v1/events", tok, big); code != 200 || m["accepted"] != 2.0 {
		t.Fatalf("after raising the limit: %d %v", code, m)
	}
	if code, _, _ := do(t, "POST", ts.URL+"/admin/fail", tok, `{"status":503,"count":2,"retry_after":"3"}`); code != 200 {
		t.Fatalf("inject: %d", code)
	}
	for i := range 2 {
		if code, h, _ := do(t, "POST", ts.URL+"/api/v1/events", tok, body); code != 503 || h.Get("Retry-After") != "3" {
			t.Fatalf("injected failure %d: %d %q", i, code, h.Get("Retry-After"))
		}
	}
	if code, _, _ := do(t, "POST", ts.URL+"/api/v1/events", tok, body); code != 200 {
		t.Fatalf("after the injected failures: %d", code)
	}
	do(t, "POST", ts.URL+"/admin/fail", tok, `{"status":500}`)
	for range 3 {
		if code, _, _ := do(t, "POST", ts.URL+"/api/v1/events", tok, body); code != 500 {
			t.Fatalf("unlimited failure: %d", code)
		}
	}
	do(t, "DELETE", ts.URL+"/admin/fail", tok, "")
	if code, _, m := do(t, "GET", ts.URL+"/api/v1/stats", tok, ""); code != 200 || m["requests"].(map[string]any)["503"] != 2.0 || m["requests"].(map[string]any)["413"] != 2.0 {
		t.Fatalf("stats %v", m)
	}
	if code, _, _ := do(t, "POST", ts.URL+"/api/v1/events", tok, `{"nope":1}`); code != 400 {
		t.Fatalf("malformed body: %d", code)
	}
	if code, _, _ := do(t, "POST", ts.URL+"/admin/reset", tok, ""); code != 200 {
		t.Fatalf("reset: %d", code)
	}
	if _, _, m := do(t, "GET", ts.URL+"/api/v1/stats", tok, ""); m["accepted"] != 0.0 {
		t.Fatalf("after reset %v", m)
	}
}

// A refusal answers whole batches: 400 or 422 for a listed event_id, 413 for
// an event over the per-event limit; nothing of a refused batch is stored.
func TestRefusalOfWholeBatches(t *testing.T) {
	s, ts := start(t, t.TempDir())
	defer func() { ts.Close(); s.Close() }()
	post := func(events ...string) (int, map[string]any) {
		code, _, m := do(t, "POST", ts.URL+"/api/v1/events", tok, `{"events":[`+strings.Join(events, ",")+`]}`)
		return code, m
	}
	if code, _, _ := do(t, "POST", ts.URL+"/admin/refuse", tok, `{"event_ids":["bad"],"status":418}`); code != 400 {
		t.Fatalf("refusal with status 418: %d", code)
	}
	if code, _, m := do(t, "POST", ts.URL+"/admin/refuse", tok, `{"event_ids":["bad"],"status":422,"max_event_bytes":400}`); code != 200 {
		t.Fatalf("set refusal: %d %v", code, m)
	}
	if code, m := post(ev("ok1", "2024-05-01T12:00:00Z"), ev("bad", "2024-05-01T12:00:00Z")); code != 422 || m["event_id"] != "bad" {
		t.Fatalf("batch with a refused id: %d %v", code, m)
	}
	big := strings.Replace(ev("big", "2024-05-01T12:00:00Z"), `"size_gb":1`, `"size_gb":1,"pad":"`+strings.Repeat("x", 200)+`"`, 1)
	if code, m := post(big); code != 413 || m["event_id"] != "big" {
		t.Fatalf("event over the per-event limit: %d %v", code, m)
	}
	if code, m := post(ev("ok1", "2024-05-01T12:00:00Z"), ev("ok2", "2024-05-01T12:00:00Z")); code != 200 || m["accepted"] != 2.0 {
		t.Fatalf("clean batch: %d %v", code, m)
	}
	if code, _, _ := do(t, "DELETE", ts.URL+"/admin/refuse", tok, ""); code != 200 {
		t.Fatal("clear refusal")
	}
	if code, m := post(ev("bad", "2024-05-01T12:00:00Z"), big); code != 200 || m["accepted"] != 2.0 {
		t.Fatalf("after clearing: %d %v", code, m)
	}
	st, _ := s.Stats()
	if st.Requests["422"] != 1 || st.Requests["413"] != 1 || st.Accepted != 4 {
		t.Fatalf("stats %+v", st)
	}
}
