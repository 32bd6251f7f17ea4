package plog

import (
	"errors"
	"fmt"
)

// Errors of the wire layer. Each one is counted by the listener that saw it; none
// of them stops a listener.
var (
	// ErrShortHeader: a fragment datagram shorter than the 24-byte header.
	ErrShortHeader = errors.New("plog: fragment shorter than its 24-byte header")
	// ErrBadHeader: a header field out of range or contradicting another field.
	ErrBadHeader = errors.New("plog: invalid fragment header")
	// ErrTooLarge: a message longer than the defragmenter may hold.
	ErrTooLarge = errors.New("plog: message larger than the defragmenter bound")

	// ErrNoListeners: Options.Listeners is empty.
	ErrNoListeners = errors.New("plog: no listeners")
	// ErrInvalidOptions: an option is out of range; the message names it.
	ErrInvalidOptions = errors.New("plog: invalid options")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("plog: server closed")
)

// Header rejections, prepared once so that refusing a datagram allocates nothing.
var (
	errNotFragment    = fmt.Errorf("%w: not a version 0 fragment", ErrBadHeader)
	errCountZero      = fmt.Errorf("%w: fragment count 0", ErrBadHeader)
	errIndexPastCount = fmt.Errorf("%w: fragment index not below the count", ErrBadHeader)
	errLengthRange    = fmt.Errorf("%w: message length out of range", ErrBadHeader)
	errReserved       = fmt.Errorf("%w: reserved bytes not zero", ErrBadHeader)
	errTagLength      = fmt.Errorf("%w: tag length past the datagram", ErrBadHeader)
	errFragSizeZero   = fmt.Errorf("%w: fragment size 0 with several fragments", ErrBadHeader)
	errSizes          = fmt.Errorf("%w: fragment count, fragment size and length disagree", ErrBadHeader)
)
