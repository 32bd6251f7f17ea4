package daemon

// This file builds the parts of the daemon from the configuration: the one
// place where each package's options are filled from Config.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

type outboxHandle = *outbox.Outbox

var (
	_ outboxPart         = (*outbox.Outbox)(nil)
	_ catalog.StateStore = (*outbox.Outbox)(nil)
	_ broker.RecordStore = (*outbox.Outbox)(nil)
	_ senderPart         = (*sender.Sender)(nil)
	_ inputPart          = (*broker.Consumer)(nil)
	_ readyPart          = (*broker.Consumer)(nil)
	_ inputPart          = (*plog.Server)(nil)
	_ inputPart          = (*channel.Server)(nil)
	_ broker.Tap         = busTap{}
	_ closerPart         = (*Mappers)(nil)
)

// The broker consumer is the sender's Intake (newSender).
var _ sender.Intake = (*broker.Consumer)(nil)

// Mappers is the engine, the catalogue of modules (built-in, then the
// drop-in directory, hot-reloaded), the pipeline routing over it, and the
// modules named by plog listener chains.
type Mappers struct {
	Engine   *runtime.Engine
	Catalog  *catalog.Catalog
	Pipeline *pipeline.Pipeline
	chains   map[string]pipeline.Mapper // plog chains' modules, by manifest name
}

// Close frees the catalogue (each module waits for its in-flight calls), then
// the engine.
func (m *Mappers) Close(ctx context.Context) error {
	var errs []error
	if m.Catalog != nil {
		errs = append(errs, m.Catalog.Close(ctx))
	}
	errs = append(errs, m.Engine.Close(ctx))
	return errors.Join(errs...)
}

// Run follows the drop-in directory until ctx is done.
func (m *Mappers) Run(ctx context.Context) error { return m.Catalog.Run(ctx) }

func openOutbox(cfg *settings.Config, log zerolog.Logger, reg prometheus.Registerer) (outboxHandle, error) {
	return outbox.Open(outbox.Options{
		Dir:                cfg.BufferPath,
		MaxEvents:          cfg.BufferMaxEvents,
		MaxDeadLetters:     cfg.DeadLetterMaxEvents,
		MaxDeadLetterBytes: cfg.DeadLetterMaxBytes,
		LedgerRetention:    time.Duration(cfg.LedgerRetentionDays) * 24 * time.Hour,
		Logger:             log,
		Registerer:         reg,

		MaxUndeliverable:      cfg.DeadLetterUndeliverableMaxEvents,
		MaxUndeliverableBytes: cfg.DeadLetterUndeliverableMaxBytes,
	})
}

// builtinModuleOptions are the options of the built-in modules: their guard
// (builtinGuard).
func builtinModuleOptions(cfg *settings.Config) []runtime.ModuleOption {
	return []runtime.ModuleOption{runtime.WithGuard(builtinGuard(cfg))}
}

// builtinGuard is the guard of the built-in modules. Metered (MAPPER_METERED,
// the default), they run without termination checks and unwatched
// (runtime.GuardNever) unless MAPPER_BUILTIN_GUARD=always: a runaway spends
// its budget and fails like any other call, so no call needs handing over
// nor guarded code, a redelivery or a channel message included.
//
// Unmetered, they run watched (runtime.GuardWatched) for first AMQP
// deliveries: termination checks would cost their Go guests two to four
// times the mapping (docs/performance.md), and every other message runs
// guarded (pipeline.Message.FirstDelivery). A watched call that overruns its
// deadline ends the daemon (runawayExit), and the watchdog process ends it
// should it freeze first (watchdog.go); docs/abi.md, "When a built-in module
// runs away". MAPPER_BUILTIN_GUARD=always runs them guarded.
func builtinGuard(cfg *settings.Config) runtime.Guard {
	switch {
	case cfg.MapperBuiltinGuard == runtime.GuardAlways:
		return runtime.GuardAlways
	case cfg.MapperMetered:
		return runtime.GuardNever
	}
	return runtime.GuardWatched
}

// dropInModuleOptions are the options of the drop-in modules. Metered, they
// run without termination checks (runtime.GuardNever), as built-in ones do:
// the budget stops a runaway, and no host call blocks (sleeps are virtual),
// so a call that outlives its deadline all the same is stopped at its next
// host call and fails with reason timeout. Unmetered, they run guarded
// (runtime.GuardAlways, the engine's default).
func dropInModuleOptions(cfg *settings.Config) []runtime.ModuleOption {
	if cfg.MapperMetered {
		return []runtime.ModuleOption{runtime.WithGuard(runtime.GuardNever)}
	}
	return nil
}

// engineConfig is the mapper engine's configuration from the settings.
func engineConfig(cfg *settings.Config, base zerolog.Logger, onOverrun func(module string)) runtime.Config {
	return runtime.Config{
		CacheDir:         cfg.MapperCacheDir,
		MemoryLimit:      cfg.MapperMemoryLimit,
		CallTimeout:      cfg.MapperCallTimeout,
		PoolSize:         cfg.MapperPoolSize,
		Logger:           component(base, "runtime"),
		OnWatchedOverrun: onOverrun,
		Metered:          cfg.MapperMetered,
		Budget:           cfg.MapperBudget,
		// The hook exits (runawayExit): a watched call needs no hand-over.
		OverrunEndsProcess: onOverrun != nil,
	}
}

// loadMappers starts the engine and the catalogue: the built-in modules
// shipped in the binary, then the drop-in directory, where a module wins over
// a built-in one for the event types it claims. state keeps the catalogue's
// decisions across restarts (the daemon's outbox); nil for the offline
// commands, which take the directory as it stands. link, when not nil,
// shares the operator's promote and abort decisions with the other replicas
// and hands theirs to the catalogue.
//
// onOverrun is called when a watched built-in call overruns its deadline,
// before it is answered (runtime.Config.OnWatchedOverrun; only unmetered):
// the daemon exits there (runawayExit); nil for the offline commands, which
// never run a module watched. Since it ends the process, the engine is told so
// (runtime.Config.OverrunEndsProcess): a watched call then runs on the
// worker that maps the delivery, without handing it over to a goroutine of
// its instance's own that would only serve to answer at the deadline a
// caller the exit never lets go on.
func loadMappers(ctx context.Context, cfg *settings.Config, base zerolog.Logger, reg prometheus.Registerer, state catalog.StateStore, link *controlLink, onOverrun func(module string)) (*Mappers, error) {
	return loadMappersCached(ctx, cfg, daemonCacheDir(cfg), base, reg, state, link, onOverrun)
}

// mapperCacheOff are the values of MAPPER_CACHE_DIR that turn the
// compilation cache off: every module is compiled at its first use in every
// process.
var mapperCacheOff = []string{"off", "none"}

// cacheDir is where the compiled modules are kept: dir is the directory
// and explicit whether MAPPER_CACHE_DIR named it (its default may be
// unusable where the collector runs, which is no reason not to start).
type cacheDir struct {
	dir      string
	explicit bool
}

// daemonCacheDir is the daemon's compilation cache: MAPPER_CACHE_DIR, or by
// default mapper-cache beside the outbox (BUFFER_PATH's parent), on the
// volume that keeps the outbox across restarts.
func daemonCacheDir(cfg *settings.Config) cacheDir {
	if c, ok := explicitCacheDir(cfg); ok {
		return c
	}
	return cacheDir{dir: filepath.Join(filepath.Dir(filepath.Clean(cfg.BufferPath)), "mapper-cache")}
}

// commandCacheDir is the compilation cache of the commands that map (map,
// mapper test, map --diff, and the stopped daemon's mappers and deadletter):
// MAPPER_CACHE_DIR, or by default tally-openstack-collector in the user's
// cache directory (os.UserCacheDir: $XDG_CACHE_HOME or ~/.cache on Linux).
func commandCacheDir(cfg *settings.Config) cacheDir {
	if c, ok := explicitCacheDir(cfg); ok {
		return c
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return cacheDir{}
	}
	return cacheDir{dir: filepath.Join(base, "tally-openstack-collector")}
}

func explicitCacheDir(cfg *settings.Config) (cacheDir, bool) {
	v := strings.TrimSpace(cfg.MapperCacheDir)
	if slices.Contains(mapperCacheOff, strings.ToLower(v)) {
		return cacheDir{explicit: true}, true
	}
	if v != "" {
		return cacheDir{dir: v, explicit: true}, true
	}
	return cacheDir{}, false
}

// usable answers the directory to give the engine: a default one that
// cannot be created is given up, with a warning, and the modules compiled
// at their first use in every process, as without a cache.
func (c cacheDir) usable(log zerolog.Logger) string {
	if c.dir == "" || c.explicit {
		return c.dir
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		log.Warn().Err(err).Str("dir", c.dir).
			Msg("default mapper compilation cache unusable; modules are compiled at their first use in every process (set MAPPER_CACHE_DIR)")
		return ""
	}
	return c.dir
}

func loadMappersCached(ctx context.Context, cfg *settings.Config, cache cacheDir, base zerolog.Logger, reg prometheus.Registerer, state catalog.StateStore, link *controlLink, onOverrun func(module string)) (*Mappers, error) {
	ec := engineConfig(cfg, base, onOverrun)
	ec.CacheDir = cache.usable(component(base, "runtime"))
	eng, err := runtime.NewEngine(ctx, ec)
	if err != nil {
		return nil, fmt.Errorf("start the mapper engine: %w", err)
	}
	ms := &Mappers{Engine: eng, chains: map[string]pipeline.Mapper{}}
	runaways := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tally_collector_mapper_runaway_calls",
		Help: "Mapper calls abandoned at their deadline whose guest still runs; 0 in the daemon, which exits instead of abandoning a call.",
	}, func() float64 { return float64(eng.Runaways()) })
	abandoned := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tally_collector_mapper_abandoned_calls_total",
		Help: "Mapper calls of built-in modules answered with a timeout at their deadline while their guest still ran; 0 in the daemon, which exits instead of abandoning a call.",
	}, func() float64 { return float64(eng.Abandoned()) })
	if err := imetrics.Register(reg, runaways, abandoned); err != nil { // nil reg: nowhere
		_ = ms.Close(ctx)
		return nil, err
	}
	builtin, err := mappers.Builtin()
	if err != nil {
		_ = ms.Close(ctx)
		return nil, err
	}
	manifests, err := mappers.Manifests()
	if err != nil {
		_ = ms.Close(ctx)
		return nil, err
	}
	var onDecision func(context.Context, catalog.Decision) error
	replica := ""
	if link != nil {
		onDecision, replica = link.publish, cfg.ReplicaName
	}
	cat, err := catalog.New(ctx, catalog.Options{
		Engine:           eng,
		Builtin:          builtin,
		BuiltinManifests: manifests,
		Dir:              cfg.MappersDir,
		MaxFileSize:      cfg.MapperMaxFileSize,
		Promote:          cfg.MappersPromote,
		State:            state,
		Replica:          replica,
		OnDecision:       onDecision,
		BuiltinOptions:   builtinModuleOptions(cfg),
		DropInOptions:    dropInModuleOptions(cfg),
		Logger:           component(base, "catalog"),
		Registerer:       reg,
	})
	if err != nil {
		_ = ms.Close(ctx)
		return nil, err
	}
	ms.Catalog = cat
	if link != nil {
		link.cat.Store(cat)
	}
	ms.Pipeline, err = pipeline.New(pipeline.Options{
		Router:     cat,
		Logger:     component(base, "pipeline"),
		Registerer: reg,
	})
	if err != nil {
		_ = ms.Close(ctx)
		return nil, err
	}
	// A plog listener's chain names modules; each name stands for whichever
	// version the catalogue has active at the moment of a call, so chains
	// follow hot reloads and promotions.
	for _, l := range cfg.Plog {
		for _, name := range l.Mappers {
			if _, ok := ms.chains[name]; ok {
				continue
			}
			mod, ok := cat.Named(name)
			if !ok {
				_ = ms.Close(ctx)
				return nil, fmt.Errorf("plog listener %s: no mapper module named %q (built-in or in the drop-in directory)", l.Address, name)
			}
			ms.chains[name] = mod
		}
	}
	return ms, nil
}

// newSender builds the sender. When in reports backlogs (the broker
// consumer) it becomes the sender's Intake: the sender holds back while the
// consumer drains a backlog.
func newSender(cfg *settings.Config, log zerolog.Logger, reg prometheus.Registerer, ob outboxHandle, in inputPart) (senderPart, error) {
	opts := sender.Options{
		URL:            cfg.ReportingURL,
		Token:          cfg.ReportingToken,
		TokenFile:      cfg.ReportingTokenFile,
		Insecure:       cfg.ReportingInsecure,
		TLS:            cfg.ReportingTLS,
		BatchMax:       cfg.BatchMax,
		RequestTimeout: cfg.ReportingTimeout,
		Logger:         log,
		Registerer:     reg,
	}
	if intake, ok := in.(sender.Intake); ok {
		opts.Intake = intake
	}
	return sender.New(ob, opts)
}

// stopBounds splits the part of STOP_TIMEOUT before the flush (the inputs'
// budget, STOP_TIMEOUT - FLUSH_TIMEOUT) between the consumer's graceful stop
// (drain) and the broker connections' closes (closeTimeout, at most 5s, a
// quarter of the budget on a short one): the consumer finishes what it holds
// within drain, its close waits at most closeTimeout for the broker's
// answer, and it returns a closeTimeout before the budget is spent; the
// control link, stopped with the inputs, returns within closeTimeout.
func stopBounds(cfg *settings.Config) (drain, closeTimeout time.Duration) {
	inputs := cfg.StopTimeout - cfg.FlushTimeout
	closeTimeout = min(broker.DefaultCloseTimeout, inputs/4)
	return inputs - 2*closeTimeout, closeTimeout
}

func brokerOptions(cfg *settings.Config, log zerolog.Logger, reg prometheus.Registerer) broker.Options {
	drain, closeTimeout := stopBounds(cfg)
	return broker.Options{
		StopBudget:       drain,
		CloseTimeout:     closeTimeout,
		TransportURL:     cfg.TransportURL,
		TLS:              cfg.TransportTLS,
		Exchanges:        cfg.Exchanges,
		Topics:           cfg.Topics,
		Queue:            cfg.Queue,
		QueueType:        cfg.QueueType,
		RequireExchanges: cfg.RequireExchanges,
		Prefetch:         cfg.Prefetch,
		Logger:           log,
		Registerer:       reg,
	}
}

// controlLink is the broker's control link joined to the catalogue: the
// catalogue's decisions go out through publish, and what the link receives
// is applied by apply. The catalogue is made after the link (its options
// name publish), so apply finds it through cat; the link runs only once it
// is set.
type controlLink struct {
	*broker.Control
	cat atomic.Pointer[catalog.Catalog]
}

// The decision is the same document on both sides; the conversions below
// stop compiling if one of the two types changes without the other.
var _ = catalog.Decision(broker.Decision{})

func (l *controlLink) publish(ctx context.Context, d catalog.Decision) error {
	return l.Publish(ctx, broker.Decision(d))
}

func (l *controlLink) apply(ctx context.Context, d broker.Decision) error {
	cat := l.cat.Load()
	if cat == nil {
		return errors.New("the mapper catalogue is not loaded")
	}
	_, err := cat.ApplyDecision(ctx, catalog.Decision(d))
	return err
}

// newControl builds the control link of this replica (CONTROL_EXCHANGE,
// REPLICA_NAME); nil when CONTROL_EXCHANGE is empty. Decisions the broker
// has not confirmed are kept in the outbox.
func newControl(cfg *settings.Config, base zerolog.Logger, reg prometheus.Registerer, ob outboxHandle) (*controlLink, error) {
	if cfg.ControlExchange == "" {
		return nil, nil
	}
	l := &controlLink{}
	_, closeTimeout := stopBounds(cfg)
	ctl, err := broker.NewControl(broker.ControlOptions{
		CloseTimeout: closeTimeout,
		TransportURL: cfg.TransportURL,
		TLS:          cfg.TransportTLS,
		Exchange:     cfg.ControlExchange,
		Replica:      cfg.ReplicaName,
		QueueType:    cfg.QueueType,
		Apply:        l.apply,
		Store:        ob,
		Logger:       base,
		Registerer:   reg,
	})
	if err != nil {
		return nil, err
	}
	l.Control = ctl
	return l, nil
}

// newConsumer builds the AMQP consumer. The broker package tags its logger
// with its component itself, so it gets the base logger. With the local
// channel on, what the consumer commits is offered to the channel's tap.
func newConsumer(cfg *settings.Config, base zerolog.Logger, reg prometheus.Registerer, ob outboxHandle, ms *Mappers, ch *channel.Server) (inputPart, error) {
	opts := brokerOptions(cfg, base, reg)
	if ch != nil {
		opts.Tap = busTap{hub: ch.Tap(), uid: uint32(os.Getuid()), gid: uint32(os.Getgid())} //nolint:gosec // G115: Linux user and group ids are 32-bit
	}
	return broker.New(ms.Pipeline, ob, opts)
}

// newChannel builds the local message channel when CHANNEL_SOCKET is set
// (nil otherwise). Raw notifications on its tap are rendered by the dump's
// redaction, so the tap shows them as --dump does.
func newChannel(cfg *settings.Config, log zerolog.Logger, reg prometheus.Registerer, ob outboxHandle, ms *Mappers) (*channel.Server, error) {
	if cfg.ChannelSocket == "" {
		return nil, nil
	}
	return channel.New(channel.Options{
		Socket:               cfg.ChannelSocket,
		SocketMode:           cfg.ChannelSocketMode,
		IdleTimeout:          cfg.ChannelIdleTimeout,
		MaxConnectionsPerUID: cfg.ChannelMaxConnsPerUID,
		Processor:            ms.Pipeline,
		Outbox:               ob,
		Hub: channel.HubOptions{
			SubscriberQueueBytes: cfg.ChannelQueueLimitBytes,
			Redact:               broker.DumpLine,
		},
		Logger:     log,
		Registerer: reg,
	})
}

// busTap hands the tap what the AMQP consumer committed: the events carry
// the daemon's own credentials with channel.BusPerm.
type busTap struct {
	hub      *channel.Hub
	uid, gid uint32
}

func (t busTap) Active() bool { return t.hub.Active() }

func (t busTap) Committed(items []broker.Committed) {
	recs := make([]channel.Record, len(items))
	for i, it := range items {
		recs[i] = channel.Record{
			Origin: channel.OriginAMQP, Exchange: it.Exchange, RoutingKey: it.RoutingKey,
			EventType: it.EventType, Raw: it.Body, Events: it.Events,
			UID: t.uid, GID: t.gid, Perm: channel.BusPerm,
		}
	}
	t.hub.Offer(recs)
}

// newPlogInputs builds the plog listeners of PLOG_LISTENERS (none when it is
// empty); version is what they answer a client that asks.
func newPlogInputs(cfg *settings.Config, log zerolog.Logger, reg prometheus.Registerer, ob outboxHandle, ms *Mappers, version string) ([]inputPart, error) {
	if len(cfg.Plog) == 0 {
		return nil, nil
	}
	var listeners []plog.Listener
	for _, l := range cfg.Plog {
		u, err := url.Parse(l.Address)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", l.Address, err)
		}
		pl := plog.Listener{Network: u.Scheme, Address: u.Host, Settings: l.Settings}
		for _, name := range l.Mappers {
			pl.Mappers = append(pl.Mappers, ms.chains[name])
		}
		listeners = append(listeners, pl)
	}
	srv, err := plog.New(plog.Options{
		Listeners: listeners,
		Defaults:  cfg.PlogDefaults,
		Processor: ms.Pipeline,
		Outbox:    ob,
		// A permitted KILL command stops the daemon the way SIGTERM does.
		Stop:       func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) },
		Version:    version,
		Logger:     log,
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	return []inputPart{srv}, nil
}

func Dump(ctx context.Context, cfg *settings.Config, base zerolog.Logger, w io.Writer) error {
	return broker.Dump(ctx, brokerOptions(cfg, base, nil), w)
}

// OfflineMappers loads the mappers for map and mapper test: no metrics, and
// no module watched: a file mapped offline may be the notification that made
// the daemon's mapper loop. Metered (the default), every module runs as in
// the daemon, its budget stopping a runaway; unmetered, every module runs
// guarded, built-in ones included.
func OfflineMappers(ctx context.Context, cfg *settings.Config, base zerolog.Logger) (*Mappers, error) {
	return loadMappersCached(ctx, offline(cfg), commandCacheDir(cfg), base, nil, nil, nil, nil)
}

// offline is cfg for the offline commands (OfflineMappers).
func offline(cfg *settings.Config) *settings.Config {
	off := *cfg
	if !off.MapperMetered {
		off.MapperBuiltinGuard = runtime.GuardAlways
	}
	return &off
}

// StoppedMappers is OfflineMappers with the mapper decisions a stopped
// daemon saved in its outbox (state, opened read-only): the catalogue as that
// daemon's next start would make it of its drop-in directory. What the
// catalogue saves goes to state, which may drop it.
func StoppedMappers(ctx context.Context, cfg *settings.Config, base zerolog.Logger, state catalog.StateStore) (*Mappers, error) {
	return loadMappersCached(ctx, offline(cfg), commandCacheDir(cfg), base, nil, state, nil, nil)
}

// controlHandler serves the catalogue's routes (/mappers, /deadletters) on the
// daemon's HTTP server, behind the daemon's controlAuth (newMux).
func (m *Mappers) controlHandler(ob outboxHandle, log zerolog.Logger) http.Handler {
	return catalog.NewHandler(m.Catalog, catalog.HandlerOptions{
		Outbox:        ob,
		Pipeline:      m.Pipeline,
		ReplayMessage: replayMessage,
		Logger:        log,
	})
}

// replayMessage is the message a dead letter is replayed as: what its input
// made of it. The plog listeners and the local channel have the collector
// name events that carry no id from the message (DeriveID), so a replay
// gives the ids the first attempt would have; plog accepts a canonical event
// as it is, one without a timestamp given the time it was dead-lettered
// (when it was received, give or take its mapping).
func replayMessage(d outbox.StoredDeadLetter) pipeline.Message {
	m := pipeline.Message{Body: d.Body, Exchange: d.Exchange, RoutingKey: d.RoutingKey, Compression: d.Compression}
	switch d.Exchange {
	case plog.Exchange:
		m.Canonical, m.DeriveID, m.Received = true, true, d.At
	case channel.Exchange:
		m.DeriveID = true
	}
	return m
}

// controlToken is the token of CONTROL_TOKEN or CONTROL_TOKEN_FILE; nil when
// neither is set.
func controlToken(cfg *settings.Config, log zerolog.Logger) (*tokenfile.Source, error) {
	switch {
	case cfg.ControlTokenFile != "":
		return tokenfile.Open(cfg.ControlTokenFile, log)
	case strings.TrimSpace(cfg.ControlToken) != "":
		return tokenfile.Static(strings.TrimSpace(cfg.ControlToken)), nil
	}
	return nil, nil
}
