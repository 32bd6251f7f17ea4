package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Defaults applied by Open to zero-valued Options fields.
const (
	DefaultMaxEvents         = 1_000_000
	DefaultMemTableBytes     = 8 << 20
	DefaultBlockCacheBytes   = 8 << 20
	DefaultIndexCacheBytes   = 4 << 20
	DefaultReclaimAfterBytes = 4 << 20
)

// Options configures Open. Only Dir is required.
type Options struct {
	// Dir is the directory of the store; created when missing.
	Dir string

	// MaxEvents is the bound on buffered events (BUFFER_MAX_EVENTS).
	// Append answers ErrFull once it is reached. Default 1,000,000.
	MaxEvents int64

	Logger     zerolog.Logger
	Registerer prometheus.Registerer // nil: no metrics are registered

	// MinFreeBytes is the free space the outbox keeps on its filesystem:
	// writes are refused (ErrRefused wrapping ErrDiskFull) below it, so
	// that the store itself never runs into a full disk while flushing or
	// compacting. Default 64 MiB; negative disables the check.
	MinFreeBytes int64

	// ReclaimAfterBytes is how many bytes of delivered events trigger a
	// disk reclaim once the outbox is empty. Default 4 MiB.
	ReclaimAfterBytes int64

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

	// writeMu is held shared by every write transaction and exclusively
	// by a reclaim, which blocks Badger writes while it runs.
	writeMu sync.RWMutex
	// appendMu serialises event appends so sequences become visible in
	// order (the drain cursor never skips a later-committed lower key).
	appendMu sync.Mutex
	lastSeq  uint64 // guarded by appendMu

	deadMu   sync.Mutex
	lastDead uint64 // guarded by deadMu

	readMu sync.Mutex
	head   atomic.Uint64 // first sequence not yet deleted (the cursor)

	depth        atomic.Int64
	bytes        atomic.Int64
	deadCount    atomic.Int64
	deletedBytes atomic.Int64 // delivered since the last reclaim

	healthMu  sync.Mutex
	healthErr error

	closed    atomic.Bool
	reclaimCh chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup

	refusedFull    prometheus.Counter
	refusedIO      prometheus.Counter
	reclaims       prometheus.Counter
	reclaimSeconds prometheus.Histogram
}

// Key layout (see doc.go).
const (
	prefixEvent = 'e'
	prefixDead  = 'd'
	prefixMeta  = 'm'

	timePrefixLen = 8 // value = uint64 BE unix nanoseconds of the append + event
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
	bo.DetectConflicts = false
	return bo
}

// Open opens (or creates) the outbox in opts.Dir. It answers ErrLocked when
// the directory is held by another process and ErrCorrupt when the store
// cannot be read back.
func Open(opts Options) (*Outbox, error) {
	if opts.Dir == "" {
		return nil, errors.New("outbox: no directory given")
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	if opts.MemTableBytes <= 0 {
		opts.MemTableBytes = DefaultMemTableBytes
	}
	if opts.BlockCacheBytes <= 0 {
		opts.BlockCacheBytes = DefaultBlockCacheBytes
	}
	if opts.IndexCacheBytes <= 0 {
		opts.IndexCacheBytes = DefaultIndexCacheBytes
	}
	if opts.ReclaimAfterBytes <= 0 {
		opts.ReclaimAfterBytes = DefaultReclaimAfterBytes
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = 16 * opts.MemTableBytes
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", opts.Dir, err)
	}
	db, err := badger.Open(badgerOptions(opts))
	if err != nil {
		return nil, classifyOpenError(opts.Dir, err)
	}
	o := &Outbox{
		db:        db,
		dir:       opts.Dir,
		opts:      opts,
		log:       opts.Logger,
		reclaimCh: make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	if err := o.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %w (see docs/outbox.md, \"Recovery\")", ErrCorrupt, opts.Dir, err)
	}
	if err := o.register(opts.Registerer); err != nil {
		db.Close()
		return nil, err
	}
	o.wg.Add(1)
	go o.reclaimLoop()
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
	return fmt.Errorf("%w: cannot open %s: %w (see docs/outbox.md, \"Recovery\")", ErrCorrupt, dir, err)
}

// load reads the metadata and counts what is buffered. Every table touched
// is verified against its checksums.
func (o *Outbox) load() error {
	return o.db.View(func(txn *badger.Txn) error {
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
		var err error
		if o.lastSeq, err = getU64(metaLastSeq); err != nil {
			return err
		}
		if o.lastDead, err = getU64(metaLastDead); err != nil {
			return err
		}
		head, err := getU64(metaHead)
		if err != nil {
			return err
		}
		if head == 0 {
			head = 1
		}
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
		first := true
		var depth, size int64
		for it.Seek(seqKey(prefixEvent, head)); it.Valid(); it.Next() {
			seq := binary.BigEndian.Uint64(it.Item().Key()[1:])
			if first {
				head = seq
				first = false
			}
			if seq > o.lastSeq { // defensive: the meta is written in the same transaction
				o.lastSeq = seq
			}
			depth++
			size += it.Item().ValueSize() - timePrefixLen
		}
		it.Close()
		if first { // empty: the cursor starts after the last sequence ever used
			head = o.lastSeq + 1
		}
		o.head.Store(head)
		o.depth.Store(depth)
		o.bytes.Store(size)

		dit := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixDead}})
		var dead int64
		for dit.Rewind(); dit.Valid(); dit.Next() {
			seq := binary.BigEndian.Uint64(dit.Item().Key()[1:])
			if seq > o.lastDead {
				o.lastDead = seq
			}
			dead++
		}
		dit.Close()
		o.deadCount.Store(dead)
		return nil
	})
}

func (o *Outbox) register(r prometheus.Registerer) error {
	o.refusedFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_collector_outbox_full_total",
		Help: "Appends refused because the outbox holds BUFFER_MAX_EVENTS events.",
	})
	o.refusedIO = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_collector_outbox_refused_total",
		Help: "Appends refused because the write could not be made durable (disk full, I/O error).",
	})
	o.reclaims = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_collector_outbox_reclaims_total",
		Help: "Disk reclaims run after delivered events were deleted.",
	})
	o.reclaimSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tally_collector_outbox_reclaim_duration_seconds",
		Help:    "Time a disk reclaim took.",
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 7),
	})
	if r == nil {
		return nil
	}
	cs := []prometheus.Collector{
		o.refusedFull, o.refusedIO, o.reclaims, o.reclaimSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tally_collector_outbox_depth",
			Help: "Events buffered in the outbox, not yet delivered.",
		}, func() float64 { return float64(o.Depth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tally_collector_outbox_bytes",
			Help: "Bytes of the events buffered in the outbox.",
		}, func() float64 { return float64(o.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tally_collector_outbox_disk_bytes",
			Help: "Space the outbox files take on disk.",
		}, func() float64 { return float64(o.DiskBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tally_collector_outbox_oldest_age_seconds",
			Help: "Age of the oldest undelivered event; 0 when the outbox is empty.",
		}, func() float64 { return o.OldestAge().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tally_collector_deadletters",
			Help: "Dead letters held in the outbox's dead-letter area.",
		}, func() float64 { return float64(o.DeadLetterCount()) }),
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("outbox: register metrics: %w", err)
		}
	}
	return nil
}

// Append commits events in one synced transaction, in order, after every
// event already appended. It returns nil only once the events are on disk.
// ErrFull: the bound is reached and nothing was written. ErrRefused: the
// write could not be made durable (wrapping the cause). Safe for concurrent
// use; concurrent appends are serialised.
//
// The bound admits a batch while depth+len(events) <= MaxEvents, and any
// batch into an empty outbox, so a batch larger than the bound cannot
// block the caller forever.
func (o *Outbox) Append(ctx context.Context, events [][]byte) error {
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.closed.Load() {
		return ErrClosed
	}
	o.appendMu.Lock()
	defer o.appendMu.Unlock()
	if d := o.depth.Load(); d > 0 && d+int64(len(events)) > o.opts.MaxEvents {
		o.refusedFull.Inc()
		return fmt.Errorf("%w: %d events buffered, bound %d", ErrFull, d, o.opts.MaxEvents)
	}
	if err := o.checkSpace(); err != nil {
		o.refusedIO.Inc()
		o.setHealth(err)
		return err
	}
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return ErrClosed
	}
	now := u64(uint64(time.Now().UnixNano()))
	seq := o.lastSeq
	var size int64
	txn := o.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	commit := func() error {
		if err := txn.Set(metaLastSeq, u64(seq)); err != nil {
			return err
		}
		if err := txn.Commit(); err != nil {
			return err
		}
		o.lastSeq = seq
		return nil
	}
	committed := o.lastSeq
	maxCount, maxBytes := o.db.MaxBatchCount(), o.db.MaxBatchSize()
	var pending, txnBytes int64
	for i, ev := range events {
		val := make([]byte, timePrefixLen+len(ev))
		copy(val, now)
		copy(val[timePrefixLen:], ev)
		k := seqKey(prefixEvent, seq+1)
		// Split before Badger's transaction limits (leaving room for the
		// sequence key commit adds), not only when Set refuses.
		var err error
		pending++
		txnBytes += int64(len(k) + len(val) + txnEntryOverhead)
		if i > 0 && (pending+2 >= maxCount || txnBytes+txnEntryOverhead*2 >= maxBytes) {
			err = badger.ErrTxnTooBig
		} else {
			err = txn.Set(k, val)
		}
		if errors.Is(err, badger.ErrTxnTooBig) && i > 0 {
			pending, txnBytes = 1, int64(len(k)+len(val)+txnEntryOverhead)
			// Split an oversized batch: each part is durable on its own;
			// a caller that sees an error later resends the whole batch,
			// which the Reporting API counts as duplicates.
			if err = commit(); err == nil {
				o.depth.Add(int64(seq - committed))
				o.bytes.Add(size)
				size = 0
				committed = seq
				txn = o.db.NewTransaction(true)
				err = txn.Set(k, val)
			}
		}
		if err != nil {
			return o.refuse(err)
		}
		seq++
		size += int64(len(ev))
	}
	if err := commit(); err != nil {
		return o.refuse(err)
	}
	o.depth.Add(int64(seq - committed))
	o.bytes.Add(size)
	o.setHealth(nil)
	return nil
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

func (o *Outbox) checkSpace() error {
	if o.opts.MinFreeBytes < 0 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(o.dir, &st); err != nil {
		return fmt.Errorf("%w: statfs %s: %w", ErrRefused, o.dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
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
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return 0
	}
	var at int64
	_ = o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
		defer it.Close()
		it.Seek(seqKey(prefixEvent, o.head.Load()))
		if !it.Valid() {
			return nil
		}
		return it.Item().Value(func(v []byte) error {
			if len(v) >= timePrefixLen {
				at = int64(binary.BigEndian.Uint64(v))
			}
			return nil
		})
	})
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// Peek returns up to max of the oldest undelivered events, in order, with
// the sequence numbers of the first and last. It reads from the drain
// cursor, never from the start of the key space. An empty outbox returns
// 0, 0, nil, nil. The returned slices belong to the caller.
func (o *Outbox) Peek(ctx context.Context, max int) (first, last uint64, events [][]byte, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, nil, err
	}
	if o.closed.Load() {
		return 0, 0, nil, ErrClosed
	}
	if max <= 0 {
		max = 1
	}
	o.readMu.Lock()
	defer o.readMu.Unlock()
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return 0, 0, nil, ErrClosed
	}
	err = o.db.View(func(txn *badger.Txn) error {
		iopt := badger.IteratorOptions{PrefetchValues: true, PrefetchSize: min(max, 100), Prefix: []byte{prefixEvent}}
		it := txn.NewIterator(iopt)
		defer it.Close()
		for it.Seek(seqKey(prefixEvent, o.head.Load())); it.Valid() && len(events) < max; it.Next() {
			item := it.Item()
			seq := binary.BigEndian.Uint64(item.Key()[1:])
			if seq == 0 {
				continue // the reclaim sentinel
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) < timePrefixLen {
				return fmt.Errorf("event %d: value of %d bytes", seq, len(v))
			}
			if first == 0 {
				first = seq
			}
			last = seq
			events = append(events, v[timePrefixLen:])
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, badger.ErrDBClosed) {
			return 0, 0, nil, ErrClosed
		}
		err = fmt.Errorf("%w: read %s: %w", ErrCorrupt, o.dir, err)
		o.setHealth(err)
		return 0, 0, nil, err
	}
	return first, last, events, nil
}

// Delete removes the delivered events first..last (inclusive) in one synced
// transaction and moves the drain cursor past last. Sequences in the range
// that are already gone are ignored, so a repeated Delete is harmless.
func (o *Outbox) Delete(ctx context.Context, first, last uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if first == 0 || first > last {
		return fmt.Errorf("%w: %d..%d", ErrInvalidRange, first, last)
	}
	if o.closed.Load() {
		return ErrClosed
	}
	o.readMu.Lock()
	defer o.readMu.Unlock()
	o.writeMu.RLock()
	defer o.writeMu.RUnlock()
	if o.closed.Load() {
		return ErrClosed
	}
	var n, size int64
	txn := o.db.NewTransaction(true)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: []byte{prefixEvent}})
	var keys [][]byte
	for it.Seek(seqKey(prefixEvent, first)); it.Valid(); it.Next() {
		item := it.Item()
		if binary.BigEndian.Uint64(item.Key()[1:]) > last {
			break
		}
		keys = append(keys, item.KeyCopy(nil))
		size += item.ValueSize() - timePrefixLen
		n++
	}
	it.Close()
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return o.refuse(err)
		}
	}
	head := o.head.Load()
	if last+1 > head {
		head = last + 1
	}
	if err := txn.Set(metaHead, u64(head)); err != nil {
		return o.refuse(err)
	}
	if err := txn.Commit(); err != nil {
		return o.refuse(err)
	}
	o.head.Store(head)
	o.depth.Add(-n)
	o.bytes.Add(-size)
	if o.deletedBytes.Add(size) >= o.opts.ReclaimAfterBytes {
		o.triggerReclaim()
	}
	return nil
}

// Close stops the background reclaim and closes the store (flushing its
// memory tables). Further calls return ErrClosed.
func (o *Outbox) Close() error {
	if o.closed.Swap(true) {
		return ErrClosed
	}
	close(o.done)
	o.wg.Wait()
	o.readMu.Lock() // lock order everywhere: readMu or appendMu, then writeMu
	defer o.readMu.Unlock()
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if err := o.db.Close(); err != nil {
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
