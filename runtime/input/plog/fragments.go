package plog

import "fmt"

// Fragments is the one encoder of a message as datagrams, kept in the package
// beside the decoder it mirrors: the tests' Client sends with it, and the
// end-to-end flood test (cmd/tally-openstack-collector/e2e) builds its
// datagrams with it. Nothing in the daemon sends plog.

// Fragments encodes a message as version 0 fragment datagrams of at most
// fragSize payload bytes each (1..65535), with tags (\0-separated) on the last
// fragment.
func Fragments(id uint32, payload []byte, tags []string, fragSize int) ([][]byte, error) {
	if fragSize < 1 || fragSize > 65535 {
		return nil, fmt.Errorf("%w: fragment size %d", ErrInvalidOptions, fragSize)
	}
	count := (len(payload) + fragSize - 1) / fragSize
	if count == 0 {
		count = 1
	}
	if count > 65535 || len(payload) > maxMessageLen {
		return nil, fmt.Errorf("%w: %d bytes need more than 65535 fragments", ErrInvalidOptions, len(payload))
	}
	tagLen := len(tags)
	for _, t := range tags {
		tagLen += len(t)
	}
	if tagLen > 65535 {
		return nil, fmt.Errorf("%w: tags too long", ErrInvalidOptions)
	}
	var tagBytes []byte
	for i, t := range tags {
		if i > 0 {
			tagBytes = append(tagBytes, 0)
		}
		tagBytes = append(tagBytes, t...)
	}
	sum := murmur32(payload)
	out := make([][]byte, 0, count)
	for i := 0; i < count; i++ {
		start := i * fragSize
		end := min(start+fragSize, len(payload))
		h := header{count: count, index: i, fragSize: fragSize, id: id, length: len(payload), checksum: sum}
		var tb []byte
		if i == count-1 {
			tb = tagBytes
			h.tagLen = len(tb)
		}
		d := appendHeader(make([]byte, 0, headerLen+len(tb)+end-start), h)
		d = append(append(d, tb...), payload[start:end]...)
		out = append(out, d)
	}
	return out, nil
}
