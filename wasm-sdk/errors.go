package sdk

import "errors"

// Errors of the native helpers (the guest side reports failures in its output
// document instead).
var (
	// ErrPanic is returned by MapJSON when the MapFunc panicked.
	ErrPanic = errors.New("sdk: map function panicked")
	// ErrLookupBudget is returned by MapJSON when the MapFunc went on asking
	// for fields past MaxNativeLookups: it loops.
	ErrLookupBudget = errors.New("sdk: map function exceeded the native lookup budget")
	// ErrNilMapFunc is returned by MapJSON for a nil MapFunc.
	ErrNilMapFunc = errors.New("sdk: nil map function")
)
