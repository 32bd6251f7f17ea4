/* tally.h: ABI v1 of tally mappers for C guests (see docs/abi.md).
 *
 * A module exports tally_abi_version_1, tally_alloc, tally_manifest and
 * tally_map (use TALLY_EXPORT) and may import the two host functions below.
 * Build as a WASI reactor: clang --target=wasm32-wasi -mexec-model=reactor.
 */
#ifndef TALLY_H
#define TALLY_H

#include <stddef.h>
#include <stdint.h>

#define TALLY_EXPORT(name) __attribute__((export_name(name)))
#define TALLY_IMPORT(name) __attribute__((import_module("tally"), import_name(name)))

/* Kinds answered by tally_field (bits 63..56 of its result). */
enum tally_kind {
	TALLY_MISSING = 0,
	TALLY_NULL = 1,
	TALLY_STRING = 2,
	TALLY_NUMBER = 3,
	TALLY_TRUE = 4,
	TALLY_FALSE = 5,
	TALLY_OBJECT = 6,
	TALLY_ARRAY = 7,
};

/* Looks path up in the current input; valid only during tally_map.
 * Result: kind << 56 | start << 28 | length, start relative to the input
 * pointer given to tally_map; for a string the span is between the quotes,
 * still JSON-escaped. */
TALLY_IMPORT("field") uint64_t tally_field(const char *path, uint32_t path_len);

/* Writes a message to the collector's log (0 debug, 1 info, 2 warn, 3 error). */
TALLY_IMPORT("log") void tally_log(int32_t level, const char *msg, uint32_t len);

/* A looked-up value: its kind and its bytes inside the input. */
struct tally_value {
	enum tally_kind kind;
	const char *ptr;
	uint32_t len;
};

/* tally_pack returns (ptr << 32) | len, the result of tally_manifest and tally_map. */
static inline uint64_t tally_pack(const void *ptr, uint32_t len) {
	return ((uint64_t)(uintptr_t)ptr << 32) | len;
}

#endif
