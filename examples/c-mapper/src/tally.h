/* tally.h: ABI v1 of tally mappers for C guests (see docs/abi.md).
 *
 * A module exports tally_abi_version_1, tally_alloc, tally_manifest and
 * tally_map (use TALLY_EXPORT) and may import the host functions below.
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

/* Operations of tally_emit (docs/abi.md, "emit"): the host writes the
 * events they describe. */
enum tally_op_code {
	TALLY_OP_EVENT = 1,  /* begin an event; no key, no value */
	TALLY_OP_OBJECT = 2, /* begin an object member */
	TALLY_OP_END = 3,    /* close the innermost object, or the event */
	TALLY_OP_TEXT = 4,   /* string member: UTF-8 text at (a, b), escaped by the host */
	TALLY_OP_STRING = 5, /* string member: a JSON string's content at (a, b) */
	TALLY_OP_NUMBER = 6, /* number member: a JSON number's text at (a, b) */
	TALLY_OP_INT = 7,    /* number member: the int64 a | b << 32 */
	TALLY_OP_BOOL = 8,   /* boolean member: a is 0 or 1 */
	TALLY_OP_TIME = 9,   /* timestamp member at (a, b), converted by the host; omitted if none */
};

/* With a value read from the input: a is its offset from the input pointer
 * given to tally_map (what tally_field answers), not an address. */
#define TALLY_OP_FROM_INPUT 0x100u

struct tally_op {
	uint32_t op; /* a tally_op_code, maybe with TALLY_OP_FROM_INPUT */
	uint32_t key_ptr, key_len;
	uint32_t a, b;
};

/* Hands the operations of this tally_map call to the host, which writes the
 * events; at most once per call, after which tally_map returns 0. Answers 0,
 * or -1 when the host refused the table (the call then fails). */
TALLY_IMPORT("emit") int32_t tally_emit(const struct tally_op *ops, uint32_t count);

/* A looked-up value: its kind and its bytes inside the input. */
struct tally_value {
	enum tally_kind kind;
	const char *ptr;
	uint32_t len;
	uint32_t start; /* offset in the input */
};

/* tally_pack returns (ptr << 32) | len, the result of tally_manifest and tally_map. */
static inline uint64_t tally_pack(const void *ptr, uint32_t len) {
	return ((uint64_t)(uintptr_t)ptr << 32) | len;
}

#endif
