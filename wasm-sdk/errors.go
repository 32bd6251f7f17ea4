package sdk

import "errors"

// Errors of the native helpers (the guest side reports failures in its output
// document instead).
var (
	// ErrPanic is returned by MapJSON when the MapFunc panicked.
	ErrPanic = errors.New("sdk: map function panicked")
	// ErrNilMapFunc is returned by MapJSON for a nil MapFunc.
	ErrNilMapFunc = errors.New("sdk: nil map function")
)
