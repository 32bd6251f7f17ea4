package settings

import (
	"errors"
	"strings"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
)

// checkTransportURL validates TRANSPORT_URL with the broker's own parser, so a
// URL the settings accept is one the broker can use (docs/broker.md, "The
// transport URL"). Its errors never quote the password.
func checkTransportURL(raw string) error {
	if _, err := broker.ParseTransportURL(raw); err != nil {
		// The setting's name already says what is invalid.
		return errors.New(strings.TrimPrefix(err.Error(), broker.ErrTransportURL.Error()+": "))
	}
	return nil
}
