package tokenfile

import "errors"

var (
	// ErrTooLarge: the file holds more than MaxSize bytes.
	ErrTooLarge = errors.New("token file larger than 4 KiB")
	// ErrMalformed: the file is empty or holds more than one line.
	ErrMalformed = errors.New("token file is empty or holds more than one line")
)
