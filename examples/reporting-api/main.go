// Command reporting-api runs the reference Reporting API that the
// collector's sender talks to (see docs/reporting-api.md).
//
//	reporting-api --addr 127.0.0.1:8080 --token secret --data-dir /var/tmp/reporting-api
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/examples/reporting-api/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reporting-api:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := pflag.NewFlagSet("reporting-api", pflag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	token := fs.String("token", "", "bearer token required on every route but /healthz (default: $REPORTING_TOKEN; empty accepts any request)")
	dataDir := fs.String("data-dir", "", "directory of the store; empty keeps everything in memory")
	maxBody := fs.Int64("max-body-bytes", server.DefaultMaxBodyBytes, "POST body limit; larger bodies get 413")
	cert := fs.String("tls-cert", "", "TLS certificate file (PEM); serves https with --tls-key")
	key := fs.String("tls-key", "", "TLS key file (PEM)")
	clientCA := fs.String("tls-client-ca", "", "CA file (PEM): require a client certificate signed by it (with --tls-cert)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if (*cert == "") != (*key == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if *clientCA != "" && *cert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if *token == "" {
		*token = os.Getenv("REPORTING_TOKEN")
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("component", "reporting-api").Logger()
	if *token == "" {
		log.Warn().Msg("no token set: every request is accepted")
	}
	srv, err := server.New(server.Options{Token: *token, DataDir: *dataDir, MaxBodyBytes: *maxBody, Logger: log})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }() // the process ends after it
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	scheme := "http"
	if *cert != "" {
		scheme = "https"
	}
	log.Info().Str("url", scheme+"://"+ln.Addr().String()).Str("client_ca", *clientCA).Str("data_dir", *dataDir).Int64("max_body_bytes", *maxBody).Msg("listening")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Serve(ctx, ln, server.TLS{CertFile: *cert, KeyFile: *key, ClientCAFile: *clientCA}); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
