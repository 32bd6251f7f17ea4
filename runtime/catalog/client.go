package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// Client calls the HTTP routes of NewHandler on a running daemon: what the
// `mappers` and `deadletter` commands use when the daemon holds the outbox.
//
//	cl := &catalog.Client{BaseURL: "http://127.0.0.1:9469", Token: token}
//	st, err := cl.Status(ctx)
type Client struct {
	BaseURL    string       // scheme://host:port, without the route
	Token      string       // bearer token of the control routes; may be empty
	HTTPClient *http.Client // nil: http.DefaultClient
}

// Status is GET /mappers.
func (cl *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := cl.do(ctx, http.MethodGet, "/mappers", nil, &st)
	return st, err
}

// Promote is POST /mappers/{name}/promote.
func (cl *Client) Promote(ctx context.Context, name string) (MigrationOutcome, error) {
	var out MigrationOutcome
	err := cl.do(ctx, http.MethodPost, "/mappers/"+url.PathEscape(name)+"/promote", nil, &out)
	return out, err
}

// Abort is POST /mappers/{name}/abort.
func (cl *Client) Abort(ctx context.Context, name string) (MigrationOutcome, error) {
	var out MigrationOutcome
	err := cl.do(ctx, http.MethodPost, "/mappers/"+url.PathEscape(name)+"/abort", nil, &out)
	return out, err
}

// ListDeadLetters is GET /deadletters.
func (cl *Client) ListDeadLetters(ctx context.Context, after uint64, limit int) ([]DeadLetterInfo, error) {
	var page deadLetterPage
	q := url.Values{}
	q.Set("after", strconv.FormatUint(after, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	err := cl.do(ctx, http.MethodGet, "/deadletters?"+q.Encode(), nil, &page)
	return page.DeadLetters, err
}

// Ledger is GET /ledger: the completeness ledger of the hours in [from, to)
// (zero: no bound), every row, read page after page (each answer is
// decoded as it arrives, without a bound on its size).
func (cl *Client) Ledger(ctx context.Context, from, to time.Time) (*ledger.Report, error) {
	rep := &ledger.Report{From: from, To: to, Intake: []ledger.IntakeRow{}, Stored: []ledger.StoredRow{}, Problems: []ledger.Problem{}}
	for {
		q := url.Values{}
		if !from.IsZero() {
			q.Set("from", from.UTC().Format(time.RFC3339))
		}
		if !to.IsZero() {
			q.Set("to", to.UTC().Format(time.RFC3339))
		}
		var page ledger.Report
		if err := cl.send(ctx, http.MethodGet, "/ledger?"+q.Encode(), nil, &page, true); err != nil {
			return rep, err
		}
		rep.Append(&page)
		if page.Next.IsZero() {
			return rep, nil
		}
		if !from.IsZero() && !page.Next.After(from) {
			return rep, fmt.Errorf("catalog client: GET /ledger: the next page (%s) does not follow %s", page.Next.Format(time.RFC3339), from.Format(time.RFC3339))
		}
		from = page.Next
	}
}

// ShowDeadLetter is GET /deadletters/{seq}.
func (cl *Client) ShowDeadLetter(ctx context.Context, seq uint64) (DeadLetterDetail, error) {
	var d DeadLetterDetail
	err := cl.do(ctx, http.MethodGet, "/deadletters/"+strconv.FormatUint(seq, 10), nil, &d)
	return d, err
}

// Replay is POST /deadletters/replay. On a failure the daemon reported after
// replaying part of the letters, the report of that part is returned with
// the error.
func (cl *Client) Replay(ctx context.Context, opts ReplayOptions) (ReplayReport, error) {
	var rep replayError
	err := cl.post(ctx, "/deadletters/replay", opts, &rep)
	return rep.ReplayReport, err
}

// Purge is POST /deadletters/purge. On a failure after part of the letters
// were removed, the report of that part is returned with the error.
func (cl *Client) Purge(ctx context.Context, opts PurgeOptions) (PurgeReport, error) {
	var rep purgeError
	err := cl.post(ctx, "/deadletters/purge", opts, &rep)
	return rep.PurgeReport, err
}

// post sends opts as the JSON body of a POST to path and decodes the answer
// into out as do does.
func (cl *Client) post(ctx context.Context, path string, opts, out any) error {
	body, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("catalog client: POST %s: encode the request: %w", path, err)
	}
	return cl.do(ctx, http.MethodPost, path, body, out)
}

// do sends one request and decodes the JSON answer into out; the answer of a
// failed request is decoded too (a partial replay report), then the error
// built from it returned.
func (cl *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	return cl.send(ctx, method, path, body, out, false)
}

// send is do; with stream, a successful answer is decoded as it is read,
// whatever its size, instead of read whole within 64 MiB first.
func (cl *Client) send(ctx context.Context, method, path string, body []byte, out any, stream bool) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(cl.BaseURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("catalog client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.Token)
	}
	hc := cl.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("catalog client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if stream && resp.StatusCode/100 == 2 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("catalog client: %s %s: decode answer: %w", method, path, err)
		}
		return nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("catalog client: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("catalog client: %s %s: decode answer: %w", method, path, err)
		}
		return nil
	}
	_ = json.Unmarshal(raw, out)
	var eb errorBody
	_ = json.Unmarshal(raw, &eb)
	if eb.Error == "" {
		eb.Error = strings.TrimSpace(string(raw))
	}
	var sentinel error
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		sentinel = ErrUnauthorized
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/mappers/"):
		sentinel = ErrUnknownModule
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/deadletters/"):
		sentinel = outbox.ErrNotFound
	case resp.StatusCode == http.StatusConflict && strings.HasPrefix(path, "/mappers/"):
		sentinel = ErrNoMigration
	case resp.StatusCode == http.StatusConflict:
		sentinel = ErrReplayBusy
	case resp.StatusCode == http.StatusBadRequest && path == "/deadletters/purge":
		sentinel = ErrInvalidPurge
	default:
		return fmt.Errorf("catalog client: %s %s: %s: %s", method, path, resp.Status, eb.Error)
	}
	// The daemon's message often begins with the same sentinel's words (it
	// wrapped the same error): they are said once.
	detail := strings.TrimPrefix(eb.Error, sentinel.Error())
	detail = strings.TrimPrefix(detail, ": ")
	if detail == "" {
		return fmt.Errorf("catalog client: %s %s: %w", method, path, sentinel)
	}
	return fmt.Errorf("catalog client: %s %s: %w: %s", method, path, sentinel, detail)
}
