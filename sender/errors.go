package sender

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidURL is returned by New when REPORTING_URL is not an
	// absolute https URL with a host (http is allowed with Insecure).
	ErrInvalidURL = errors.New("sender: invalid reporting URL")

	// ErrNoToken is returned by New when neither a token nor a readable,
	// non-empty token file is given, or both are given.
	ErrNoToken = errors.New("sender: no usable reporting token")

	// ErrTokenRefused is what Ready returns while the Reporting API answers
	// 401 or 403.
	ErrTokenRefused = errors.New("sender: reporting API refused the token")

	// ErrRefusedByAPI is what Ready returns while the Reporting API refuses
	// (400, 413 or 422) not one event but the events behind it as well,
	// until it accepts a batch again.
	ErrRefusedByAPI = errors.New("sender: reporting API refuses every event it is sent")

	// ErrEndpointNotFound is what Ready returns, as an
	// *EndpointNotFoundError, while the Reporting API answers 404 to every
	// POST (3 in a row, notFoundRun): the events route is not where REPORTING_URL
	// leads.
	ErrEndpointNotFound = errors.New("sender: reporting API has no events route at the URL")
)

// notFoundRun is how many POSTs answered 404 in a row make the sender not
// ready. One may be a proxy's hiccup during a deployment; a run of them is
// a URL whose path is wrong.
const notFoundRun = 3

// EndpointNotFoundError says which URL answered 404 to the last POSTs. The
// URL carries no credential, query or fragment: New refuses those.
type EndpointNotFoundError struct {
	URL string // the endpoint posted to
}

func (e *EndpointNotFoundError) Error() string {
	return fmt.Sprintf("%v: POST %s answered 404 Not Found %d times in a row or more; REPORTING_URL must be the API's base URL (the collector adds %s itself)",
		ErrEndpointNotFound, e.URL, notFoundRun, EventsRoute)
}

// Is makes errors.Is(err, ErrEndpointNotFound) hold.
func (e *EndpointNotFoundError) Is(target error) bool { return target == ErrEndpointNotFound }

// ErrNoCountRoute is returned by Counts when the Reporting API does not
// offer its optional count route (it answers 404).
var ErrNoCountRoute = errors.New("sender: the reporting API has no count route (GET /api/v1/events/counts answers 404)")
