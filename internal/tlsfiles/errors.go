package tlsfiles

import "errors"

// ErrFiles: a file is missing, unreadable, too large or does not hold what
// it should, or a certificate is set without its key.
var ErrFiles = errors.New("tls files")
