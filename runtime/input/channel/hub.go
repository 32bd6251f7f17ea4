package channel

import (
	"context"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// BusPerm is the permission of the events (and raw notifications) the AMQP
// input hands the tap: with the daemon's own uid and gid, readable by its
// user and its group. The raw form keeps only the owner's bit, as for every
// record.
const BusPerm = 0o440

// Origins of a Record.
const (
	OriginAMQP    = "amqp"
	OriginChannel = "channel"
)

// Record is what an input hands the tap once it has committed a message:
// the message as received and the events made of it.
type Record struct {
	Origin     string // OriginAMQP or OriginChannel
	Exchange   string // the AMQP exchange, or "channel"
	RoutingKey string // the AMQP routing key, or the channel tag
	// EventType is the notification's event type (for a channel message, its
	// tag): what a raw subscription matches.
	EventType string
	// Raw is the body as received, never redacted; the hub redacts it before
	// it leaves the daemon.
	Raw []byte
	// Events are the mapped events as committed.
	Events [][]byte
	// UID, GID and Perm decide who may see the events: a subscriber whose
	// credentials pass the read bits. The raw body is only ever shown to the
	// owner (Perm & 0400) and to root.
	UID, GID, Perm uint32
	// PID is the publisher's process id from SO_PEERCRED (channel messages);
	// 0 when unknown (the bus).
	PID uint32
}

// Redactor renders a raw body for a tap, with credentials removed, as one
// JSON line; broker.DumpLine is one (the --dump rendering).
type Redactor func(dst []byte, exchange, routingKey string, body []byte) []byte

// Defaults of HubOptions.
const (
	defaultSubscriberQueueBytes = 1 << 20
	defaultHubPendingBytes      = 16 << 20
	defaultMaxSubscriptions     = 64
	hubSlots                    = 4096
)

// HubOptions configure a Hub.
type HubOptions struct {
	// SubscriberQueueBytes bounds what waits to be written to one subscriber;
	// past it, what the subscriber misses is dropped and counted for it
	// alone. Default 1 MiB (CHANNEL_QUEUE_LIMIT_BYTES).
	SubscriberQueueBytes int64
	// PendingBytes bounds the records handed to the hub and not yet fanned
	// out; past it Offer drops (reason hub_overflow). Default 16 MiB.
	PendingBytes int64
	// MaxSubscriptions per connection; default 64.
	MaxSubscriptions int
	// Redact renders raw bodies; nil: raw subscriptions are refused.
	Redact Redactor
	Logger zerolog.Logger
}

// Hub fans committed messages out to the subscriptions of channel
// connections (the tap). Inputs call Offer after each commit; Offer never
// blocks and costs one atomic load while nobody subscribes. One goroutine
// matches, filters by credentials and queues to each subscriber, within a
// bound per subscriber: a subscriber that stops reading loses messages (and
// is told how many), nobody else does, and the inputs never wait.
type Hub struct {
	opts    HubOptions
	log     zerolog.Logger
	in      chan []Record
	pending atomic.Int64
	active  atomic.Int32 // subscriptions across all subscribers
	snap    atomic.Pointer[[]*subscriber]
	mu      sync.Mutex // subscribers and their subscriptions, for writers
	subs    map[*subscriber]struct{}
	m       *hubMetrics
	done    chan struct{}
	ran     atomic.Bool
}

// subscriber is one connection as the hub sees it.
type subscriber struct {
	cred  peerCred
	subs  atomic.Pointer[[]subscription] // copy on write, under Hub.mu
	queue *outQueue
}

type subscription struct {
	id    uint32
	raw   bool
	re    *regexp.Regexp // nil for an exact subscription
	exact string
}

func (s *subscription) matches(et string) bool {
	if s.re == nil {
		return et == s.exact
	}
	return s.re.MatchString(et)
}

// newHub returns a Hub; Run fans out.
func newHub(opts HubOptions) *Hub {
	setDefault(&opts.SubscriberQueueBytes, defaultSubscriberQueueBytes)
	setDefault(&opts.PendingBytes, defaultHubPendingBytes)
	setDefault(&opts.MaxSubscriptions, defaultMaxSubscriptions)
	h := &Hub{
		opts: opts,
		log:  opts.Logger,
		in:   make(chan []Record, hubSlots),
		subs: make(map[*subscriber]struct{}),
		m:    newHubMetrics(),
		done: make(chan struct{}),
	}
	empty := []*subscriber{}
	h.snap.Store(&empty)
	return h
}

// Active reports whether anyone subscribes: an input builds records only
// then. It is one atomic load.
func (h *Hub) Active() bool { return h != nil && h.active.Load() > 0 }

// Offer hands committed records to the hub without blocking. When the hub
// is behind by more than PendingBytes the records are dropped and counted.
// The hub keeps the slices; the caller must not change them afterwards.
func (h *Hub) Offer(recs []Record) {
	if !h.Active() || len(recs) == 0 {
		return
	}
	size := int64(0)
	for i := range recs {
		size += recordSize(&recs[i])
	}
	if h.pending.Add(size) > h.opts.PendingBytes {
		h.pending.Add(-size)
		h.m.dropped.WithLabelValues(dropHubOverflow).Add(float64(len(recs)))
		return
	}
	select {
	case h.in <- recs:
	default:
		h.pending.Add(-size)
		h.m.dropped.WithLabelValues(dropHubOverflow).Add(float64(len(recs)))
	}
}

func recordSize(r *Record) int64 {
	n := int64(len(r.Raw)) + 128
	for _, ev := range r.Events {
		n += int64(len(ev)) + 64
	}
	return n
}

// Run fans records out until ctx is done.
func (h *Hub) Run(ctx context.Context) {
	if !h.ran.CompareAndSwap(false, true) {
		return
	}
	defer close(h.done)
	var f fanout
	for {
		select {
		case <-ctx.Done():
			return
		case recs := <-h.in:
			size := int64(0)
			for i := range recs {
				size += recordSize(&recs[i])
				f.record(h, &recs[i])
			}
			h.pending.Add(-size)
		}
	}
}

// fanout is the hub goroutine's scratch space.
type fanout struct {
	idx jsonindex.Index
	red []byte
	ids []uint32
}

func (f *fanout) record(h *Hub, r *Record) {
	subs := *h.snap.Load()
	if len(subs) == 0 {
		return
	}
	for _, ev := range r.Events {
		et := ""
		if f.idx.Parse(ev) == nil {
			if k, s, e := f.idx.Lookup("event_type"); k == jsonindex.String {
				et = string(ev[s:e])
			}
		}
		for _, s := range subs {
			f.ids = s.match(f.ids[:0], et, false)
			if len(f.ids) == 0 {
				continue
			}
			if !mayRead(s.cred, r.UID, r.GID, r.Perm) {
				h.m.dropped.WithLabelValues(dropPermission).Inc()
				continue
			}
			f.deliver(h, s, &wire.Deliver{Type: wire.JSON, UID: r.UID, GID: r.GID, Perm: r.Perm,
				Origin: r.Origin, Tag: []byte(et), Data: ev, PID: r.PID})
		}
	}
	redacted := false
	rawPerm := r.Perm & 0o400
	for _, s := range subs {
		f.ids = s.match(f.ids[:0], r.EventType, true)
		if len(f.ids) == 0 {
			continue
		}
		if !mayRead(s.cred, r.UID, r.GID, rawPerm) || h.opts.Redact == nil {
			h.m.dropped.WithLabelValues(dropPermission).Inc()
			continue
		}
		if !redacted {
			f.red = h.opts.Redact(f.red[:0], r.Exchange, r.RoutingKey, r.Raw)
			if n := len(f.red); n > 0 && f.red[n-1] == '\n' {
				f.red = f.red[:n-1]
			}
			redacted = true
		}
		f.deliver(h, s, &wire.Deliver{Raw: true, Type: wire.JSON, UID: r.UID, GID: r.GID, Perm: rawPerm,
			Origin: r.Origin, Tag: []byte(r.EventType), Data: f.red, PID: r.PID})
	}
}

func (f *fanout) deliver(h *Hub, s *subscriber, d *wire.Deliver) {
	d.Subs = f.ids
	if !s.queue.pushDeliver(d) {
		h.m.dropped.WithLabelValues(dropSlowSubscriber).Inc()
		return
	}
	h.m.delivered.Inc()
}

// match appends the ids of the subscriptions of s that take a message of
// type et (raw or mapped).
func (s *subscriber) match(dst []uint32, et string, raw bool) []uint32 {
	p := s.subs.Load()
	if p == nil {
		return dst
	}
	for i := range *p {
		if sub := &(*p)[i]; sub.raw == raw && sub.matches(et) {
			dst = append(dst, sub.id)
		}
	}
	return dst
}

// subscribe adds (or replaces) subscription req.ID of s: a regular
// expression, or an exact name.
func (h *Hub) subscribe(s *subscriber, req wire.Subscribe) error {
	id, raw := req.ID, req.Raw
	if raw && h.opts.Redact == nil {
		return errRawUnavailable
	}
	sub := subscription{id: id, raw: raw, exact: req.Regex}
	if !req.Exact {
		re, err := regexp.Compile(req.Regex)
		if err != nil {
			return err
		}
		sub.re = re
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var cur []subscription
	if p := s.subs.Load(); p != nil {
		cur = *p
	}
	next := make([]subscription, 0, len(cur)+1)
	replaced := false
	for _, c := range cur {
		if c.id == id {
			replaced = true
			continue
		}
		next = append(next, c)
	}
	if !replaced && len(cur) >= h.opts.MaxSubscriptions {
		return errTooManySubscriptions
	}
	next = append(next, sub)
	s.subs.Store(&next)
	if !replaced {
		h.active.Add(1)
	}
	if _, ok := h.subs[s]; !ok {
		h.subs[s] = struct{}{}
		h.publishLocked()
	}
	h.m.subscriptions.Set(float64(h.active.Load()))
	return nil
}

// unsubscribe removes subscription id of s; it reports false when there
// was none.
func (h *Hub) unsubscribe(s *subscriber, id uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := s.subs.Load()
	if p == nil {
		return false
	}
	next := make([]subscription, 0, len(*p))
	for _, c := range *p {
		if c.id != id {
			next = append(next, c)
		}
	}
	if len(next) == len(*p) {
		return false
	}
	s.subs.Store(&next)
	h.active.Add(-1)
	h.m.subscriptions.Set(float64(h.active.Load()))
	return true
}

// remove forgets s and all its subscriptions.
func (h *Hub) remove(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; !ok {
		return
	}
	if p := s.subs.Load(); p != nil {
		h.active.Add(-int32(len(*p))) //nolint:gosec // G115: a subscriber's subscriptions are bounded by the protocol's uint16 count
	}
	empty := []subscription{}
	s.subs.Store(&empty)
	delete(h.subs, s)
	h.publishLocked()
	h.m.subscriptions.Set(float64(h.active.Load()))
}

func (h *Hub) publishLocked() {
	list := make([]*subscriber, 0, len(h.subs))
	for s := range h.subs {
		list = append(list, s)
	}
	h.snap.Store(&list)
	h.m.subscribers.Set(float64(len(list)))
}

// mayRead reports whether a reader with credentials c may see a message
// owned by uid:gid with permission bits perm: root always; the owner by the
// owner's read bit; a member of the group by the group's; anyone else by
// the others'. As for a file, the first class that applies decides.
func mayRead(c peerCred, uid, gid, perm uint32) bool {
	switch {
	case c.uid == 0:
		return true
	case c.uid == uid:
		return perm&0o400 != 0
	case c.inGroup(gid):
		return perm&0o040 != 0
	default:
		return perm&0o004 != 0
	}
}
