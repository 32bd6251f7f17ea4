//go:build !wasip1

package sdk_test

import (
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func TestTimestamp(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// oslo
		{"2024-05-01 12:00:00.123456", "2024-05-01T12:00:00.123456Z"},
		{"2024-05-01 12:00:00", "2024-05-01T12:00:00Z"},
		{"2012-05-08 16:03:44.122481", "2012-05-08T16:03:44.122481Z"},
		// ISO 8601
		{"2024-05-01T12:00:00", "2024-05-01T12:00:00Z"},
		{"2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"},
		{"2024-05-01T12:00:00.5Z", "2024-05-01T12:00:00.5Z"},
		{"2024-05-01T12:00:00.123456789Z", "2024-05-01T12:00:00.123456789Z"},
		{"2024-05-01T12:00:00.000000", "2024-05-01T12:00:00.000000Z"},
		{"2024-05-01t12:00:00z", "2024-05-01T12:00:00Z"},
		{"2024-05-01T12:00:00+00:00", "2024-05-01T12:00:00Z"},
		{"2024-05-01T14:30:00+02:30", "2024-05-01T12:00:00Z"},
		{"2024-05-01T14:30:00.250+0230", "2024-05-01T12:00:00.250Z"},
		{"2024-05-01T07:00:00-05", "2024-05-01T12:00:00Z"},
		{"2024-05-01 12:00:00.123456+00:00", "2024-05-01T12:00:00.123456Z"},
		// offsets crossing days, months, years, leap days
		{"2024-01-01T01:00:00+02:00", "2023-12-31T23:00:00Z"},
		{"2023-12-31T22:00:00-03:00", "2024-01-01T01:00:00Z"},
		{"2024-03-01T00:30:00+01:00", "2024-02-29T23:30:00Z"},
		{"2023-03-01T00:30:00+01:00", "2023-02-28T23:30:00Z"},
		{"2024-02-28T23:00:00-02:00", "2024-02-29T01:00:00Z"},
		{"2000-02-29T12:00:00Z", "2000-02-29T12:00:00Z"},
		// unparsable: omitted
		{"", ""},
		{"2024-05-01", ""},
		{"2024-05-01 12:00", ""},
		{"2024/05/01 12:00:00", ""},
		{"2024-13-01 12:00:00", ""},
		{"2024-02-30 12:00:00", ""},
		{"2023-02-29 12:00:00", ""},
		{"1900-02-29 12:00:00", ""},
		{"2024-05-01 24:00:00", ""},
		{"2024-05-01 12:60:00", ""},
		{"2024-05-01 12:00:60", ""},
		{"2024-05-01X12:00:00", ""},
		{"2024-05-01 12:00:00.", ""},
		{"2024-05-01 12:00:00.1234567890", ""},
		{"2024-05-01 12:00:00 UTC", ""},
		{"2024-05-01T12:00:00+2:00", ""},
		{"2024-05-01T12:00:00+24:00", ""},
		{"2024-05-01T12:00:00Z ", ""},
		{"0000-01-01T00:00:00+01:00", ""},
		{"2024-05-01T12:00:00\\u005a", ""},
		{"20240501T120000Z", ""},
	} {
		got, ok := sdk.AppendTimestamp(nil, []byte(tc.in))
		if string(got) != tc.want || ok != (tc.want != "") {
			t.Errorf("timestamp(%q) = %q %v, want %q", tc.in, got, ok, tc.want)
		}
	}
}

// TestTimestampFastPath: wherever the fast path for oslo's zone-less shape
// answers, it answers exactly what the general path does. Inputs are
// variations of a valid timestamp, one byte changed at a time, and every
// length of fraction.
func TestTimestampFastPath(t *testing.T) {
	bases := []string{
		"2024-05-01 12:00:00", "2024-02-29 23:59:59.999999", "2023-02-28T00:00:00.1",
		"2000-02-29 12:00:00", "1900-02-28 12:00:00", "0000-01-01 00:00:00.123456789",
		"2024-04-30 19:09:59.5", "2024-12-31 20:30:40.123",
	}
	var inputs []string
	for _, b := range bases {
		inputs = append(inputs, b)
		for i := 0; i < len(b); i++ {
			for _, c := range []byte("0123456789 T:-.Zx/") {
				m := []byte(b)
				m[i] = c
				inputs = append(inputs, string(m))
			}
		}
		for n := 0; n <= 11; n++ {
			inputs = append(inputs, b[:19]+"."+"1234567890a"[:n], b+"Z", b[:18])
		}
	}
	fast := 0
	for _, in := range inputs {
		got, ok := sdk.AppendNaive(nil, []byte(in))
		if !ok {
			continue
		}
		fast++
		want, wok := sdk.AppendGeneral(nil, []byte(in))
		if !wok || string(got) != string(want) {
			t.Errorf("%q: fast path %q, general %q %v", in, got, want, wok)
		}
	}
	if fast < len(bases) {
		t.Fatalf("fast path taken for %d inputs only", fast)
	}
}

func TestManifestDocument(t *testing.T) {
	got := string(sdk.AppendManifest(nil, sdk.Manifest{
		Name: "nova", Version: "1.2.0",
		EventTypes: []string{"compute.instance.*", "!compute.instance.*.start"},
	}))
	want := `{"name":"nova","version":"1.2.0","event_types":["compute.instance.*","!compute.instance.*.start"],"releases":[]}`
	if got != want {
		t.Fatalf("manifest %s, want %s", got, want)
	}
}
