package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// Defaults applied by Open to zero-valued Options fields.
const (
	defaultMaxEvents         = 1_000_000
	defaultMemTableBytes     = 8 << 20
	defaultBlockCacheBytes   = 8 << 20
	defaultIndexCacheBytes   = 4 << 20
	defaultReclaimAfterBytes = 4 << 20

	defaultMaxDeadLetters     = 100_000
	defaultMaxDeadLetterBytes = 256 << 20

	defaultMaxUndeliverable      = 1_000
	defaultMaxUndeliverableBytes = 16 << 20
)

// Options configures Open. Only Dir is required.
type Options struct {
	// Dir is the directory of the store; created when missing.
	Dir string

	// ReadOnly opens an existing store to read it while no collector runs
	// on it: Badger's read-only mode, which shares the directory lock, so
	// that a running collector's exclusive lock refuses it with ErrLocked
	// (and it refuses the collector until closed). Nothing in the directory
	// is created, migrated, narrowed or folded; a missing store answers
	// ErrNoStore, one of an older format or left open by a crash (its
	// write-ahead log needs replaying) answers an error saying to start the
	// collector on it once. Every write answers ErrRefused wrapping
	// ErrReadOnly.
	ReadOnly bool

	// MaxEvents is the bound on buffered events (BUFFER_MAX_EVENTS).
	// Append answers ErrFull once it is reached. Default 1,000,000.
	MaxEvents int64

	Logger     zerolog.Logger
	Registerer prometheus.Registerer // nil: no metrics are registered

	// MaxDeadLetters and MaxDeadLetterBytes bound the dead-letter area
	// (DEADLETTER_MAX_EVENTS, DEADLETTER_MAX_BYTES: letters, and their
	// bytes as stored). Past either, AppendDeadLetters and SetAside write
	// nothing and answer ErrFull wrapping ErrDeadLettersFull. Defaults
	// 100,000 and 256 MiB.
	MaxDeadLetters     int64
	MaxDeadLetterBytes int64

	// MaxUndeliverable and MaxUndeliverableBytes are the budget of the dead
	// letters marked Undeliverable (bodies no replay can deliver: oversized,
	// undecodable, refused by their decoder): DEADLETTER_UNDELIVERABLE_MAX_EVENTS
	// and _MAX_BYTES. They do not count against MaxDeadLetters: past their
	// budget AppendDeadLetters drops them, counted and logged, and never
	// answers ErrFull for them. Defaults 1,000 and 16 MiB.
	MaxUndeliverable      int64
	MaxUndeliverableBytes int64

	// MinFreeBytes is the free space the outbox keeps on its filesystem:
	// writes are refused (ErrRefused wrapping ErrDiskFull) below it, so
	// that the store itself never runs into a full disk while flushing or
	// compacting. Default 64 MiB; negative disables the check.
	MinFreeBytes int64

	// ReclaimAfterBytes is how many bytes of delivered events, as stored
	// (compressed), trigger a disk reclaim once the outbox is empty.
	// Default 4 MiB.
	ReclaimAfterBytes int64

	// LedgerRetention is how long the hours of the completeness ledger are
	// kept (LEDGER_RETENTION). Default 90 days.
	LedgerRetention time.Duration

	// Badger sizing; the defaults suit a daemon buffering up to a few
	// million events of a few hundred bytes.
	MemTableBytes   int64 // default 8 MiB
	BlockCacheBytes int64 // default 8 MiB
	IndexCacheBytes int64 // default 4 MiB
}

// Outbox is a durable FIFO of events plus a dead-letter area, stored in
// Badger. See the package documentation for the layout and invariants.
type Outbox struct {
	db   *badger.DB
	dir  string
	opts Options
	log  zerolog.Logger

	// The fields below are grouped by the lock that guards them; the
	// order in which the locks are taken is in doc.go, "Locks".

	// appendMu serialises event appends so sequences become visible in
	// order (the drain cursor never skips a later-committed lower key).
	appendMu sync.Mutex
	lastSeq  uint64 // the highest sequence handed to the store (durable or not)
	scratch  []byte // the raw events of the segment being encoded
	// segEvents: the events of the segment being encoded (emptied after
	// each, so that it holds no event's bytes).
	segEvents [][]byte
	appReader ledger.Reader // reads the ledger keys of events that come without them

	// readMu serialises the readers that move the cursor (Peek, Delete,
	// Delivered, SetAside).
	readMu     sync.Mutex
	head       atomic.Uint64 // first sequence not yet deleted (the cursor); written under readMu
	headSeg    atomic.Uint64 // first sequence of the first live segment, or head when none; written under readMu
	lens       []int         // scratch for segment headers
	recent     recentSet     // the ledger's recently delivered event ids (ledger.go)
	passReader ledger.Reader // reads the ledger keys of delivered events

	// foldMu: one fold of the ledger's deltas at a time (ledger.go).
	foldMu sync.Mutex

	// deadMu serialises dead-letter writes.
	deadMu   sync.Mutex
	lastDead uint64

	// writeMu is held shared by every write transaction, from its start to
	// Badger's answer (an append's unit takes it in open and gives it back
	// in settle, on another goroutine), and exclusively by a reclaim, which
	// blocks Badger writes while it runs, and by Close.
	writeMu sync.RWMutex

	// The commit pipeline (pipeline.go): appends handed to Badger and not
	// yet settled, completed strictly in the order they were sequenced.
	pipeMu   sync.Mutex
	inflight []*unit       // in sequence order
	broken   error         // the first failure not yet repaired
	failed   []*unit       // the units from the first failure on, for the repair
	idle     chan struct{} // closed when inflight empties; nil while it is empty
	// commitAnswer, in tests only, sees Badger's answer for the unit of
	// sequences first..last and may replace it (set before any append).
	commitAnswer func(first, last uint64, err error) error

	healthMu  sync.Mutex
	healthErr error

	// Without a lock: atomics, or set once at Open.
	durable      atomic.Uint64    // the highest sequence durable with every one before it: what readers may see
	pendingEv    atomic.Int64     // events handed to the store and not yet settled (the bound counts them)
	segPool      sync.Pool        // *[]byte: buffers of encoded segments, returned when their append settles
	spareTxn     chan *badger.Txn // write transactions made ahead by txnMaker
	depth        atomic.Int64
	bytes        atomic.Int64
	deadCount    atomic.Int64
	deadBytes    atomic.Int64
	deadFull     atomic.Bool  // the last dead letters offered were refused at the bound
	undelivCount atomic.Int64 // of the dead letters, those marked Undeliverable
	undelivBytes atomic.Int64
	oldestDead   atomic.Int64 // write time of the first dead letter, unix ns; 0: to be read
	deletedBytes atomic.Int64 // delivered since the last reclaim

	wit *witness // the sequences committed, kept beside the store

	// The completeness ledger (ledger.go).
	ledgerSeq atomic.Uint64 // id of the last delta written
	sinceFold atomic.Int64
	foldCh    chan struct{}
	rowCap    *ledger.Cap // the keys each hour of the ledger admitted (ledger.Cap)

	closed    atomic.Bool
	reclaimCh chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup

	refusedFull    prometheus.Counter
	ledgerFolded   *prometheus.CounterVec
	refusedIO      prometheus.Counter
	damaged        prometheus.Counter
	reclaims       prometheus.Counter
	reclaimSeconds prometheus.Histogram
	deadRefused    prometheus.Counter
	undelivDropped prometheus.Counter
	dropLog        zerolog.Logger // sampled: a flood of undeliverable bodies must not flood the log
}

// Key layout (see doc.go).
const (
	// prefixEvent marks a segment of events, under the sequence of its
	// first. It sorts just below prefixMeta with nothing in between: the
	// memory tables of appends (new segments plus the sequence meta key)
	// then span only the newest segments, and compacting them into the
	// next level rewrites only its tail, not every buffered event.
	prefixEvent = 'l'
	// prefixOldEvent marked one event per key in the first format.
	prefixOldEvent = 'e'
	prefixDead     = 'd'
	prefixMeta     = 'm'
	// prefixUndeliverable marks, beside its 'd' key, a dead letter that is
	// Undeliverable: value = its size as stored, so that their budget is
	// counted at open without reading the letters.
	prefixUndeliverable = 'u'
)

var (
	metaLastSeq  = []byte("mlast_event")
	metaLastDead = []byte("mlast_dead")
	metaHead     = []byte("mhead")
)

func seqKey(prefix byte, seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func badgerOptions(o Options) badger.Options {
	bo := badger.DefaultOptions(o.Dir).WithLogger(badgerLogger{o.Logger})
	bo.SyncWrites = true
	bo.MemTableSize = o.MemTableBytes
	bo.NumMemtables = 2
	bo.NumLevelZeroTables = 2
	// Few L0 tables and tables of one size at every level bound the space
	// a compaction needs before it frees its inputs (see MinFreeBytes).
	bo.NumLevelZeroTablesStall = 4
	bo.BaseTableSize = o.MemTableBytes / 4
	bo.TableSizeMultiplier = 1
	bo.BaseLevelSize = o.MemTableBytes
	bo.BlockCacheSize = o.BlockCacheBytes
	bo.IndexCacheSize = o.IndexCacheBytes
	bo.NumCompactors = 2
	bo.NumGoroutines = 2
	bo.ValueLogFileSize = 64 << 20
	// Keep every event (at most 64 KiB) in the LSM tree; Badger requires
	// the threshold to stay below its largest write batch (15% of a
	// memory table).
	bo.ValueThreshold = min(1<<20, o.MemTableBytes*15/100)
	bo.Compression = options.None
	bo.MetricsEnabled = false
	bo.CompactL0OnClose = true
	// Verify every table when it is opened. (Block-level verification is not
	// used: a failed block read ends an iteration early without an error.)
	bo.ChecksumVerificationMode = options.OnTableRead
	// Values too large for the tree (only dead letters of large bodies) live
	// in the value log; a read checks them, so a damaged one is an error
	// instead of short bytes.
	bo.VerifyValueChecksum = true
	bo.DetectConflicts = false
	bo.ReadOnly = o.ReadOnly
	return bo
}

// newOutbox is the Outbox on db that a read-write and a read-only open
// share; each adds what only it runs.
func newOutbox(db *badger.DB, opts Options) *Outbox {
	return &Outbox{
		db:       db,
		dir:      opts.Dir,
		opts:     opts,
		log:      opts.Logger,
		dropLog:  opts.Logger.Sample(&zerolog.BurstSampler{Burst: 20, Period: time.Second}),
		spareTxn: make(chan *badger.Txn),
		done:     make(chan struct{}),
		rowCap:   ledger.NewCap(0),
	}
}

// Open opens (or creates) the outbox in opts.Dir. It answers ErrLocked when
// the directory is held by another process and ErrCorrupt when the store
// cannot be read back.
//
// The directory is made 0700 and its files 0600, whatever the umask: an
// existing directory and files are narrowed, and until the last outbox of
// the process is closed, 0077 is added to the process umask, since Badger
// creates its files 0666 (less the umask) and offers no option for their
// mode. A directory or file this process does not own and so cannot narrow
// is logged as a warning.
func Open(opts Options) (*Outbox, error) {
	if opts.Dir == "" {
		return nil, errors.New("outbox: no directory given")
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = defaultMaxEvents
	}
	if opts.MemTableBytes <= 0 {
		opts.MemTableBytes = defaultMemTableBytes
	}
	if opts.BlockCacheBytes <= 0 {
		opts.BlockCacheBytes = defaultBlockCacheBytes
	}
	if opts.IndexCacheBytes <= 0 {
		opts.IndexCacheBytes = defaultIndexCacheBytes
	}
	if opts.ReclaimAfterBytes <= 0 {
		opts.ReclaimAfterBytes = defaultReclaimAfterBytes
	}
	if opts.MaxDeadLetters <= 0 {
		opts.MaxDeadLetters = defaultMaxDeadLetters
	}
	if opts.MaxDeadLetterBytes <= 0 {
		opts.MaxDeadLetterBytes = defaultMaxDeadLetterBytes
	}
	if opts.MaxUndeliverable <= 0 {
		opts.MaxUndeliverable = defaultMaxUndeliverable
	}
	if opts.MaxUndeliverableBytes <= 0 {
		opts.MaxUndeliverableBytes = defaultMaxUndeliverableBytes
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = 16 * opts.MemTableBytes
	}
	if opts.LedgerRetention <= 0 {
		opts.LedgerRetention = defaultLedgerRetention
	}
	if opts.ReadOnly {
		return openReadOnly(opts)
	}
	tightenUmask()
	warn, err := privateDir(opts.Dir)
	if err != nil {
		releaseUmask()
		return nil, err
	}
	if warn != nil {
		opts.Logger.Warn().Err(warn).Msg("outbox files are not private to the collector")
	}
	db, err := badger.Open(badgerOptions(opts))
	if err != nil {
		releaseUmask()
		return nil, classifyOpenError(opts.Dir, err)
	}
	o := newOutbox(db, opts)
	o.reclaimCh = make(chan struct{}, 1)
	o.foldCh = make(chan struct{}, 1)
	fail := func(err error) (*Outbox, error) {
		_ = db.Close() // the open failed: err is the one to report
		releaseUmask()
		return nil, err
	}
	if err := o.openFormat(); err != nil {
		return fail(err)
	}
	var report damageReport
	if err := o.load(&report); err != nil {
		return fail(fmt.Errorf("%w: %s: %w (%s)", ErrCorrupt, opts.Dir, err, docRecovery))
	}
	o.checkWitness(&report)
	if err := o.loadLedger(); err != nil {
		return fail(fmt.Errorf("%w: %s: ledger: %w (%s)", ErrCorrupt, opts.Dir, err, docRecovery))
	}
	if err := o.register(opts.Registerer); err != nil {
		return fail(err)
	}
	if len(report.problems) > 0 {
		if err := o.acceptDamage(&report); err != nil {
			return fail(err)
		}
	} else if err := os.Remove(filepath.Join(opts.Dir, acceptFile)); err == nil {
		// Left from an earlier start: it must not accept damage found later.
		o.log.Warn().Msg(acceptFile + " found with no damage to accept; removed")
	}
	wit, err := openWitness(opts.Dir, o.lastSeq, o.lastDead)
	if err != nil {
		return fail(fmt.Errorf("outbox: %s: %w", witnessFile, err))
	}
	o.wit = wit
	o.durable.Store(o.lastSeq)
	o.fold()
	o.wg.Add(3)
	go o.whenAsked(o.reclaimCh, o.reclaim)
	go o.whenAsked(o.foldCh, o.fold)
	go o.txnMaker()
	if o.depth.Load() == 0 {
		if o.DiskBytes() >= opts.ReclaimAfterBytes+opts.MemTableBytes {
			o.deletedBytes.Store(opts.ReclaimAfterBytes)
			o.triggerReclaim()
		}
	}
	o.log.Info().Str("dir", opts.Dir).Int64("depth", o.depth.Load()).Int64("bytes", o.bytes.Load()).
		Int64("dead_letters", o.deadCount.Load()).Uint64("next_seq", o.lastSeq+1).Msg("outbox opened")
	return o, nil
}

func classifyOpenError(dir string, err error) error {
	if errors.Is(err, syscall.EWOULDBLOCK) || strings.Contains(err.Error(), "Cannot acquire directory lock") {
		return fmt.Errorf("%w: %s is locked; another collector already uses this BUFFER_PATH: %w", ErrLocked, dir, err)
	}
	return fmt.Errorf("%w: cannot open %s: %w (%s)", ErrCorrupt, dir, err, docRecovery)
}

// load reads the metadata and counts what is buffered. Every table touched
// is verified against its checksums. Events missing between the cursor and
// the last sequence, and dead letters whose value cannot be read, are added
// to report.
func (o *Outbox) load(report *damageReport) error {
	return o.db.View(func(txn *badger.Txn) error {
		old := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixOldEvent}})
		old.Rewind()
		found := old.Valid()
		old.Close()
		if found {
			return errOldFormat
		}
		head, err := o.loadMeta(txn)
		if err != nil {
			return err
		}
		if err := o.loadEvents(txn, head, report); err != nil {
			return err
		}
		o.loadDeadLetters(txn, report)
		o.countUndeliverable(txn)
		return nil
	})
}

// loadMeta reads the sequences kept under the meta keys: the last event
// and dead-letter sequences into the Outbox, and the cursor, which it
// returns (1 when none was written).
func (o *Outbox) loadMeta(txn *badger.Txn) (head uint64, err error) {
	getU64 := func(k []byte) (uint64, error) {
		it, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		var v uint64
		err = it.Value(func(b []byte) error {
			if len(b) != 8 {
				return fmt.Errorf("meta %q has %d bytes", k, len(b))
			}
			v = binary.BigEndian.Uint64(b)
			return nil
		})
		return v, err
	}
	if o.lastSeq, err = getU64(metaLastSeq); err != nil {
		return 0, err
	}
	if o.lastDead, err = getU64(metaLastDead); err != nil {
		return 0, err
	}
	if head, err = getU64(metaHead); err != nil {
		return 0, err
	}
	return max(head, 1), nil
}

// loadEvents walks the segments from the cursor on: it sets the cursor,
// the first live segment, depth and bytes, and reports a missing range of
// sequences as damage.
func (o *Outbox) loadEvents(txn *badger.Txn, head uint64, report *damageReport) error {
	sc := segmentScan{head: head, expect: head, report: report}
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
	defer it.Close()
	var lens []int
	for it.Seek(seqKey(prefixEvent, 1)); it.Valid(); it.Next() {
		item := it.Item()
		first := binary.BigEndian.Uint64(item.Key()[1:])
		sc.countUnreadable(first)
		var seg segment
		err := item.Value(func(v []byte) error {
			var err error
			seg, err = parseSegment(first, v, lens)
			lens = seg.lens
			return err
		})
		if errors.Is(err, errSegment) {
			o.log.Error().Err(err).Msg("an outbox segment header cannot be read; it will be set aside when the sender reaches it")
			sc.unreadableAt(first)
			continue
		}
		if err != nil {
			return err
		}
		// defensive: the meta is written in the same transaction
		o.lastSeq = max(o.lastSeq, seg.last())
		sc.live(first, seg)
	}
	sc.end(o.lastSeq)
	o.head.Store(sc.head)
	o.headSeg.Store(sc.headSeg)
	o.depth.Store(sc.depth)
	o.bytes.Store(sc.size)
	return nil
}

// segmentScan is what loadEvents learns from the segments, in key order.
type segmentScan struct {
	head    uint64 // the cursor; moved up to the first live segment
	headSeg uint64 // the first live segment's first sequence; 0 until one is seen
	depth   int64
	size    int64
	// expect is the first sequence the next live segment must start at
	// (or before); 0 after an unreadable header, whose end is unknown.
	expect uint64
	// unreadable is the first sequence of a segment whose header could not
	// be read, 0 when the last segment seen was readable. Its events are
	// counted up to the next segment (or the last sequence assigned); Peek
	// sets it aside.
	unreadable uint64
	report     *damageReport
}

// countUnreadable counts the events of an unreadable segment once the
// first sequence after it (end) is known.
func (sc *segmentScan) countUnreadable(end uint64) {
	if sc.unreadable != 0 && end > max(sc.head, sc.unreadable) {
		sc.depth += int64(end - max(sc.head, sc.unreadable))
	}
	sc.unreadable = 0
}

// gap reports the sequences missing before a live segment's first.
func (sc *segmentScan) gap(first uint64) {
	if sc.expect != 0 && first > sc.expect {
		sc.report.add("events %d..%d are missing", sc.expect, first-1)
		sc.report.missing += int64(first - sc.expect)
	}
}

func (sc *segmentScan) firstLive(first uint64) {
	if sc.headSeg == 0 {
		sc.headSeg = first
		sc.head = max(sc.head, first)
	}
}

// unreadableAt notes a segment whose header cannot be read.
func (sc *segmentScan) unreadableAt(first uint64) {
	if first >= sc.head {
		sc.gap(first)
	}
	sc.expect = 0
	sc.unreadable = first
	sc.firstLive(first)
}

// live adds a readable segment; one wholly before the cursor was delivered
// (deleted with the cursor's move, so not expected).
func (sc *segmentScan) live(first uint64, seg segment) {
	last := seg.last()
	if last < sc.head {
		return
	}
	sc.gap(first)
	sc.expect = last + 1
	sc.firstLive(first)
	sc.depth += int64(last - max(sc.head, first) + 1)
	sc.size += seg.bytesFrom(sc.head)
}

// end closes the scan at the last sequence assigned.
func (sc *segmentScan) end(lastSeq uint64) {
	if sc.unreadable == 0 {
		sc.gap(lastSeq + 1)
	}
	sc.countUnreadable(lastSeq + 1)
	if sc.headSeg == 0 { // empty: the cursor starts after the last sequence ever used
		sc.head = max(sc.head, lastSeq+1)
		sc.headSeg = sc.head
	}
}

// loadDeadLetters counts the dead letters and their bytes, and reads every
// one kept in the value log, whose damage the tables' checksums do not
// cover: one that cannot be read is reported.
func (o *Outbox) loadDeadLetters(txn *badger.Txn, report *damageReport) {
	dit := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixDead}})
	defer dit.Close()
	var dead, deadBytes int64
	threshold := badgerOptions(o.opts).ValueThreshold
	for dit.Rewind(); dit.Valid(); dit.Next() {
		item := dit.Item()
		seq := binary.BigEndian.Uint64(item.Key()[1:])
		o.lastDead = max(o.lastDead, seq)
		dead++
		deadBytes += item.ValueSize()
		if item.ValueSize() >= threshold-64 {
			if _, err := decodeDead(item); err != nil {
				report.add("dead letter %d cannot be read (%v)", seq, err)
				report.badDead = append(report.badDead, item.KeyCopy(nil))
				report.badDeadBytes += item.ValueSize()
			}
		}
	}
	o.deadCount.Store(dead)
	o.deadBytes.Store(deadBytes)
}

func (o *Outbox) register(r prometheus.Registerer) error {
	o.ledgerFolded = imetrics.CounterVec("tally_collector_ledger_folded_rows_total",
		"Ledger rows counted under an (other) row instead of their own: the hour (intake), or the hour of the timestamp or of the delivery (stored), had its 512 distinct keys; for stored, also each event whose timestamp was unreadable or out of range.",
		imetrics.By("table", "intake", "stored"))
	o.refusedFull = imetrics.Counter("tally_collector_outbox_full_total",
		"Appends refused because the outbox holds BUFFER_MAX_EVENTS events.")
	o.refusedIO = imetrics.Counter("tally_collector_outbox_refused_total",
		"Appends refused because the write could not be made durable (disk full, I/O error).")
	o.damaged = imetrics.Counter("tally_collector_outbox_damaged_events_total",
		"Events lost to an outbox segment that could not be read (its bytes are kept as a dead letter).")
	o.reclaims = imetrics.Counter("tally_collector_outbox_reclaims_total",
		"Disk reclaims run after delivered events were deleted.")
	o.reclaimSeconds = imetrics.Histogram("tally_collector_outbox_reclaim_duration_seconds",
		"Time a disk reclaim took.",
		prometheus.ExponentialBuckets(0.01, 4, 7))
	o.deadRefused = imetrics.Counter("tally_collector_deadletter_refused_total",
		"Dead letters refused because the dead-letter area is at DEADLETTER_MAX_EVENTS or DEADLETTER_MAX_BYTES (the input pauses).")
	o.undelivDropped = imetrics.Counter("tally_collector_deadletter_undeliverable_dropped_total",
		"Undeliverable bodies (oversized, undecodable, refused by their decoder) acknowledged without being kept: their budget, DEADLETTER_UNDELIVERABLE_MAX_EVENTS or _MAX_BYTES, was spent.")
	cs := []prometheus.Collector{
		o.refusedFull, o.refusedIO, o.damaged, o.reclaims, o.reclaimSeconds, o.deadRefused, o.undelivDropped, o.ledgerFolded,
		imetrics.GaugeFunc("tally_collector_deadletter_undeliverable",
			"Dead letters held that no replay can deliver (oversized, undecodable, refused by their decoder); they count against their own budget, not DEADLETTER_MAX_EVENTS.",
			func() float64 { return float64(o.undelivCount.Load()) }),
		imetrics.GaugeFunc("tally_collector_deadletter_bytes",
			"Bytes of the dead letters held, as stored.",
			func() float64 { return float64(o.DeadLetterBytes()) }),
		imetrics.GaugeFunc("tally_collector_deadletter_oldest_age_seconds",
			"Age of the dead letter stored first; 0 when there is none.",
			func() float64 { return o.OldestDeadLetterAge().Seconds() }),
		imetrics.GaugeFunc("tally_collector_deadletter_full",
			"1 while dead letters are refused at DEADLETTER_MAX_EVENTS or DEADLETTER_MAX_BYTES (the input pauses), 0 otherwise.",
			func() float64 {
				if o.deadFull.Load() {
					return 1
				}
				return 0
			}),
		imetrics.GaugeFunc("tally_collector_outbox_depth",
			"Events buffered in the outbox, not yet delivered.",
			func() float64 { return float64(o.Depth()) }),
		imetrics.GaugeFunc("tally_collector_outbox_bytes",
			"Bytes of the events buffered in the outbox.",
			func() float64 { return float64(o.Bytes()) }),
		imetrics.GaugeFunc("tally_collector_outbox_disk_bytes",
			"Space the outbox files take on disk.",
			func() float64 { return float64(o.DiskBytes()) }),
		imetrics.GaugeFunc("tally_collector_outbox_oldest_age_seconds",
			"Age of the oldest undelivered event; 0 when the outbox is empty.",
			func() float64 { return o.OldestAge().Seconds() }),
		imetrics.GaugeFunc("tally_collector_deadletters",
			"Dead letters held in the outbox's dead-letter area.",
			func() float64 { return float64(o.DeadLetterCount()) }),
	}
	if err := imetrics.Register(r, cs...); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// witnessed records committed sequences in the witness file.
func (o *Outbox) witnessed(seq, dead uint64) {
	if err := o.wit.committed(seq, dead); err != nil {
		o.log.Warn().Err(err).Msg("the record of committed sequences could not be written; damage to the store may go unnoticed at the next start")
	}
}

// txnEntryOverhead approximates what Badger counts per entry beyond its key and
// value when it sizes a transaction.
const txnEntryOverhead = 64

func (o *Outbox) refuse(err error) error {
	if errors.Is(err, badger.ErrDBClosed) || o.closed.Load() {
		return ErrClosed
	}
	o.refusedIO.Inc()
	err = fmt.Errorf("%w: %w", ErrRefused, err)
	o.setHealth(err)
	o.log.Error().Err(err).Msg("outbox write failed")
	return err
}

// whenAsked runs work each time ask is signalled, until Close; it is one of
// the goroutines Close waits for (wg).
func (o *Outbox) whenAsked(ask <-chan struct{}, work func()) {
	defer o.wg.Done()
	for {
		select {
		case <-o.done:
			return
		case <-ask:
		}
		work()
	}
}

// usable answers ctx's error, or ErrClosed once Close has begun: what every
// call checks before it starts.
func (o *Outbox) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.closed.Load() {
		return ErrClosed
	}
	return nil
}

// holdOpen takes writeMu's shared side, under which Close cannot close the
// store, and answers ErrClosed, holding nothing, once Close has begun (it
// marks the outbox closed before it takes the exclusive side). Every
// transaction runs under it; the caller gives it back with
// o.writeMu.RUnlock.
func (o *Outbox) holdOpen() error {
	o.writeMu.RLock()
	if o.closed.Load() {
		o.writeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// update commits what fn writes in one synced transaction under holdOpen;
// a failure is refused (refuse).
func (o *Outbox) update(fn func(txn *badger.Txn) error) error {
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	if err := o.db.Update(fn); err != nil {
		return o.refuse(err)
	}
	return nil
}

// admitWrite is checkSpace for a write of events, dead letters or ledger
// counts: a refusal is also counted and becomes the outbox's health.
func (o *Outbox) admitWrite() error {
	err := o.checkSpace()
	if err != nil {
		o.refusedIO.Inc()
		o.setHealth(err)
	}
	return err
}

func (o *Outbox) checkSpace() error {
	if o.opts.ReadOnly {
		return fmt.Errorf("%w: %w", ErrRefused, ErrReadOnly)
	}
	if o.opts.MinFreeBytes < 0 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(o.dir, &st); err != nil {
		return fmt.Errorf("%w: statfs %s: %w", ErrRefused, o.dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize) //nolint:unconvert // Bsize is int64 on linux/amd64, not on every platform Statfs_t exists on
	if free < o.opts.MinFreeBytes {
		return fmt.Errorf("%w: %w: %d bytes free on %s, %d kept in reserve", ErrRefused, ErrDiskFull, free, o.dir, o.opts.MinFreeBytes)
	}
	return nil
}

func (o *Outbox) setHealth(err error) {
	o.healthMu.Lock()
	defer o.healthMu.Unlock()
	if err == nil && o.healthErr != nil {
		o.log.Info().Msg("outbox writable again")
	}
	o.healthErr = err
}

// Healthy returns nil while the outbox is usable: open, and its last write
// succeeded. After a refused write it returns that error until a write
// succeeds again. Used by the readiness and liveness probes.
func (o *Outbox) Healthy() error {
	if o.closed.Load() {
		return ErrClosed
	}
	o.healthMu.Lock()
	err := o.healthErr
	o.healthMu.Unlock()
	if err != nil && errors.Is(err, ErrDiskFull) {
		// Recheck cheaply so the probe recovers as soon as space returns.
		if o.checkSpace() == nil {
			return nil
		}
	}
	return err
}

// Depth is the number of buffered (undelivered) events.
func (o *Outbox) Depth() int64 { return o.depth.Load() }

// Bytes is the size of the buffered events (event bytes, not disk usage).
func (o *Outbox) Bytes() int64 { return o.bytes.Load() }

// DiskBytes is the space the store's files take on disk (allocated blocks,
// so preallocated sparse files count only what they use).
func (o *Outbox) DiskBytes() int64 {
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
	}
	return n
}

// OldestAge is how long the oldest undelivered event has waited; 0 when
// the outbox is empty.
func (o *Outbox) OldestAge() time.Duration {
	if o.closed.Load() || o.depth.Load() == 0 {
		return 0
	}
	at := o.firstWrittenAt(prefixEvent, seqKey(prefixEvent, o.headSeg.Load()), func(v []byte) (int64, error) {
		if len(v) < 9 {
			return 0, nil
		}
		return int64(binary.BigEndian.Uint64(v[1:9])), nil
	})
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// deleteKeys deletes each of keys in txn, stopping at the first error.
func deleteKeys(txn *badger.Txn, keys [][]byte) error {
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// firstWrittenAt returns when the first entry with the key prefix, at start
// or after it (from the first entry when start is nil), was written, in Unix
// nanoseconds as writtenAt reads it from the entry's value. It is 0 when the
// outbox is closed, there is no such entry, or writtenAt fails.
func (o *Outbox) firstWrittenAt(prefix byte, start []byte, writtenAt func(v []byte) (int64, error)) int64 {
	if o.holdOpen() != nil {
		return 0
	}
	defer o.writeMu.RUnlock()
	var at int64
	_ = o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefix}})
		defer it.Close()
		it.Seek(start)
		if !it.Valid() {
			return nil
		}
		return it.Item().Value(func(v []byte) error {
			ns, err := writtenAt(v)
			at = ns
			return err
		})
	})
	return at
}

// Peek returns up to max of the oldest undelivered events, in order, with
// the sequence numbers of the first and last. It reads from the drain
// cursor, never from the start of the key space. An empty outbox returns
// 0, 0, nil, nil. The returned slices belong to the caller.
func (o *Outbox) Peek(ctx context.Context, max int) (first, last uint64, events [][]byte, err error) {
	if err := o.usable(ctx); err != nil {
		return 0, 0, nil, err
	}
	if max <= 0 {
		max = 1
	}
	o.readMu.Lock()
	defer o.readMu.Unlock()
	for {
		var bad *damage
		first, last, events, bad, err = o.peek(max)
		if err != nil || bad == nil || len(events) > 0 {
			return first, last, events, err
		}
		// The oldest segment cannot be read: set it aside and go on.
		if err := o.quarantine(bad); err != nil {
			return 0, 0, nil, err
		}
	}
}

// damage is a segment Peek could not read.
type damage struct {
	key   []byte
	val   []byte
	seg   *segment // nil when the header itself is unreadable
	cause error
}

// peek reads up to max events from the cursor, stopping before a segment it
// cannot read (returned as bad). Called with readMu held.
func (o *Outbox) peek(max int) (first, last uint64, events [][]byte, bad *damage, err error) {
	if err := o.holdOpen(); err != nil {
		return 0, 0, nil, nil, err
	}
	defer o.writeMu.RUnlock()
	head := o.head.Load()
	// Only what is durable, with everything before it, is read: a segment
	// still in flight, or written after a commit that failed, is not.
	durable := o.durable.Load()
	err = o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
		defer it.Close()
		for it.Seek(seqKey(prefixEvent, o.headSeg.Load())); it.Valid() && len(events) < max; it.Next() {
			item := it.Item()
			segFirst := binary.BigEndian.Uint64(item.Key()[1:])
			if segFirst > durable {
				break
			}
			err := item.Value(func(v []byte) error {
				seg, err := parseSegment(segFirst, v, o.lens)
				o.lens = seg.lens
				if err != nil {
					bad = &damage{cause: err}
					return err
				}
				if seg.last() < head {
					return nil
				}
				from := head
				if segFirst > from {
					from = segFirst
				}
				n := len(events)
				events, err = seg.events(from, max-n, events)
				if err != nil {
					bad = &damage{seg: &seg, cause: err}
					events = events[:n]
					return err
				}
				if first == 0 {
					first = from
				}
				last = from + uint64(len(events)-n) - 1
				return nil
			})
			if bad != nil {
				bad.key = item.KeyCopy(nil)
				bad.val, _ = item.ValueCopy(nil)
				if bad.seg != nil {
					s := *bad.seg
					s.lens = append([]int(nil), s.lens...)
					bad.seg = &s
				}
				return nil
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, badger.ErrDBClosed) {
			return 0, 0, nil, nil, ErrClosed
		}
		err = fmt.Errorf("%w: read %s: %w", ErrCorrupt, o.dir, err)
		o.setHealth(err)
		return 0, 0, nil, nil, err
	}
	return first, last, events, bad, nil
}

// quarantine moves an unreadable segment to the dead-letter area (reason
// ReasonDamagedSegment, the stored bytes as its body) and moves the cursor
// past it, in one synced transaction, so that the events behind it are
// delivered. Its events are counted as lost and logged. Called with readMu
// held and writeMu not held.
func (o *Outbox) quarantine(d *damage) error {
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	first := binary.BigEndian.Uint64(d.key[1:])
	head := o.head.Load()
	txn := o.db.NewTransaction(true)
	defer txn.Discard()
	// Where the segment ends: from its header when it reads, else where the
	// next segment begins (or the last sequence ever assigned).
	next := uint64(0)
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
	it.Seek(seqKey(prefixEvent, first+1))
	if it.Valid() {
		next = binary.BigEndian.Uint64(it.Item().Key()[1:])
	}
	it.Close()
	var segLast uint64
	var size int64
	switch {
	case d.seg != nil:
		segLast = d.seg.last()
		size = d.seg.bytesFrom(head)
	case next > 0:
		segLast = next - 1
	default:
		item, err := txn.Get(metaLastSeq)
		if err == nil {
			err = item.Value(func(v []byte) error {
				if len(v) == 8 {
					segLast = binary.BigEndian.Uint64(v)
				}
				return nil
			})
		}
		if err != nil || segLast < first {
			segLast = first
		}
	}
	from := max(head, first)
	var lost int64
	if segLast >= from {
		lost = int64(segLast - from + 1)
	}
	newHead := max(head, segLast+1)
	if next == 0 || next < newHead {
		next = newHead
	}
	dl := DeadLetter{
		Body:   d.val,
		Reason: ReasonDamagedSegment,
		Detail: fmt.Sprintf("events %d..%d: %v", from, segLast, d.cause),
	}
	// Exempt from the bounds: the drain cannot go on otherwise.
	values, dlSize, err := encodeDeadLetters([]DeadLetter{dl}, false)
	if err != nil {
		return fmt.Errorf("outbox: encode dead letter: %w", err)
	}
	seq, err := o.setDeadLetters(txn, values)
	if err == nil {
		err = txn.Delete(d.key)
	}
	if err == nil && lost > 0 {
		// The events are lost: counted as damaged under the hour of their
		// segment (now when its header is unreadable); their source and
		// type cannot be read.
		at := time.Now()
		if d.seg != nil {
			at = time.Unix(0, d.seg.at)
		}
		dl := &ledger.Delta{}
		dl.Row(ledger.Key{Hour: ledger.HourOf(at)}).Damaged = lost
		err = o.putDelta(txn, dl)
	}
	if err == nil {
		err = txn.Set(metaHead, u64(newHead))
	}
	if err != nil {
		return o.refuse(err)
	}
	if err := txn.Commit(); err != nil {
		return o.refuse(err)
	}
	o.deadLettersCommitted(seq, dlSize)
	o.head.Store(newHead)
	o.headSeg.Store(next)
	o.depth.Add(-lost)
	o.bytes.Add(-size)
	o.damaged.Add(float64(lost))
	o.log.Error().Err(d.cause).Uint64("first", from).Uint64("last", segLast).Int64("events", lost).Uint64("dead_letter", seq).
		Msg("an outbox segment could not be read; its bytes are kept as a dead letter and its events will not be delivered")
	return nil
}

// Delete records the events up to last as delivered, in one synced
// transaction: the drain cursor moves past last, and every segment whose
// events are all delivered is removed. first..last is the range Peek
// returned; events before first that are still buffered count as delivered
// too. A range already delivered is ignored, so a repeated Delete is
// harmless.
func (o *Outbox) Delete(ctx context.Context, first, last uint64) error {
	return o.Delivered(ctx, first, last, -1)
}

// advance moves the drain cursor to newHead in one synced transaction,
// deleting every segment whose events all lie before it; also, when set,
// writes more within the same transaction, and the events passed are counted
// in the ledger as p says. Called with readMu held and writeMu not held;
// newHead must be past the current head.
func (o *Outbox) advance(newHead uint64, also func(txn *badger.Txn) error, p *passing) error {
	if err := o.holdOpen(); err != nil {
		return err
	}
	defer o.writeMu.RUnlock()
	head := o.head.Load()
	txn := o.db.NewTransaction(true)
	defer txn.Discard()
	mv, err := o.passSegments(txn, head, newHead, p != nil)
	if err != nil {
		err = fmt.Errorf("%w: read %s: %w", ErrCorrupt, o.dir, err)
		o.setHealth(err)
		return err
	}
	if err := deleteKeys(txn, mv.delete); err != nil {
		return o.refuse(err)
	}
	if also != nil {
		if err := also(txn); err != nil {
			return o.refuse(err)
		}
	}
	var batch *recentBatch
	drop := 0
	if p != nil {
		if batch, drop, err = o.countPassing(txn, p, mv.passed, head); err != nil {
			return o.refuse(err)
		}
	}
	if err := txn.Set(metaHead, u64(newHead)); err != nil {
		return o.refuse(err)
	}
	if err := txn.Commit(); err != nil {
		return o.refuse(err)
	}
	if p != nil {
		o.deltaCommitted()
		if batch != nil && len(batch.ids) > 0 {
			o.recent.drop(drop)
			o.recent.add(*batch)
		}
	}
	o.head.Store(newHead)
	o.headSeg.Store(mv.newSeg)
	o.depth.Add(-mv.events)
	o.bytes.Add(-mv.bytes)
	if o.deletedBytes.Add(mv.freed) >= o.opts.ReclaimAfterBytes {
		o.triggerReclaim()
	}
	return nil
}

// cursorMove is what moving the cursor passes: found by passSegments, and
// applied by advance once its transaction committed.
type cursorMove struct {
	newSeg        uint64   // the first live segment after the move, or the new head when none is left
	events, bytes int64    // the events passed and their bytes (depth and bytes drop by them)
	delete        [][]byte // the keys of the segments passed whole
	freed         int64    // their stored size, toward the next reclaim
	passed        []passed // the events passed, read for the ledger (when asked for)
}

// passSegments walks the segments from the first live one to the one that
// holds newHead. With read, it also reads the ledger keys of every event
// between head and newHead. Called under readMu, with writeMu's shared side.
func (o *Outbox) passSegments(txn *badger.Txn, head, newHead uint64, read bool) (cursorMove, error) {
	mv := cursorMove{newSeg: newHead}
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
	defer it.Close()
	for it.Seek(seqKey(prefixEvent, o.headSeg.Load())); it.Valid(); it.Next() {
		item := it.Item()
		segFirst := binary.BigEndian.Uint64(item.Key()[1:])
		if segFirst >= newHead {
			mv.newSeg = segFirst
			break
		}
		from := max(head, segFirst)
		var seg segment
		err := item.Value(func(v []byte) error {
			var err error
			seg, err = parseSegment(segFirst, v, o.lens)
			o.lens = seg.lens
			if err != nil || !read || seg.last() < from {
				return err
			}
			evs, err := seg.events(from, int(min(newHead, seg.last()+1)-from), nil)
			if err != nil {
				return err
			}
			h := ledger.HourOf(time.Unix(0, seg.at))
			for _, ev := range evs {
				mv.passed = append(mv.passed, passed{hour: h, ev: o.passReader.Read(ev)})
			}
			return nil
		})
		if err != nil {
			return cursorMove{}, err
		}
		if seg.last() < from {
			continue // defensive: delivered before the cursor
		}
		upto := min(newHead, seg.last()+1) // first sequence past the delivered part
		mv.events += int64(upto - from)
		mv.bytes += seg.bytesBetween(from, upto)
		if seg.last() < newHead {
			mv.delete = append(mv.delete, item.KeyCopy(nil))
			mv.freed += item.ValueSize()
			continue
		}
		mv.newSeg = segFirst // partly delivered: it stays, and the cursor points into it
		break
	}
	return mv, nil
}

// countPassing writes, in txn, the ledger's counts of the events passed and
// the batch of delivered event ids the ledger remembers, deleting the
// batches that expire with it. It returns the batch and how many expire,
// for advance to apply to the recent set once txn committed.
func (o *Outbox) countPassing(txn *badger.Txn, p *passing, evs []passed, head uint64) (batch *recentBatch, drop int, err error) {
	var d *ledger.Delta
	d, batch = o.countPassed(p, evs, head)
	if err := o.putDelta(txn, d); err != nil {
		return nil, 0, err
	}
	if batch == nil || len(batch.ids) == 0 {
		return batch, 0, nil
	}
	v := make([]byte, 0, 8*len(batch.ids))
	for _, id := range batch.ids {
		v = binary.BigEndian.AppendUint64(v, id)
	}
	if err := txn.Set(ledgerKey(ledgerRecent, batch.seq), v); err != nil {
		return nil, 0, err
	}
	drop, keys := o.recent.expiring(len(batch.ids))
	if err := deleteKeys(txn, keys); err != nil {
		return nil, 0, err
	}
	return batch, drop, nil
}

// Close stops the background reclaim and closes the store (flushing its
// memory tables). Further calls return ErrClosed.
func (o *Outbox) Close() error {
	if o.closed.Swap(true) {
		return ErrClosed
	}
	close(o.done)
	o.wg.Wait()
	// Appends in flight settle; what followed a failed one is withdrawn, so
	// that the store is left without a hole.
	o.appendMu.Lock()
	if err := o.repair(context.Background(), true); err != nil {
		o.log.Error().Err(err).Msg("outbox: the appends behind a failed commit could not be withdrawn; the next start reports the missing sequences")
	}
	o.appendMu.Unlock()
	o.readMu.Lock() // the lock order: doc.go, "Locks"
	defer o.readMu.Unlock()
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	err := o.db.Close()
	if err == nil {
		// After the store closed, so that it is never ahead of it.
		err = o.wit.close()
	} else {
		_ = o.wit.close() // the store's error is the one Close answers
	}
	if !o.opts.ReadOnly {
		releaseUmask()
	}
	if err != nil {
		return fmt.Errorf("outbox: close %s: %w", o.dir, err)
	}
	return nil
}

// badgerLogger routes Badger's own messages to zerolog, quietly.
type badgerLogger struct{ l zerolog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error().Str("store", "badger").Msgf(f, a...) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn().Str("store", "badger").Msgf(f, a...) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug().Str("store", "badger").Msgf(f, a...) }
func (b badgerLogger) Debugf(f string, a ...any)   {}
