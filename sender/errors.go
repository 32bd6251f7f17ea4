package sender

import "errors"

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
)

// ErrNoCountRoute is returned by Counts when the Reporting API does not
// offer its optional count route (it answers 404).
var ErrNoCountRoute = errors.New("sender: the reporting API has no count route (GET /api/v1/events/counts answers 404)")
