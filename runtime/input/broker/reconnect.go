package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
)

// reconnectLoop is what the consumer and the control link share: run a
// session, and when it ends, wait a delay of the backoff and run another,
// until ctx is done.
type reconnectLoop struct {
	// running is set by the first run; a second run returns ErrOptions.
	running *atomic.Bool
	// bo gives the delays; it is reset after a session that reached its
	// steady state (session's first result), so a link that ran for a while
	// reconnects quickly and a broker that refuses at once is asked less
	// and less often.
	bo      *backoff.Backoff
	session func(ctx context.Context) (steady bool, err error)
	// ended is called after every session, with its error, before the
	// loop looks at ctx: the caller's readiness follows it.
	ended func(ctx context.Context, err error)
	// stopped, when set, is called once when ctx ends during a wait.
	stopped func()
	log     *zerolog.Logger
	msg     string
	// severe errors are logged at error level (an operator must act);
	// the others at warn level (the loop will get past them).
	severe []error
}

// run is the loop. It returns nil when ctx is done.
func (r reconnectLoop) run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: run called twice", ErrOptions)
	}
	for {
		steady, err := r.session(ctx)
		r.ended(ctx, err)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the loop ends with its context; the session's error went to ended
		}
		if steady {
			r.bo.Reset()
		}
		d := r.bo.Next()
		ev := r.log.Warn()
		for _, s := range r.severe {
			if errors.Is(err, s) {
				ev = r.log.Error()
				break
			}
		}
		ev.Err(err).Dur("retry_in", d).Msg(r.msg)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			if r.stopped != nil {
				r.stopped()
			}
			return nil
		case <-t.C:
		}
	}
}
