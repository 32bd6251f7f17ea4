package outbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// openReadOnly is Open with Options.ReadOnly: the store is read as it
// stands, nothing in the directory is written, and none of the background
// work (reclaim, ledger folding, transactions made ahead) runs.
func openReadOnly(opts Options) (*Outbox, error) {
	if _, err := os.Stat(filepath.Join(opts.Dir, badger.ManifestFilename)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s holds no outbox (no %s): %w", ErrNoStore, opts.Dir, badger.ManifestFilename, err)
		}
		return nil, fmt.Errorf("outbox: %s: %w", opts.Dir, err)
	}
	db, err := badger.Open(badgerOptions(opts))
	// Badger flattens the error it wraps ErrTruncateNeeded in.
	if err != nil && (errors.Is(err, badger.ErrTruncateNeeded) || strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error())) {
		return nil, fmt.Errorf("%w: %s was not closed cleanly (its write-ahead log needs replaying, which only a writer does): "+
			"start the collector on it, then ask it, or stop it cleanly and read again", ErrLeftOpen, opts.Dir)
	}
	if err != nil {
		return nil, classifyOpenError(opts.Dir, err)
	}
	o := newOutbox(db, opts)
	o.wit = &witness{} // no file: nothing is committed here
	fail := func(err error) (*Outbox, error) {
		_ = db.Close() // the open failed: err is the one to report
		return nil, err
	}
	v, _, err := o.storedFormat()
	if err != nil {
		return fail(fmt.Errorf("%w: %s: format marker: %w (%s)", ErrCorrupt, o.dir, err, docRecovery))
	}
	switch {
	case v > formatVersion:
		return fail(fmt.Errorf("%w: %s holds an outbox of format %d; this build reads formats up to %d: run a release of the collector that reads format %d or later (docs/outbox.md, \"Upgrading\")",
			ErrFormatTooNew, o.dir, v, formatVersion, v))
	case v < formatVersion:
		return fail(fmt.Errorf("outbox: %s holds an outbox of format %d, which this build reads only after migrating it to format %d: start the collector on it once", o.dir, v, formatVersion))
	}
	var report damageReport
	if err := o.load(&report); err != nil {
		return fail(fmt.Errorf("%w: %s: %w (%s)", ErrCorrupt, opts.Dir, err, docRecovery))
	}
	o.checkWitness(&report)
	if len(report.problems) > 0 {
		return fail(report.err(opts.Dir))
	}
	if err := o.loadLedger(); err != nil {
		return fail(fmt.Errorf("%w: %s: ledger: %w (%s)", ErrCorrupt, opts.Dir, err, docRecovery))
	}
	if err := o.register(opts.Registerer); err != nil {
		return fail(err)
	}
	o.durable.Store(o.lastSeq)
	return o, nil
}
