//go:build !wasip1

package sdk_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/sample"
)

func readFixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/nova_exists.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantNovaExists is the sample mapping of testdata/nova_exists.json.
const wantNovaExists = `{"events":[{"event_id":"4b884c03-756d-4c06-8b42-80b6def9d302","timestamp":"2012-05-08T16:03:44.122481Z","event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"3a513875-95c9-4012-a3e7-f90c678854e5","project_id":"7c150a59fe714e6f9263774af9688f0e","user_id":"1e3ce043029547f1a61c1996d1a531a2","action":"exists","attributes":{"flavor_name":"m1.tiny","flavor_id":"2","vcpus":1,"memory_mb":512,"root_gb":0,"ephemeral_gb":0,"disk_gb":0,"state":"active","image_ref":"UUID","availability_zone":"1e3ce043029547f1a61c1996d1a531a4","host":"compute-host-name","launched_at":"2012-05-07T23:01:27Z"}}]}`

func TestSampleNovaExists(t *testing.T) {
	got, err := sdk.MapJSON(sample.Map, readFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != wantNovaExists {
		t.Fatalf("got\n%s\nwant\n%s", got, wantNovaExists)
	}
	if !json.Valid(got) {
		t.Fatal("output is not JSON")
	}
}

// TestNoAllocationPerCall maps a real ~2 KB notification with reused state,
// as the guest does, and requires zero heap allocations per call (the
// indexing included: it is the host's work in production, and reuses its
// buffers too).
func TestNoAllocationPerCall(t *testing.T) {
	in := readFixture(t)
	var r sdk.TestRunner
	want := r.Run(sample.Map, in)
	want = bytes.Clone(want)
	allocs := testing.AllocsPerRun(200, func() {
		r.Run(sample.Map, in)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call, want 0", allocs)
	}
	if got := r.Run(sample.Map, in); !bytes.Equal(got, want) {
		t.Fatalf("reused state changed the output:\n%s\n%s", got, want)
	}
}

func BenchmarkNativeSample(b *testing.B) {
	in := readFixture(b)
	var r sdk.TestRunner
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	reportCPU(b, func() {
		for b.Loop() {
			r.Run(sample.Map, in)
		}
	})
}
