package runtime

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidModule is wrapped by every error Load returns for a module that
	// does not meet the ABI; the message names the module and the reason.
	ErrInvalidModule = errors.New("invalid mapper module")
	// ErrClosed is returned by calls on a closed Engine or Module.
	ErrClosed = errors.New("runtime closed")
	// ErrInvalidEvent is wrapped by the error of a call whose events break
	// the event contract in a required member (ReasonInvalidEvent); the
	// message names the event and the member.
	ErrInvalidEvent = errors.New("event breaks the contract")

	// errMemory: an instance ran out of its memory limit while it started.
	errMemory = errors.New("out of memory")
	// errAbandoned is the error of a watched call abandoned at its deadline.
	errAbandoned = errors.New("abandoned at its deadline; the guest may still be running")
)

// Reason classifies a failed mapper call. The set is fixed and small so it can
// be used as a metric label.
type Reason string

// The reasons of a MapError.
const (
	ReasonTrap          Reason = "trap"           // the guest trapped or exited
	ReasonTimeout       Reason = "timeout"        // the call overran its deadline
	ReasonBudget        Reason = "budget"         // a metered call spent its budget (Config.Metered)
	ReasonMemory        Reason = "memory"         // the guest ran out of memory, or tally_alloc failed
	ReasonInvalidOutput Reason = "invalid_output" // output too large, not JSON, or missing required fields
	ReasonABI           Reason = "abi"            // a pointer or length outside guest memory
	ReasonGuestError    Reason = "guest_error"    // the guest answered {"error": ...}
	// ReasonInvalidEvent: an event breaks the event contract in a required
	// member (missing, blank, not printable, too long; a timestamp outside
	// its window): the notification is dead-lettered, the instance kept.
	ReasonInvalidEvent Reason = "invalid_event"
	// ReasonLoad: the module could not be compiled or started when its
	// first call needed it (a built-in module of the catalogue, loaded on
	// first use); no guest code ran.
	ReasonLoad Reason = "load"
)

// MapError is the error of a failed Module.Map. After any reason but
// ReasonGuestError the instance that served the call has been discarded.
type MapError struct {
	Reason Reason
	Module string // name@version
	Err    error
}

func (e *MapError) Error() string {
	return fmt.Sprintf("mapper %s: %s: %v", e.Module, e.Reason, e.Err)
}

func (e *MapError) Unwrap() error { return e.Err }
