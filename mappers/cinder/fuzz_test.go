package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// FuzzMap: no input makes the mapper panic, loop, or answer what the host
// or the event schema refuses (fixture.Fuzz).
func FuzzMap(f *testing.F) { fixture.Fuzz[*testing.T](f, "testdata", mapper) }
