package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
)

// Stamp is what the build stamped into the binary: the Makefile sets the
// program's version and commit with -ldflags "-X main.version=v1.2.3
// -X main.commit=abc1234", and main passes them on. An empty field falls back
// to what the Go toolchain recorded.
type Stamp struct {
	Version, Commit string
}

// abiVersions are the guest ABI versions the host runs (docs/abi.md).
var abiVersions = []int{1}

// buildInfo prefers the stamped values and falls back to what the Go
// toolchain recorded.
func (s Stamp) buildInfo() daemon.BuildInfo {
	b := daemon.BuildInfo{Version: s.Version, Commit: s.Commit}
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
