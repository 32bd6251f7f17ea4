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
)
