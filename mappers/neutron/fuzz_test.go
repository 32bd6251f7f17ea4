package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// FuzzMap: no input makes the mapper panic, loop, or answer what the host
// or the event schema refuses (fixture.Fuzz). A bulk notification yields up
// to maxBulk events.
func FuzzMap(f *testing.F) {
	m := mapper
	m.MaxEvents = maxBulk
	fixture.Fuzz[*testing.T](f, "testdata", m)
}
