package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// What the daemon needs of each part. The parts are built in wire.go; these
// small interfaces keep the lifecycle independent of their concrete types.
type (
	// outboxPart is the durable store between an acknowledgement and delivery.
	outboxPart interface {
		Healthy() error
		Depth() int64
		Close() error
	}
	// inputPart is an input: the AMQP consumer or a plog listener. Run returns
	// once ctx is cancelled and every message taken in is committed and
	// acknowledged (for AMQP: basic.cancel, then commit, then ack).
	inputPart interface {
		Run(ctx context.Context) error
	}
	// readyPart answers readiness.
	readyPart interface {
		Ready() error
	}
	// senderPart drains the outbox to the Reporting API.
	senderPart interface {
		Run(ctx context.Context) error
		Flush(ctx context.Context) error
		Ready() error
	}
	// closerPart is released after every input stopped (the mapper engine).
	closerPart interface {
		Close(ctx context.Context) error
	}
)

// parts are the running pieces of a daemon, built in start-up order.
type parts struct {
	outbox   outboxPart
	mappers  closerPart
	consumer inputPart // also a readyPart
	inputs   []inputPart
	sender   senderPart
}

// daemon owns the lifecycle: start in order (outbox, mappers, HTTP, broker and
// sender and plog listeners), stop in reverse on the first signal, exit at once
// on the second.
type daemon struct {
	cfg     *Config
	base    zerolog.Logger
	log     zerolog.Logger
	reg     *prometheus.Registry
	metrics *daemonMetrics
	build   buildInfo

	// signals delivers SIGTERM/SIGINT; exit ends the process on the second one.
	signals <-chan os.Signal
	exit    func(code int)

	stopping atomic.Bool
	notify   *notifier
	p        parts
	probes   *probes
	ln       net.Listener
	srv      *http.Server
	pprofSrv *http.Server
}

func runDaemon(cfg *Config, base zerolog.Logger, b buildInfo) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	reg, err := newRegistry(b)
	if err != nil {
		return err
	}
	m, err := newDaemonMetrics(reg)
	if err != nil {
		return err
	}
	d := &daemon{
		cfg: cfg, base: base, log: component(base, "main"), reg: reg,
		metrics: m, build: b, signals: sig, exit: os.Exit,
		notify: newNotifier(component(base, "main")),
	}
	return d.run(context.Background())
}

func (d *daemon) run(ctx context.Context) error {
	d.log.Info().Str("version", d.build.Version).Str("commit", d.build.Commit).
		Interface("settings", d.cfg.EffectiveMap()).Msg("starting")

	// 1. The outbox: nothing may be consumed without it.
	ob, err := openOutbox(d.cfg, component(d.base, "outbox"), d.reg)
	if err != nil {
		return fmt.Errorf("open outbox %s: %w", d.cfg.BufferPath, err)
	}
	d.p.outbox = ob
	d.log.Info().Int64("depth", ob.Depth()).Str("path", d.cfg.BufferPath).Msg("outbox open")

	// 2. The mappers: engine, built-in modules, drop-ins, and the decisions
	// of the last run kept in the outbox; the control link shares promote
	// and abort decisions with the other replicas (nil when turned off).
	link, err := newControl(d.cfg, d.base, d.reg, ob)
	if err != nil {
		d.closeOutbox()
		return fmt.Errorf("control link: %w", err)
	}
	proc, err := loadMappers(ctx, d.cfg, d.base, d.reg, ob, link,
		runawayExit(component(d.base, "runtime"), d.cfg.MapperCallTimeout, d.exit))
	if err != nil {
		d.closeOutbox()
		return fmt.Errorf("load mappers: %w", err)
	}
	d.p.mappers = proc

	// 3. HTTP: probes answer "not ready" until the broker session is up.
	d.probes = &probes{
		outbox: ob.Healthy,
		ready: map[string]func() error{
			"stopping":    d.stoppingCheck,
			"broker":      nil,
			"sender":      nil,
			"deadletters": ob.DeadLettersFull,
		},
		live: newLivenessTracker(d.cfg.UnhealthyThreshold, nil),
		log:  component(d.base, "probes"),
	}
	// The heartbeat, to the end of run: the watchdog process kills the
	// daemon when it stops (watchdog.go), and it carries systemd's pings.
	hbCtx, stopHeartbeat := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		heartbeat(hbCtx, component(d.base, "watchdog"), d.cfg.WatchdogTimeout, d.cfg.LogFormat, d.notify, d.probes.live.check)
	}()
	defer func() {
		stopHeartbeat()
		<-hbDone
	}()
	if err := d.listen(proc.controlHandler(ob, component(d.base, "catalog"))); err != nil {
		d.closeMappers(ctx)
		d.closeOutbox()
		return err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go d.probes.sample(sampleCtx, time.Second)
	go d.sampleReady(sampleCtx)
	// Hot reload of the drop-in directory, for the daemon's whole life.
	reloadDone := make(chan struct{})
	go func() {
		defer close(reloadDone)
		if err := proc.Run(sampleCtx); err != nil {
			d.log.Error().Err(err).Msg("mapper directory watch stopped; restart to pick up drop-in changes")
		}
	}()

	// 4. The local channel (its socket bound now, so a path in use stops
	// start-up), the broker consumer, the sender and the plog listeners. The
	// channel comes before the consumer, which offers its tap what it
	// commits; the consumer before the sender, which holds back while it
	// drains a backlog. The broker package tags its logger itself.
	ch, err := newChannel(d.cfg, component(d.base, "channel"), d.reg, ob, proc)
	if err != nil {
		d.shutdownHTTP()
		d.closeMappers(ctx)
		d.closeOutbox()
		return fmt.Errorf("channel: %w", err)
	}
	cons, err := newConsumer(d.cfg, d.base, d.reg, ob, proc, ch)
	if err != nil {
		if ch != nil {
			_ = ch.Close(ctx)
		}
		d.shutdownHTTP()
		d.closeMappers(ctx)
		d.closeOutbox()
		return fmt.Errorf("broker: %w", err)
	}
	d.p.consumer = cons
	if r, ok := cons.(readyPart); ok {
		d.probes.setReady("broker", r.Ready)
	}
	closeChannel := func() {
		if ch != nil {
			_ = ch.Close(ctx)
		}
	}
	snd, err := newSender(d.cfg, component(d.base, "sender"), d.reg, ob, cons)
	if err != nil {
		closeChannel()
		d.shutdownHTTP()
		d.closeMappers(ctx)
		d.closeOutbox()
		return fmt.Errorf("sender: %w", err)
	}
	d.p.sender = snd
	d.probes.setReady("sender", snd.Ready)
	inputs, err := newPlogInputs(d.cfg, component(d.base, "plog"), d.reg, ob, proc)
	if err != nil {
		closeChannel()
		d.shutdownHTTP()
		d.closeMappers(ctx)
		d.closeOutbox()
		return fmt.Errorf("plog: %w", err)
	}
	d.p.inputs = inputs

	// The control link, for the daemon's whole life: decisions taken on
	// other replicas while this one was down are applied now.
	controlDone := make(chan struct{})
	go func() {
		defer close(controlDone)
		if link != nil {
			_ = link.Run(sampleCtx) // returns nil when sampleCtx ends
		}
	}()

	sendCtx, stopSender := context.WithCancel(ctx)
	defer stopSender()
	inCtx, stopInputs := context.WithCancel(ctx)
	defer stopInputs()

	type result struct {
		name string
		err  error
	}
	done := make(chan result, 3+len(inputs))
	var senderDone = make(chan struct{})
	go func() {
		defer close(senderDone)
		if err := snd.Run(sendCtx); err != nil && !errors.Is(err, context.Canceled) {
			done <- result{"sender", err}
		}
	}()
	var inWG sync.WaitGroup
	start := func(name string, in inputPart) {
		inWG.Add(1)
		go func() {
			defer inWG.Done()
			err := in.Run(inCtx)
			if inCtx.Err() == nil {
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				done <- result{name, err}
			}
		}()
	}
	start("broker", cons)
	for i, in := range inputs {
		start(fmt.Sprintf("plog[%d] %s", i, d.cfg.Plog[i].Address), in)
	}
	if ch != nil {
		start("channel "+d.cfg.ChannelSocket, ch)
	}
	d.log.Info().Str("http_addr", d.ln.Addr().String()).Msg("started")
	// systemd (Type=notify): READY=1 once the broker session consumes (the
	// outbox is open since step 1); WATCHDOG=1 while /livez would pass, sent
	// by the heartbeat (started with the probes).
	go d.notify.ready(sampleCtx, func() error {
		if err := ob.Healthy(); err != nil {
			return err
		}
		if r, ok := cons.(readyPart); ok {
			return r.Ready()
		}
		return nil
	})

	// Run until a signal or a part that failed for good.
	var runErr error
	select {
	case s := <-d.signals:
		// Not ready from the first signal on: a load balancer or Kubernetes
		// stops sending before the inputs are even cancelled.
		d.stopping.Store(true)
		d.notify.stopping()
		d.log.Info().Str("signal", s.String()).Dur("budget", d.cfg.StopTimeout).
			Msg("stopping: no new deliveries; finishing in-flight ones, then flushing the outbox (a second signal exits at once)")
	case r := <-done:
		runErr = fmt.Errorf("%s: %w", r.name, r.err)
		d.log.Error().Err(runErr).Msg("stopping after a failure")
		d.stopping.Store(true)
		d.notify.stopping()
	}
	d.metrics.stopping.Set(1)
	go func() {
		if s, ok := <-d.signals; ok {
			d.log.Warn().Str("signal", s.String()).Msg("second signal: exiting at once")
			d.exit(1)
		}
	}()

	deadline := time.Now().Add(d.cfg.StopTimeout)
	stopCtx, cancelStop := context.WithDeadline(context.Background(), deadline)
	defer cancelStop()

	// Stop the inputs: basic.cancel, in-flight deliveries committed then acked.
	stopInputs()
	inputsBudget := d.cfg.StopTimeout - d.cfg.FlushTimeout
	if !waitGroupFor(&inWG, inputsBudget) {
		d.log.Error().Dur("waited", inputsBudget).Msg("inputs did not stop in time; unacknowledged deliveries return to the queue")
		if runErr == nil {
			runErr = errors.New("inputs did not stop within the stop budget")
		}
	} else {
		d.log.Info().Msg("inputs stopped; every delivery taken was committed and acknowledged")
	}

	// Let the sender flush what the outbox holds, for a bounded time.
	stopSender()
	<-senderDone
	flushCtx, cancelFlush := context.WithTimeout(stopCtx, d.cfg.FlushTimeout)
	if err := snd.Flush(flushCtx); err != nil {
		d.log.Warn().Err(err).Int64("left_in_outbox", ob.Depth()).Msg("flush incomplete; the rest is sent after the next start")
	} else {
		d.log.Info().Int64("left_in_outbox", ob.Depth()).Msg("flushed")
	}
	cancelFlush()

	stopSampling()
	<-reloadDone
	<-controlDone
	d.shutdownHTTP()
	d.closeMappers(stopCtx)
	if err := d.closeOutbox(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		d.log.Info().Msg("stopped")
	}
	return runErr
}

func (d *daemon) stoppingCheck() error {
	if d.stopping.Load() {
		return errors.New("stopping")
	}
	return nil
}

// sampleReady keeps tally_collector_ready current between probes.
func (d *daemon) sampleReady(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if _, err := d.probes.readyErr(); err == nil {
			d.metrics.ready.Set(1)
		} else {
			d.metrics.ready.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listen starts the HTTP server on HTTP_ADDR and, with DEBUG_PPROF, the
// profiler's on DEBUG_PPROF_ADDR (loopback only, checked with the settings).
// Both put every route but the probes and the metrics behind one controlAuth.
func (d *daemon) listen(control http.Handler) error {
	tok, err := controlToken(d.cfg, component(d.base, "http"))
	if err != nil {
		return fmt.Errorf("control token: %w", err)
	}
	loopback := isLoopbackAddr(d.cfg.HTTPAddr)
	guard, err := newControlAuth(tok, loopback, component(d.base, "http"), d.reg)
	if err != nil {
		return err
	}
	switch {
	case tok == nil && loopback:
		d.log.Warn().Str("http_addr", d.cfg.HTTPAddr).
			Msg("no control token: the mapper, dead-letter and replay routes are open to every process of this host; set TALLY_OSC_CONTROL_TOKEN_FILE where other users or containers share it")
	case tok == nil:
		d.log.Warn().Str("http_addr", d.cfg.HTTPAddr).
			Msg("no control token and a listener beyond loopback: only /livez, /readyz and /metrics answer; set TALLY_OSC_CONTROL_TOKEN_FILE to use the control commands")
	}
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", d.cfg.HTTPAddr, err)
	}
	d.ln = ln
	d.srv = newHTTPServer(newMux(d.probes, d.reg, guard, control), 60*time.Second)
	d.serve(d.srv, ln)
	if d.cfg.DebugPprof {
		pln, err := net.Listen("tcp", d.cfg.DebugPprofAddr)
		if err != nil {
			d.shutdownHTTP()
			return fmt.Errorf("listen on %s (DEBUG_PPROF_ADDR): %w", d.cfg.DebugPprofAddr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		d.pprofSrv = newHTTPServer(guard.wrap(mux), 90*time.Second) // a CPU profile takes 30 s
		d.serve(d.pprofSrv, pln)
		d.log.Info().Str("addr", pln.Addr().String()).Msg("profiler listening")
	}
	return nil
}

func newHTTPServer(h http.Handler, write time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      write,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

func (d *daemon) serve(srv *http.Server, ln net.Listener) {
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error().Err(err).Msg("http server")
		}
	}()
}

func (d *daemon) shutdownHTTP() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range []*http.Server{d.srv, d.pprofSrv} {
		if srv != nil {
			_ = srv.Shutdown(ctx)
		}
	}
}

func (d *daemon) closeMappers(ctx context.Context) {
	if d.p.mappers == nil {
		return
	}
	if err := d.p.mappers.Close(ctx); err != nil {
		d.log.Warn().Err(err).Msg("close mappers")
	}
}

func (d *daemon) closeOutbox() error {
	if d.p.outbox == nil {
		return nil
	}
	if err := d.p.outbox.Close(); err != nil {
		d.log.Error().Err(err).Msg("close outbox")
		return fmt.Errorf("close outbox: %w", err)
	}
	d.log.Info().Msg("outbox closed")
	return nil
}

func waitGroupFor(wg *sync.WaitGroup, d time.Duration) bool {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *probes) setReady(name string, f func() error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[name] = f
}

func sortedKeys(m map[string]func() error) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
