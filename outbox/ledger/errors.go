package ledger

import "errors"

var (
	// ErrMalformed is returned when a stored ledger value cannot be decoded.
	ErrMalformed = errors.New("ledger: malformed stored value")

	// ErrInvalid is returned for an invalid grouping or time range.
	ErrInvalid = errors.New("ledger: invalid request")
)
