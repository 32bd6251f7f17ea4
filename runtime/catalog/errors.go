package catalog

import "errors"

var (
	// ErrUnknownModule is returned by Promote and Abort for a module name the
	// catalogue does not hold.
	ErrUnknownModule = errors.New("catalog: unknown mapper")
	// ErrNoMigration is returned by Promote and Abort when the named module has
	// no candidate in shadow.
	ErrNoMigration = errors.New("catalog: no migration in progress")
	// ErrClosed is returned by calls on a closed Catalog.
	ErrClosed = errors.New("catalog: closed")
	// ErrUnauthorized is returned by Client methods when the daemon refused the
	// token of a control route.
	ErrUnauthorized = errors.New("catalog: unauthorized")
	// ErrReplayBusy is returned by the replay route while another replay runs.
	ErrReplayBusy = errors.New("catalog: a replay is already running")
	// ErrNotSaved is returned by ApplyDecision when the decisions could not
	// be saved (the outbox refused the write, or the drop-in directory was
	// not read yet, so nothing may be saved): offer the decision again later.
	ErrNotSaved = errors.New("catalog: decisions not saved")
	// ErrInvalidPurge is returned by PurgeDeadLetters (and the purge route,
	// as 400) for options that select nothing explicitly or are malformed.
	ErrInvalidPurge = errors.New("catalog: invalid purge")
	// ErrNoDeadLetters is returned by the dead-letter routes and Client methods
	// when the daemon serves no outbox.
	ErrNoDeadLetters = errors.New("catalog: no dead-letter area")

	// ErrNotRegular is the reason a drop-in file is skipped when it is not a
	// regular file: a FIFO, a device such as /dev/zero, a socket.
	ErrNotRegular = errors.New("catalog: not a regular file")
	// ErrTooLarge is the reason a drop-in file is skipped when it is larger
	// than Options.MaxFileSize.
	ErrTooLarge = errors.New("catalog: file larger than the size cap")
	// ErrOutsideDir is the reason a drop-in file is skipped when it is a
	// symbolic link that leads outside the mappers directory.
	ErrOutsideDir = errors.New("catalog: symbolic link leads outside the mappers directory")

	// ErrNoLedger is returned by the ledger route when the daemon serves no
	// outbox.
	ErrNoLedger = errors.New("catalog: no outbox, so no ledger")
)
