package contract

import (
	"strings"
	"testing"
)

func TestCheckQuantity(t *testing.T) {
	for raw, want := range map[string]Violation{
		"0": OK, "4": OK, "1.5": OK, "1e3": OK, "65536": OK, "65537": OutOfRange,
		"-1": Negative, "-0": Negative, "-1e999": Negative, "1e999": NotFinite, "1e18": OutOfRange,
	} {
		if got := CheckQuantity([]byte(raw), 65536); got != want {
			t.Errorf("%s: %v, want %v", raw, got, want)
		}
	}
}

func TestCheckText(t *testing.T) {
	for s, want := range map[string]Violation{
		"p1": OK, "café": OK, "a b": OK, "": Blank, " ": Blank, "\u00a0\u3000": Blank,
		"a\x00": NotPrintable, "a\tb": NotPrintable, "a\u0085": NotPrintable, "a\x7f": NotPrintable,
		"\xff": NotPrintable, strings.Repeat("x", 256): TooLong, strings.Repeat("x", 255): OK,
	} {
		if got := CheckText([]byte(s), MaxIDBytes); got != want {
			t.Errorf("%q: %v, want %v", s, got, want)
		}
	}
	if CheckAttributeText([]byte("a\tb\nc\r")) != OK || CheckAttributeText([]byte("a\x00")) != NotPrintable ||
		CheckAttributeText([]byte(" \n")) != Blank {
		t.Error("an attribute's tabs and line breaks")
	}
}

func TestCheckTimestamp(t *testing.T) {
	for s, want := range map[string]Violation{
		"2024-05-01T12:00:00Z": OK, "2024-05-01T12:00:00.123456789Z": OK, "2024-02-29T23:59:59Z": OK,
		"2023-02-29T00:00:00Z": BadTimestamp, "2024-05-01T12:00:00.1234567890Z": BadTimestamp,
		"2024-05-01 12:00:00Z": BadTimestamp, "2024-05-01T12:00:00+00:00": BadTimestamp,
		"2024-05-01T24:00:00Z": BadTimestamp, "2024-05-01T12:00:00.Z": BadTimestamp, "yesterday": BadTimestamp,
	} {
		if got := CheckTimestamp([]byte(s)); got != want {
			t.Errorf("%q: %v, want %v", s, got, want)
		}
	}
}

// The table and the violation names are what the schema and the metric say.
func TestTable(t *testing.T) {
	if m, ok := MaxOf("vcpus"); !ok || m != 65536 {
		t.Errorf("vcpus: %v %v", m, ok)
	}
	if m, ok := MaxOf("seats"); ok || m != MaxQuantity {
		t.Errorf("seats: %v %v", m, ok)
	}
	if !IsTimeAttribute("launched_at") || IsTimeAttribute("vcpus") {
		t.Error("IsTimeAttribute")
	}
	seen := map[string]bool{}
	for v := OK; int(v) < NumViolations; v++ {
		if seen[v.String()] || v.String() == "unknown" {
			t.Errorf("violation %d named %q twice or not at all", v, v)
		}
		seen[v.String()] = true
	}
}
