//go:build !wasip1

package sdk

import "testing"

// TestStrValueRepairsRawInput covers input spans a validating host would not
// hand out (the collector's indexer rejects such documents), as another host
// might: control bytes and invalid UTF-8 are re-escaped, not copied.
func TestStrValueRepairsRawInput(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"ok \\\"q\\\" \\u00e9", `"ok \"q\" \u00e9"`},
		{"bad \xff byte", `"bad ` + "\uFFFD" + ` byte"`},
		{"tab\there", `"tab\there"`},
		{"é\x01\\n", `"é\u0001\n"`},
	} {
		var o Output
		o.reset()
		o.Event().StrValue("k", Value{kind: String, raw: []byte(tc.raw)})
		want := `{"events":[{"k":` + tc.want + `}]}`
		if got := string(o.finish()); got != want {
			t.Errorf("raw %q:\ngot  %s\nwant %s", tc.raw, got, want)
		}
	}
}
