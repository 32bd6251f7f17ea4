package catalog

import (
	"context"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run follows the drop-in directory until ctx is done: it watches the
// directory itself (not the files, so that a Kubernetes ConfigMap update,
// which swaps the ..data symlink, is seen) and reloads once notifications
// have been quiet for Options.Debounce; it also reloads every
// Options.RefreshInterval, which catches what a watch can miss (a network
// filesystem, fixture files, a directory created after start-up, a file
// rewritten in place within one timestamp tick: the periodic scan hashes
// every file instead of trusting its stat). Without a
// directory Run just waits. It returns nil when ctx is done.
//
// A reload runs beside the loop, one at a time: what triggers while one is in
// progress is done once it ends (a periodic scan, which reads every file,
// standing for a watch's). So Run returns as soon as ctx is done even when a
// reload is stuck in a read (a file system that does not answer); that
// reload gives up at its next step, changing nothing.
func (c *Catalog) Run(ctx context.Context) error {
	if c.opts.Dir == "" {
		<-ctx.Done()
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		c.log.Warn().Err(err).Msg("cannot watch the mappers directory; relying on the periodic refresh")
		w = nil
	}
	var events chan fsnotify.Event
	var errs chan error
	watching := false
	watch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(c.opts.Dir); err != nil {
			c.log.Warn().Err(err).Str("dir", c.opts.Dir).Msg("cannot watch the mappers directory yet; retrying at the next refresh")
			return
		}
		watching = true
	}
	if w != nil {
		defer func() { _ = w.Close() }() // the watch ends with the loop; nothing is lost
		events, errs = w.Events, w.Errors
	}
	watch()

	tick := time.NewTicker(c.opts.RefreshInterval)
	defer tick.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var busy chan struct{} // closed when the reload in progress ends; nil: none
	next := ""             // the trigger that came while busy
	reload := func(trigger string) {
		if busy != nil {
			if next != "periodic" {
				next = trigger
			}
			return
		}
		done := make(chan struct{})
		busy = done
		go func() {
			defer close(done)
			c.reload(ctx, trigger)
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Clean(ev.Name) == filepath.Clean(c.opts.Dir) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				watching = false // the directory itself went away; re-added by the refresh
			}
			debounce.Reset(c.opts.Debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			c.log.Warn().Err(err).Msg("mappers directory watch")
		case <-busy:
			busy = nil
			if next != "" {
				t := next
				next = ""
				reload(t)
			}
		case <-debounce.C:
			reload("watch")
		case <-tick.C:
			watch()
			reload("periodic")
		}
	}
}
