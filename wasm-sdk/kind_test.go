package sdk_test

import (
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestKindsAreTheIndexers: the guest's kinds and the host's are the same
// numbers, so a kind the host answers reads as the same kind in a guest.
func TestKindsAreTheIndexers(t *testing.T) {
	for _, c := range []struct {
		guest sdk.Kind
		host  jsonindex.Kind
	}{
		{sdk.Missing, jsonindex.Missing}, {sdk.Null, jsonindex.Null}, {sdk.String, jsonindex.String},
		{sdk.Number, jsonindex.Number}, {sdk.True, jsonindex.True}, {sdk.False, jsonindex.False},
		{sdk.Object, jsonindex.Object}, {sdk.Array, jsonindex.Array},
	} {
		if uint8(c.guest) != uint8(c.host) {
			t.Errorf("sdk kind %d, jsonindex kind %d (%s)", c.guest, c.host, c.host)
		}
	}
}
