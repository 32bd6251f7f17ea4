package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// Badger cannot tell a write cut short by a crash from damage: it replays
// its write-ahead log (the memory table files, *.mem) up to the first entry
// that fails its checksum and drops the rest, and a MANIFEST cut back to its
// header makes every table unreferenced. Either way the store opens and
// looks whole, only shorter: events it had synced, and the collector had
// acknowledged, would be gone without a word.
//
// The witness is how the outbox notices. After every commit that assigns
// sequences, the highest event and dead-letter sequences are written to the
// file COMMITTED in the directory (24 bytes, overwritten in place with one
// pwrite, not synced: a crash of the process leaves the page cache to the
// kernel, and after a power loss the witness can only be behind the store,
// never ahead of it, because it is written after the store synced). At Open,
// a store whose sequences are below the witness lost acknowledged data.
const (
	witnessFile = "COMMITTED"
	// acceptFile, created by an operator in the directory, makes Open take a
	// damaged store as it is (see docs/outbox.md, "Recovery").
	acceptFile = "ACCEPT-DAMAGE"

	witnessMagic = "TOW1"
	witnessLen   = 24
)

// docRecovery is where every damage error points.
const docRecovery = `see docs/outbox.md, "When the store is damaged"`

type witness struct {
	mu     sync.Mutex
	f      *os.File
	seq    atomic.Uint64
	dead   atomic.Uint64
	failed bool // a write failed; logged once
}

// readWitness reads the witness file of dir. found is false when there is
// none (a new store, or one from a version without it).
func readWitness(dir string) (seq, dead uint64, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, witnessFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	if len(b) != witnessLen || string(b[:4]) != witnessMagic ||
		crc32.ChecksumIEEE(b[:20]) != binary.BigEndian.Uint32(b[20:]) {
		return 0, 0, true, fmt.Errorf("%s is damaged (%d bytes)", witnessFile, len(b))
	}
	return binary.BigEndian.Uint64(b[4:12]), binary.BigEndian.Uint64(b[12:20]), true, nil
}

// openWitness opens (or creates) the witness file and writes seq and dead
// to it, synced.
func openWitness(dir string, seq, dead uint64) (*witness, error) {
	f, err := os.OpenFile(filepath.Join(dir, witnessFile), os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, err
	}
	w := &witness{f: f}
	w.seq.Store(seq)
	w.dead.Store(dead)
	if err := w.write(); err != nil {
		_ = f.Close() // the write failed: err is the one to report
		return nil, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close() // the sync failed: err is the one to report
		return nil, err
	}
	return w, nil
}

func (w *witness) write() error {
	var b [witnessLen]byte
	copy(b[:4], witnessMagic)
	binary.BigEndian.PutUint64(b[4:12], w.seq.Load())
	binary.BigEndian.PutUint64(b[12:20], w.dead.Load())
	binary.BigEndian.PutUint32(b[20:], crc32.ChecksumIEEE(b[:20]))
	_, err := w.f.WriteAt(b[:], 0)
	return err
}

// committed records the highest sequences now committed; 0 leaves one as
// it is. A failed write is returned once, to be logged; the outbox goes on
// (the witness only ever lags).
func (w *witness) committed(seq, dead uint64) error {
	if seq > 0 {
		w.seq.Store(seq)
	}
	if dead > 0 {
		w.dead.Store(dead)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.write()
	if err != nil && !w.failed {
		w.failed = true
		return fmt.Errorf("outbox: write %s: %w", witnessFile, err)
	}
	return nil
}

// close writes the witness a last time, synced.
func (w *witness) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.write()
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	return err
}

// damageReport lists what Open found missing or unreadable.
type damageReport struct {
	problems []string
	missing  int64 // events known to be lost (gaps, a store behind the witness)
	badDead  [][]byte
	// badDeadBytes is their size as counted
	badDeadBytes int64
}

func (d *damageReport) add(format string, a ...any) {
	d.problems = append(d.problems, fmt.Sprintf(format, a...))
}

func (d *damageReport) err(dir string) error {
	return fmt.Errorf("%w: %s: %s; the collector refuses to start on it (%s: keep a copy, then start with what is left by creating the file %s in the directory)",
		ErrCorrupt, dir, strings.Join(d.problems, "; "), docRecovery, acceptFile)
}

// checkWitness compares the sequences the store holds with the witness.
func (o *Outbox) checkWitness(report *damageReport) {
	seq, dead, found, err := readWitness(o.dir)
	switch {
	case err != nil:
		// The record, not the store, is damaged (a torn write after a power
		// loss, most likely): nothing says that data is missing.
		o.log.Warn().Err(err).Msg("the record of committed sequences cannot be read; this start cannot check the store for lost events")
	case !found:
	default:
		if o.lastSeq < seq {
			report.add("the store ends at event %d but events up to %d were committed: %d acknowledged events are missing",
				o.lastSeq, seq, seq-o.lastSeq)
			report.missing += int64(seq - o.lastSeq)
		}
		if o.lastDead < dead {
			report.add("the store ends at dead letter %d but dead letters up to %d were committed", o.lastDead, dead)
		}
	}
}

// acceptDamage takes a damaged store as it is when the operator created the
// accept file: dead letters that cannot be read are removed, the missing
// events are counted as lost, the whole is logged, and the file removed.
// Without the file it answers the report as an error.
func (o *Outbox) acceptDamage(report *damageReport) error {
	accept := filepath.Join(o.dir, acceptFile)
	if _, err := os.Stat(accept); err != nil {
		return report.err(o.dir)
	}
	if len(report.badDead) > 0 {
		err := o.db.Update(func(txn *badger.Txn) error {
			for _, k := range report.badDead {
				if err := txn.Delete(k); err != nil {
					return err
				}
				if err := txn.Delete(undeliverableKey(k)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("outbox: remove unreadable dead letters: %w", err)
		}
		o.deadLettersRemoved(len(report.badDead), report.badDeadBytes)
		_ = o.db.View(func(txn *badger.Txn) error { o.countUndeliverable(txn); return nil })
	}
	o.damaged.Add(float64(report.missing))
	if err := os.Remove(accept); err != nil {
		return fmt.Errorf("outbox: remove %s: %w", accept, err)
	}
	o.log.Error().Strs("damage", report.problems).Int64("events_lost", report.missing).Int("dead_letters_removed", len(report.badDead)).
		Msg("outbox damage accepted as the operator asked (" + acceptFile + "); starting with what is left")
	return nil
}
