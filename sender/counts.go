package sender

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
)

// Count is one row of the Reporting API's optional count route: the events
// it stores, each once, in one hour of their timestamp, of one project and
// resource type.
type Count struct {
	Hour         time.Time `json:"hour"`
	ProjectID    string    `json:"project_id"`
	ResourceType string    `json:"resource_type"`
	Events       int64     `json:"events"`
}

// Counts asks the Reporting API (GET {URL}/api/v1/events/counts?from=&to=)
// for its stored counts of the hours in [from, to), with the URL, token and
// TLS rules of the sender (opts: URL, Token or TokenFile, Insecure, TLS,
// HTTPClient, RequestTimeout). ErrNoCountRoute when the API answers 404.
func Counts(ctx context.Context, opts Options, from, to time.Time) ([]Count, error) {
	endpoint, err := endpointURL(opts.URL, opts.Insecure)
	if err != nil {
		return nil, err
	}
	ts, err := newTokenSource(opts.Token, opts.TokenFile, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	tok, err := ts.Get()
	if err != nil {
		return nil, fmt.Errorf("sender: read the token file: %w", err)
	}
	if err := CheckTLS(opts.URL, opts.TLS); err != nil {
		return nil, err
	}
	setDefault(&opts.RequestTimeout, defaultRequestTimeout)
	var client http.Client
	var attempt *tlsfiles.Attempt
	if opts.HTTPClient != nil {
		client = *opts.HTTPClient
	} else {
		// The sender's own TLS rules: the CA file instead of the system's
		// store, the client certificate when one is set.
		u, _ := url.Parse(endpoint)
		tc := &tlsClient{files: opts.TLS, host: u.Hostname()}
		c, a, err := tc.get(newHTTPClient)
		if err != nil {
			return nil, err
		}
		client, attempt = *c, a
	}
	client.Timeout = opts.RequestTimeout
	client.CheckRedirect = noRedirect
	q := url.Values{}
	q.Set("from", from.UTC().Format(time.RFC3339))
	q.Set("to", to.UTC().Format(time.RFC3339))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/counts?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		return nil, attempt.Explain(scrub(err), TLSSettings)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, scrub(err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, ErrNoCountRoute
	default:
		return nil, fmt.Errorf("sender: GET /api/v1/events/counts: HTTP %d: %s", resp.StatusCode, excerpt(raw, tok))
	}
	var out struct {
		Counts []Count `json:"counts"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("sender: GET /api/v1/events/counts: unexpected answer: %w", err)
	}
	return out.Counts, nil
}
