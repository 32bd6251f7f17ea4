package metrics

import "errors"

// ErrDuplicate marks an error of Register for a metric already registered.
var ErrDuplicate = errors.New("metric already registered")
