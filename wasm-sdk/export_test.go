//go:build !wasip1

package sdk

// Hooks for the external tests.

// TestRunner runs MapFuncs natively with reused state, as the guest does.
type TestRunner struct{ n nativeRunner }

// Run maps input with f; the result is valid until the next Run.
func (t *TestRunner) Run(f MapFunc, input []byte) []byte { return t.n.run(f, input) }

// AppendTimestamp and AppendManifest expose the encoders.
var (
	AppendTimestamp = appendTimestamp
	AppendManifest  = appendManifest

	// AppendNaive and AppendGeneral are the two paths of AppendTimestamp.
	AppendNaive   = appendNaive
	AppendGeneral = appendGeneral
)
