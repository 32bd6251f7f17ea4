package main

// This file builds the parts of the daemon from the configuration: the one
// place where each package's options are filled from Config.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/broker"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
	"github.com/tally-billing/tally-openstack-collector/runtime/plog"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

type outboxHandle = *outbox.Outbox

var (
	_ outboxPart = (*outbox.Outbox)(nil)
	_ senderPart = (*sender.Sender)(nil)
	_ inputPart  = (*broker.Consumer)(nil)
	_ readyPart  = (*broker.Consumer)(nil)
	_ inputPart  = (*plog.Server)(nil)
	_ closerPart = (*mapperSet)(nil)
)

// mapperSet is the engine, the loaded modules (built-in first, then drop-ins)
// and the pipeline routing over them.
type mapperSet struct {
	engine   *runtime.Engine
	modules  []*runtime.Module
	byName   map[string]*runtime.Module
	pipeline *pipeline.Pipeline
}

// Close frees the modules (each waits for its in-flight calls), then the engine.
func (m *mapperSet) Close(ctx context.Context) error {
	var errs []error
	for _, mod := range m.modules {
		errs = append(errs, mod.Close(ctx))
	}
	errs = append(errs, m.engine.Close(ctx))
	return errors.Join(errs...)
}

func openOutbox(cfg *Config, log zerolog.Logger, reg prometheus.Registerer) (outboxHandle, error) {
	return outbox.Open(outbox.Options{
		Dir:        cfg.BufferPath,
		MaxEvents:  cfg.BufferMaxEvents,
		Logger:     log,
		Registerer: reg,
	})
}

// loadMappers starts the engine and loads the built-in modules shipped in the
// binary, then every .wasm of the drop-in directory in name order. A drop-in
// wins over a built-in one for the event types both claim equally.
func loadMappers(ctx context.Context, cfg *Config, base zerolog.Logger, reg prometheus.Registerer) (*mapperSet, error) {
	log := component(base, "mappers")
	eng, err := runtime.NewEngine(ctx, runtime.Config{
		CacheDir:    cfg.MapperCacheDir,
		MemoryLimit: cfg.MapperMemoryLimit,
		CallTimeout: cfg.MapperCallTimeout,
		PoolSize:    cfg.MapperPoolSize,
		Logger:      component(base, "runtime"),
	})
	if err != nil {
		return nil, fmt.Errorf("start the mapper engine: %w", err)
	}
	ms := &mapperSet{engine: eng, byName: map[string]*runtime.Module{}}
	fail := func(err error) (*mapperSet, error) {
		_ = ms.Close(ctx)
		return nil, err
	}
	builtin, err := mappers.Builtin()
	if err != nil {
		return fail(err)
	}
	names := make([]string, 0, len(builtin))
	for n := range builtin {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		mod, err := eng.Load(ctx, "builtin:"+n, builtin[n])
		if err != nil {
			return fail(err)
		}
		ms.add(mod)
	}
	if cfg.MappersDir != "" {
		paths, err := filepath.Glob(filepath.Join(cfg.MappersDir, "*.wasm"))
		if err != nil {
			return fail(err)
		}
		sort.Strings(paths)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return fail(fmt.Errorf("read drop-in mapper: %w", err))
			}
			mod, err := eng.Load(ctx, p, b)
			if err != nil {
				return fail(err)
			}
			ms.add(mod)
		}
	}
	list := make([]pipeline.Mapper, len(ms.modules))
	ids := make([]string, len(ms.modules))
	for i, m := range ms.modules {
		list[i], ids[i] = m, m.ID()
	}
	router, conflicts := pipeline.NewStaticRouter(list...)
	for _, c := range conflicts {
		log.Warn().Str("conflict", c).Msg("two modules claim the same event types")
	}
	ms.pipeline = pipeline.New(pipeline.Options{
		Router:     router,
		Logger:     component(base, "pipeline"),
		Registerer: reg,
	})
	log.Info().Strs("modules", ids).Msg("mappers loaded")
	return ms, nil
}

func (m *mapperSet) add(mod *runtime.Module) {
	m.modules = append(m.modules, mod)
	m.byName[mod.Manifest().Name] = mod // a later module of the same name wins
}

func newSender(cfg *Config, log zerolog.Logger, reg prometheus.Registerer, ob outboxHandle) (senderPart, error) {
	return sender.New(ob, sender.Options{
		URL:            cfg.ReportingURL,
		Token:          cfg.ReportingToken,
		TokenFile:      cfg.ReportingTokenFile,
		Insecure:       cfg.ReportingInsecure,
		BatchMax:       cfg.BatchMax,
		RequestTimeout: cfg.ReportingTimeout,
		Logger:         log,
		Registerer:     reg,
	})
}

func brokerOptions(cfg *Config, log zerolog.Logger, reg prometheus.Registerer) broker.Options {
	return broker.Options{
		TransportURL:     cfg.TransportURL,
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

// newConsumer builds the AMQP consumer. The broker package tags its logger
// with its component itself, so it gets the base logger.
func newConsumer(cfg *Config, base zerolog.Logger, reg prometheus.Registerer, ob outboxHandle, ms *mapperSet) (inputPart, error) {
	return broker.New(ms.pipeline, ob, brokerOptions(cfg, base, reg))
}

func newPlogInputs(cfg *Config, log zerolog.Logger, reg prometheus.Registerer, ob outboxHandle, ms *mapperSet) ([]inputPart, error) {
	if len(cfg.Plog) == 0 {
		return nil, nil
	}
	var listeners []plog.Listener
	for _, l := range cfg.Plog {
		u, err := url.Parse(l.Address)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", l.Address, err)
		}
		pl := plog.Listener{Network: u.Scheme, Address: u.Host, Settings: plogSettings(l.Settings)}
		for _, name := range l.Mappers {
			mod, ok := ms.byName[name]
			if !ok {
				return nil, fmt.Errorf("listener %s: no loaded module is named %q", l.Address, name)
			}
			pl.Mappers = append(pl.Mappers, mod)
		}
		listeners = append(listeners, pl)
	}
	srv, err := plog.New(plog.Options{
		Listeners: listeners,
		Defaults:  plogSettings(cfg.PlogDefaults),
		Processor: ms.pipeline,
		Outbox:    ob,
		// A permitted KILL command stops the daemon the way SIGTERM does.
		Stop:       func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) },
		Version:    readBuildInfo().Version,
		Logger:     log,
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	return []inputPart{srv}, nil
}

func plogSettings(s PlogSettings) plog.Settings {
	return plog.Settings{
		ReadBufferBytes: s.ReadBufferBytes,
		DefragMaxBytes:  s.DefragMaxBytes,
		DefragMaxAge:    s.DefragMaxAge,
		HoleDetection:   s.HoleDetection,
		AllowENVI:       s.AllowENVI,
		AllowKILL:       s.AllowKILL,
		MaxLineBytes:    s.MaxLineBytes,
		IdleTimeout:     s.IdleTimeout,
		MaxConnections:  s.MaxConnections,
		Workers:         s.Workers,
		QueueBytes:      s.QueueBytes,
		BatchMax:        s.BatchMax,
		BatchLinger:     s.BatchLinger,
	}
}

func runDump(ctx context.Context, cfg *Config, base zerolog.Logger, w io.Writer) error {
	return broker.Dump(ctx, brokerOptions(cfg, base, nil), w)
}

// offlineMappers loads the mappers for map and mapper test: no metrics.
func offlineMappers(ctx context.Context, cfg *Config, base zerolog.Logger) (*mapperSet, error) {
	return loadMappers(ctx, cfg, base, nil)
}
