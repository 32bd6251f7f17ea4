package daemon

import "errors"

// errNotStarted answers a readiness check whose component is not running yet.
var errNotStarted = errors.New("not started")
