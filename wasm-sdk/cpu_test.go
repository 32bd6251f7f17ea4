//go:build !wasip1

package sdk_test

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// reportCPU runs loop and reports its CPU time per b.N.
func reportCPU(b *testing.B, loop func()) {
	start := testkit.CPUTime()
	loop()
	testkit.ReportCPU(b, start)
}
