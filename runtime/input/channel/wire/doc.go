// Package wire is the frame codec of the local message channel, shared by the
// daemon's endpoint (package channel) and the client (package client). It
// depends on the standard library only, so a program that imports the client
// pulls in nothing of the daemon.
//
// Every frame is
//
//	length  uint32  big-endian: the bytes that follow (version, type, payload)
//	version uint8   Version
//	type    uint8   a FrameType
//	payload length-2 bytes, laid out per frame type (docs/channel.md)
//
// Integers are big-endian; a string or byte field is its length (uint8,
// uint16 or uint32 as the layout says) followed by its bytes. A reader
// ignores payload bytes past the fields it knows, so a later revision may
// append fields without a new version; anything else changes Version.
//
// Append* functions encode a frame onto a byte slice (no allocation once the
// slice has grown); Reader reads frames with a bound on their length, and
// Parse* functions decode a payload. Decoded byte fields alias the payload,
// which is valid until the next Reader.Next.
package wire
