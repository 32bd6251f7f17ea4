// Command tally-openstack-collector reads OpenStack notifications from
// RabbitMQ, maps each to a Tally usage event with a WebAssembly mapper, keeps it
// in a durable outbox and delivers it to the Reporting API. Its command line
// is package cli; see `tally-openstack-collector --help` and docs/settings.md.
package main

import (
	"os"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/cli"
	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
)

// Set at build time: -ldflags "-X main.version=v1.2.3 -X main.commit=abc1234".
var (
	version = ""
	commit  = ""
)

func main() {
	daemon.ConfigureLogging()
	os.Exit(cli.Run(os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr, cli.Stamp{Version: version, Commit: commit}))
}
