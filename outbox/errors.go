package outbox

import "errors"

var (
	// ErrFull is returned by Append when the outbox holds MaxEvents events.
	// Nothing was written; the caller pauses and tries again once the sender
	// has delivered some of the backlog.
	ErrFull = errors.New("outbox: bound reached")

	// ErrDeadLettersFull is wrapped, with ErrFull, by AppendDeadLetters and
	// SetAside when the dead-letter area holds MaxDeadLetters letters or
	// MaxDeadLetterBytes bytes. Nothing was written.
	ErrDeadLettersFull = errors.New("outbox: dead-letter area full")

	// ErrRefused is returned by Append and AppendDeadLetters when the write
	// could not be made durable: the filesystem is short of space or an I/O
	// error occurred. Nothing the caller may rely on was written. The error
	// wraps the cause.
	ErrRefused = errors.New("outbox: write refused")

	// ErrDiskFull is the cause wrapped by ErrRefused when the free space on
	// the outbox filesystem is below Options.MinFreeBytes.
	ErrDiskFull = errors.New("outbox: filesystem short of free space")

	// ErrLocked is returned by Open when another process (or another Outbox
	// in this process) holds the directory.
	ErrLocked = errors.New("outbox: directory in use by another process")

	// ErrNoStore is returned by Open with Options.ReadOnly when the
	// directory holds no outbox (it is missing, or Badger's MANIFEST is).
	ErrNoStore = errors.New("outbox: no store in the directory")

	// ErrLeftOpen is returned by Open with Options.ReadOnly for a store its
	// last writer did not close (a crash, a kill): Badger must replay its
	// write-ahead log, which writes.
	ErrLeftOpen = errors.New("outbox: store left open by its last writer")

	// ErrReadOnly is the cause wrapped by ErrRefused for every write to an
	// outbox opened with Options.ReadOnly.
	ErrReadOnly = errors.New("outbox: opened read-only")

	// ErrCorrupt is returned by Open (and by reads) when the store fails a
	// checksum or cannot be read back. See docs/outbox.md for recovery.
	ErrCorrupt = errors.New("outbox: store is damaged")

	// ErrFormatTooNew is returned by Open for a store written by a later
	// release in a format this build does not read; the message names the
	// format the store needs. The outbox wrote nothing to the store.
	ErrFormatTooNew = errors.New("outbox: store written in a newer format")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("outbox: closed")

	// ErrNotFound is returned by GetDeadLetter for an unknown sequence.
	ErrNotFound = errors.New("outbox: not found")

	// ErrInvalidRange is returned by Delete when first > last or first == 0.
	ErrInvalidRange = errors.New("outbox: invalid range")

	// ErrInvalidRecord is returned by SaveRecord and LoadRecord for an empty
	// or over-long name, or a value over MaxRecordBytes.
	ErrInvalidRecord = errors.New("outbox: invalid record")

	// errSegment: a segment of events whose header or block cannot be read.
	errSegment = errors.New("malformed event segment")
	// errOldFormat: a store marked with a later format still holds events one
	// per key, as the first format did (its migration at Open removes them all).
	errOldFormat = errors.New("events of the first one-key-per-event format remain in a store marked with a later format")
)
