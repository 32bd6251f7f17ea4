package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
)

// Set at build time: -ldflags "-X main.version=v1.2.3 -X main.commit=abc1234".
var (
	version = ""
	commit  = ""
)

// abiVersions are the guest ABI versions the host runs (docs/abi.md).
var abiVersions = []int{1}

// readBuildInfo prefers the -ldflags values and falls back to what the Go
// toolchain recorded.
func readBuildInfo() daemon.BuildInfo {
	b := daemon.BuildInfo{Version: version, Commit: commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && b.Commit == "" {
				b.Commit = s.Value
				if len(b.Commit) > 12 {
					b.Commit = b.Commit[:12]
				}
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func printVersion(w io.Writer, b daemon.BuildInfo) {
	fmt.Fprintf(w, "tally-openstack-collector %s\ncommit: %s\ngo: %s\nmapper ABI versions: ", b.Version, b.Commit, runtime.Version())
	for i, v := range abiVersions {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprint(w, v)
	}
	fmt.Fprintln(w)
}
