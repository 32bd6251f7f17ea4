package outbox

import (
	"time"
)

func (o *Outbox) triggerReclaim() {
	select {
	case o.reclaimCh <- struct{}{}:
	default:
	}
}

// reclaim gives disk space back after deliveries, when triggerReclaim asks
// (whenAsked). Segments are small, so they live in the LSM tree itself and
// deleting them only adds tombstones; neither value-log GC nor the store's
// own compactions shrink the files once writes stop. Two measures do:
//
//   - when the outbox is empty, every segment key is dropped with DropPrefix,
//     which removes whole tables. DropPrefix ignores a prefix with no live
//     key, so a sentinel key (sequence 0, never used by an event) is
//     written first. Appends wait for the drop; it takes about a second
//     for hundreds of megabytes.
//   - while a backlog remains, a Flatten compacts the tree into one level,
//     which drops the tombstones together with the data they hide; it runs
//     when the delivered bytes reach half of the store's size, so the work
//     stays proportional to what is given back.
func (o *Outbox) reclaim() {
	deleted := o.deletedBytes.Load()
	if deleted < o.opts.ReclaimAfterBytes {
		return
	}
	if o.depth.Load() == 0 {
		o.dropEvents(deleted)
		return
	}
	if deleted >= 64<<20 && deleted >= o.DiskBytes()/2 {
		o.flatten(deleted)
	}
}

func (o *Outbox) dropEvents(deleted int64) {
	o.appendMu.Lock()
	defer o.appendMu.Unlock()
	if o.depth.Load() != 0 || o.closed.Load() {
		return
	}
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	// The exclusive lock waited for every append in flight to settle.
	if o.depth.Load() != 0 || o.closed.Load() {
		return
	}
	start := time.Now()
	before := o.DiskBytes()
	txn := o.db.NewTransaction(true)
	err := txn.Set(seqKey(prefixEvent, 0), nil)
	if err == nil {
		err = txn.Commit()
	} else {
		txn.Discard()
	}
	if err == nil {
		err = o.db.DropPrefix([]byte{prefixEvent})
	}
	if err != nil {
		o.log.Warn().Err(err).Msg("outbox disk reclaim failed; will retry after the next delivery")
		return
	}
	o.deletedBytes.Add(-deleted)
	o.reclaims.Inc()
	o.reclaimSeconds.Observe(time.Since(start).Seconds())
	o.log.Info().Int64("delivered_bytes", deleted).Int64("disk_bytes_before", before).Int64("disk_bytes_after", o.DiskBytes()).
		Dur("took", time.Since(start)).Msg("outbox drained: disk space reclaimed")
}

func (o *Outbox) flatten(deleted int64) {
	if o.holdOpen() != nil {
		return
	}
	defer o.writeMu.RUnlock()
	start := time.Now()
	if err := o.db.Flatten(1); err != nil {
		o.log.Warn().Err(err).Msg("outbox compaction failed")
		return
	}
	o.deletedBytes.Add(-deleted)
	o.reclaims.Inc()
	o.reclaimSeconds.Observe(time.Since(start).Seconds())
	o.log.Info().Int64("delivered_bytes", deleted).Int64("disk_bytes_after", o.DiskBytes()).Dur("took", time.Since(start)).
		Msg("outbox compacted after deliveries")
}
