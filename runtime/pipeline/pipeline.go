package pipeline

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Defaults for Options.
const (
	DefaultMaxBodyBytes  = 1 << 20
	defaultMaxEventBytes = 64 << 10
)

// Skip and unparseable reasons. The set is closed: it is a metric label.
const (
	ReasonUnclaimed     = "unclaimed"
	ReasonEventTooLarge = "event_too_large"
	ReasonBodyTooLarge  = "body_too_large"
	ReasonNotJSON       = "not_json"
	ReasonNoEventType   = "no_event_type"
	ReasonVersioned     = "versioned"
	// ReasonBadCompression: the compression header names an unknown codec,
	// or the body does not inflate with it.
	ReasonBadCompression = "bad_compression"
	// ReasonDecompressedTooLarge: the body inflates past MaxBodyBytes.
	ReasonDecompressedTooLarge = "decompressed_too_large"
	// ReasonDecoderLimit: the body's header asks its decoder for more memory
	// than the codec's cap (ErrDecoderLimit); refused before any buffer is
	// sized.
	ReasonDecoderLimit = "decoder_limit"
)

// unparseableReasons is the closed set of Unparseable reasons.
var unparseableReasons = []string{ReasonBodyTooLarge, ReasonNotJSON, ReasonBadCompression,
	ReasonDecompressedTooLarge, ReasonDecoderLimit}

// Outcome says what became of a message.
type Outcome uint8

const (
	// Mapped: Result.Events are to be committed (there may be none: a mapper may
	// answer zero events).
	Mapped Outcome = iota
	// Skipped: nothing to commit; Result.Reason says why.
	Skipped
	// Unparseable: the body could not be read; Result.Reason says why.
	Unparseable
	// Failed: the module failed; Result.Err is the *runtime.MapError and the
	// caller dead-letters the body.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Mapped:
		return "mapped"
	case Skipped:
		return "skipped"
	case Unparseable:
		return "unparseable"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Message is one received message.
type Message struct {
	// Body is the AMQP body (an oslo envelope or a bare messaging-v1 object), or a
	// message of another input.
	Body       []byte
	Exchange   string
	RoutingKey string
	// Compression is the codec the body is compressed with, as kombu names it
	// in the AMQP "compression" header (application/x-gzip, application/x-bz2,
	// ...); empty: not compressed. See Decompress.
	Compression string
	// Modules, when set, restricts routing to these modules (a plog listener's
	// chain); bytes that are not JSON go to Modules[0] exactly as they arrived.
	Modules []Mapper
	// Canonical accepts a canonical event as it is (validated, source filled).
	Canonical bool
	// Received is when the input received the message: a canonical event
	// (Canonical) without a timestamp is given it. Zero: none is given, and
	// such an event is dead-lettered as invalid.
	Received time.Time
	// DeriveID gives events without an event_id one derived from the body.
	DeriveID bool
	// FirstDelivery marks an AMQP delivery the broker has not delivered
	// before (neither the redelivered flag nor an x-delivery-count above 0):
	// should the process die while mapping it, the broker delivers it again,
	// marked. Only such a message may run a built-in module watched, without
	// termination checks; every other one (a redelivery, a replay, map,
	// mapper test, plog, the local channel) runs guarded
	// (runtime.GuardedCall), so that a message that makes a module loop ends
	// as a timeout and a dead letter instead of stopping the process again.
	FirstDelivery bool
}

// Result is what Process made of a message.
type Result struct {
	Outcome   Outcome
	Reason    string
	EventType string
	// Module is the ID (name@version) of the module that mapped or failed.
	Module string
	Events [][]byte
	// Keys[i], when Keys is not nil, says where the members the completeness
	// ledger reads lie in Events[i] (runtime.Result.Keys); AppendKeyed hands
	// both to the outbox.
	Keys []ledger.Keys
	Err  error
}

// AppendKeyed appends r's events to dst with their ledger keys (the zero
// Keys for an event whose keys r does not hold: the outbox then reads it).
func (r *Result) AppendKeyed(dst []ledger.Keyed) []ledger.Keyed {
	for i, ev := range r.Events {
		e := ledger.Keyed{Bytes: ev}
		if len(r.Keys) == len(r.Events) {
			e.Keys = r.Keys[i]
		}
		dst = append(dst, e)
	}
	return dst
}

// Mapper is a loaded module as the pipeline uses it; *runtime.Module satisfies it.
type Mapper interface {
	Map(ctx context.Context, in *jsonindex.Index, src runtime.Source) (runtime.Result, error)
	ID() string
	Manifest() runtime.Manifest
}

// Router picks the module for an event type; the catalogue implements it.
type Router interface {
	Route(eventType string) (Mapper, bool)
}

var _ Mapper = (*runtime.Module)(nil)

// Options configure a Pipeline.
type Options struct {
	Router        Router
	MaxBodyBytes  int // default DefaultMaxBodyBytes
	MaxEventBytes int // default defaultMaxEventBytes; enforced by the module's runtime too
	Logger        zerolog.Logger
	Registerer    prometheus.Registerer
}

// Pipeline maps messages to events. It is safe for concurrent use.
type Pipeline struct {
	opts    Options
	warn    zerolog.Logger // sampled: a flood of bad input must not flood the log
	metrics *metrics
	scratch sync.Pool
}

type scratch struct {
	outer, inner jsonindex.Index
	buf          []byte
	inflated     []byte
	typ          []byte // the decoded event type
	canonical    runtime.CanonicalWriter
}

// New returns a Pipeline. It fails only when its metrics cannot be
// registered on opts.Registerer (one already there: internal/metrics).
func New(opts Options) (*Pipeline, error) {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxEventBytes <= 0 {
		opts.MaxEventBytes = defaultMaxEventBytes
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{
		opts:    opts,
		warn:    opts.Logger.Sample(&zerolog.BurstSampler{Burst: 20, Period: time.Second}),
		metrics: m,
	}
	p.scratch.New = func() any { return new(scratch) }
	return p, nil
}

// Process maps one message. The returned events are owned by the caller.
func (p *Pipeline) Process(ctx context.Context, msg Message) Result {
	r := p.process(ctx, msg)
	p.count(msg, &r)
	return r
}

func (p *Pipeline) process(ctx context.Context, msg Message) Result {
	if len(msg.Body) > p.opts.MaxBodyBytes {
		return Result{Outcome: Unparseable, Reason: ReasonBodyTooLarge}
	}
	s := p.scratch.Get().(*scratch)
	defer p.scratch.Put(s)

	if msg.Compression != "" {
		var err error
		s.inflated, err = Decompress(s.inflated[:0], msg.Compression, msg.Body, p.opts.MaxBodyBytes)
		switch {
		case errors.Is(err, ErrDecompressedTooLarge):
			return Result{Outcome: Unparseable, Reason: ReasonDecompressedTooLarge, Err: err}
		case errors.Is(err, ErrDecoderLimit):
			return Result{Outcome: Unparseable, Reason: ReasonDecoderLimit, Err: err}
		case err != nil:
			return Result{Outcome: Unparseable, Reason: ReasonBadCompression, Err: err}
		}
		msg.Body = s.inflated
	}

	in, ok := p.decode(s, msg.Body)
	if !ok {
		if len(msg.Modules) > 0 {
			s.inner.SetRaw(msg.Body)
			return p.mapWith(ctx, msg, msg.Modules[0], &s.inner, "")
		}
		return Result{Outcome: Unparseable, Reason: ReasonNotJSON}
	}

	k, start, end := in.Lookup("event_type")
	if k != jsonindex.String || start == end {
		return Result{Outcome: Skipped, Reason: ReasonNoEventType}
	}
	// Routed, counted and reported as a JSON reader decodes it: the
	// escaped "compute\u002einstance.exists" is compute.instance.exists.
	raw := in.Bytes()[start:end]
	if bytes.IndexByte(raw, '\\') >= 0 {
		var err error
		if s.typ, err = jsonindex.AppendUnquote(s.typ[:0], raw); err != nil {
			return Result{Outcome: Skipped, Reason: ReasonNoEventType}
		}
		raw = s.typ
	}
	eventType := string(raw)

	if msg.Canonical && isCanonical(in) {
		return p.passThrough(msg, s, in, eventType)
	}
	var m Mapper
	if len(msg.Modules) > 0 {
		m, ok = Chain(msg.Modules).Route(eventType)
	} else if p.opts.Router != nil {
		m, ok = p.opts.Router.Route(eventType)
	}
	if !ok {
		// A versioned nova notification nobody claims is told apart: the
		// operator sees that nova sends a format no module reads.
		if k, _, _ := in.Lookup(`payload.nova_object\.data`); k == jsonindex.Object {
			return Result{Outcome: Skipped, Reason: ReasonVersioned, EventType: eventType}
		}
		return Result{Outcome: Skipped, Reason: ReasonUnclaimed, EventType: eventType}
	}
	return p.mapWith(ctx, msg, m, in, eventType)
}

// decode indexes the body and unwraps an oslo envelope. It reports false when the
// bytes (or the envelope's inner message) are not JSON. The envelope is read
// once: its oslo.message string is decoded and indexed in the same pass that
// finds where it ends (jsonindex.ParseWrapped), into s.buf, the bytes the
// module's input is copied from.
func (p *Pipeline) decode(s *scratch, body []byte) (*jsonindex.Index, bool) {
	k, buf, err := s.outer.ParseWrapped(body, `oslo\.message`, &s.inner, s.buf)
	s.buf = buf
	switch {
	case err != nil:
		return nil, false
	case k == jsonindex.Missing:
		return &s.outer, true
	case k == jsonindex.String && s.inner.Valid():
		return &s.inner, true
	}
	return nil, false
}

func (p *Pipeline) mapWith(ctx context.Context, msg Message, m Mapper, in *jsonindex.Index, eventType string) Result {
	if !msg.FirstDelivery {
		ctx = runtime.GuardedCall(ctx)
	}
	src := runtime.Source{Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}
	if msg.DeriveID {
		src.DeriveID = msg.Body
	}
	res, err := m.Map(ctx, in, src)
	if err != nil {
		reason := "abi"
		var me *runtime.MapError
		if errors.As(err, &me) {
			reason = string(me.Reason)
		}
		return Result{Outcome: Failed, Reason: reason, EventType: eventType, Module: m.ID(), Err: err}
	}
	p.dropped(msg, &res.Dropped, eventType, m.ID())
	events, keys := res.Events, res.Keys
	if len(keys) != len(events) {
		keys = nil
	}
	// The runtime enforces its own per-event limit; the pipeline's may be tighter.
	oversize, largest := res.Oversize, 0
	kept, keptKeys := events[:0], keys[:0]
	for i, ev := range events {
		if len(ev) > p.opts.MaxEventBytes {
			oversize++
			largest = max(largest, len(ev))
			continue
		}
		kept = append(kept, ev)
		if keys != nil {
			keptKeys = append(keptKeys, keys[i])
		}
	}
	events = kept
	if keys != nil {
		keys = keptKeys
	}
	if oversize > 0 {
		p.oversized(msg, eventType, m.ID(), oversize, largest)
		if len(events) == 0 {
			return Result{Outcome: Skipped, Reason: ReasonEventTooLarge, EventType: eventType, Module: m.ID()}
		}
	}
	return Result{Outcome: Mapped, EventType: eventType, Module: m.ID(), Events: events, Keys: keys}
}

// Chain is a fixed, ordered list of modules routed by their claims: the most
// specific claim wins and, on a tie, the module listed first. A plog
// listener's chain is one, and so is the Router of a pipeline over a fixed set
// of modules; the daemon's Router is the catalogue.
type Chain []Mapper

var _ Router = Chain(nil)

// Route returns the module of the chain for eventType.
func (c Chain) Route(eventType string) (Mapper, bool) {
	var best Mapper
	bestSpec := -1
	for _, m := range c {
		if ok, spec := m.Manifest().Match(eventType); ok && spec > bestSpec {
			best, bestSpec = m, spec
		}
	}
	return best, best != nil
}

// isCanonical reports whether a document is a canonical event rather than a
// notification: it has a resource_type and no payload.
func isCanonical(in *jsonindex.Index) bool {
	k, _, _ := in.Lookup("resource_type")
	pk, _, _ := in.Lookup("payload")
	return k == jsonindex.String && pk == jsonindex.Missing
}

// passThrough accepts a canonical event: checked against the event contract
// as a module's events are, the source set by the collector whatever the
// sender wrote. Only inputs that ask for it (plog) come here.
func (p *Pipeline) passThrough(msg Message, s *scratch, in *jsonindex.Index, eventType string) Result {
	src := runtime.Source{Exchange: msg.Exchange, RoutingKey: msg.RoutingKey, Received: msg.Received}
	if msg.DeriveID {
		src.DeriveID = msg.Body
	}
	ev, dropped, err := s.canonical.Write(in, src, canonicalMapper)
	if err != nil {
		return Result{Outcome: Failed, Reason: string(runtime.ReasonInvalidEvent), EventType: eventType,
			Module: canonicalMapper, Err: err}
	}
	p.dropped(msg, &dropped, eventType, canonicalMapper)
	if len(ev) > p.opts.MaxEventBytes {
		p.oversized(msg, eventType, canonicalMapper, 1, len(ev))
		return Result{Outcome: Skipped, Reason: ReasonEventTooLarge, EventType: eventType}
	}
	return Result{Outcome: Mapped, EventType: eventType, Module: canonicalMapper, Events: [][]byte{ev},
		Keys: []ledger.Keys{s.canonical.Keys()}}
}

// oversized counts n events left out for their size and logs them (sampled)
// with the exchange, the routing key and the sizes: size is the message's
// bytes, event_bytes the largest left-out event's where the pipeline measured
// it (the runtime leaves out events past its own bound without a size).
func (p *Pipeline) oversized(msg Message, eventType, module string, n, largest int) {
	p.metrics.skipped.WithLabelValues(ReasonEventTooLarge).Add(float64(n))
	ev := p.warn.Warn().Str("exchange", msg.Exchange).Str("routing_key", msg.RoutingKey).
		Str("event_type", eventType).Str("module", module).Int("events", n).
		Int("size", len(msg.Body)).Int("max_event_bytes", p.opts.MaxEventBytes)
	if largest > 0 {
		ev = ev.Int("event_bytes", largest)
	}
	ev.Msg("mapped event over the size bound, skipped")
}

// canonicalMapper is the source.mapper of a canonical event.
const canonicalMapper = "canonical"

// dropped counts and logs (sampled) the members the event contract left out.
func (p *Pipeline) dropped(msg Message, d *runtime.Drops, eventType, module string) {
	if d.Total() == 0 {
		return
	}
	first := p.metrics.countDropped(d)
	p.warn.Warn().Str("exchange", msg.Exchange).Str("routing_key", msg.RoutingKey).
		Str("event_type", eventType).Str("module", module).Int("members", d.Total()).
		Str("reason", first).Msg("event members that break the event contract left out")
}

func (p *Pipeline) count(msg Message, r *Result) {
	switch r.Outcome {
	case Mapped:
		p.metrics.mapped.Inc()
	case Skipped:
		if r.Reason != ReasonEventTooLarge { // counted per event in mapWith
			p.metrics.skipped.WithLabelValues(r.Reason).Inc()
		}
	case Unparseable:
		p.metrics.unparseable.WithLabelValues(r.Reason).Inc()
		ev := p.warn.Warn().Int("size", len(msg.Body)).Str("exchange", msg.Exchange).
			Str("routing_key", msg.RoutingKey).Str("reason", r.Reason)
		if msg.Compression != "" {
			ev = ev.Str("compression", cut(msg.Compression, 64))
		}
		if r.Err != nil {
			ev = ev.Err(r.Err)
		}
		ev.Msg("unparseable message, skipped")
	case Failed:
		p.metrics.failures.WithLabelValues(r.Reason).Inc()
		p.warn.Warn().Str("exchange", msg.Exchange).Str("routing_key", msg.RoutingKey).
			Str("event_type", r.EventType).Str("module", r.Module).Str("reason", r.Reason).
			Err(r.Err).Msg("mapper failed")
	}
}
