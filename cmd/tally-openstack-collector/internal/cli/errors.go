package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// errMapperNewUsage marks an error of mapper new's arguments (exit 2).
var errMapperNewUsage = errors.New("usage")

// controlError adds to a control route's error the setting to check when the
// daemon refused the token: the one the command read its token from, as the
// user gave it (--flag or variable), or both when it sent none.
func controlError(err error, fs *pflag.FlagSet, environ []string) error {
	if !errors.Is(err, catalog.ErrUnauthorized) {
		return err
	}
	cfg, lerr := settings.Load(fs, environ, settings.ModeOffline)
	switch {
	case lerr == nil && cfg.ControlTokenFile != "":
		return fmt.Errorf("%w; check %s (%s): it must hold the daemon's control token", err, cfg.NameOf("control_token_file"), cfg.ControlTokenFile)
	case lerr == nil && cfg.ControlToken != "":
		return fmt.Errorf("%w; check %s: it must be the daemon's control token", err, cfg.NameOf("control_token"))
	}
	return fmt.Errorf("%w; no control token was sent: set %sCONTROL_TOKEN_FILE (or %sCONTROL_TOKEN) to the daemon's", err, settings.EnvPrefix, settings.EnvPrefix)
}
