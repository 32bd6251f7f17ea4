/* A tally mapper in C: nova's compute.instance.exists to an instance event.
 *
 * It shows that ABI v1 is language-neutral: the same exports, the same host
 * field lookups, and the event described to the host as a table of
 * tally_emit operations, which the host writes (the values read from the
 * input are passed by their offsets, the timestamps converted by the host).
 * The event is byte for byte the one of the Go SDK's sample mapping
 * (wasm-sdk/sample) for the same input.
 */
#include <stdlib.h>
#include <string.h>

#include "tally.h"

static const char manifest[] =
	"{\"name\":\"c-example\",\"version\":\"1.0.0\","
	"\"event_types\":[\"compute.instance.exists\"],\"releases\":[\"2024.1\"]}";

/* The input buffer handed out by tally_alloc, and the output buffer; both
 * are reused and grown, never freed. */
static char *in_buf;
static uint32_t in_cap;
static const char *in_ptr; /* input of the current call */
static uint32_t in_len;

/* The operations of the current call: one event needs 30 at most. */
#define MAX_OPS 64
static struct tally_op ops[MAX_OPS];
static uint32_t n_ops;

static const char not_compute[] = "{\"error\":\"not a compute.instance notification\"}";

TALLY_EXPORT("tally_abi_version_1") void tally_abi_version_1(void) {}

TALLY_EXPORT("tally_alloc") uint32_t tally_alloc(uint32_t size) {
	if (size > in_cap || in_buf == NULL) {
		uint32_t n = in_cap ? in_cap : 4096;
		while (n < size)
			n *= 2;
		char *p = realloc(in_buf, n);
		if (p == NULL)
			return 0;
		in_buf = p;
		in_cap = n;
	}
	return (uint32_t)(uintptr_t)in_buf;
}

TALLY_EXPORT("tally_manifest") uint64_t tally_manifest(void) {
	return tally_pack(manifest, sizeof manifest - 1);
}

static struct tally_value get(const char *path) {
	uint64_t r = tally_field(path, (uint32_t)strlen(path));
	struct tally_value v = {(enum tally_kind)(r >> 56), 0, 0, 0};
	uint32_t start = (uint32_t)(r >> 28) & 0xfffffff, len = (uint32_t)r & 0xfffffff;
	if (v.kind == TALLY_MISSING || start + len > in_len) {
		v.kind = TALLY_MISSING;
		return v;
	}
	v.ptr = in_ptr + start;
	v.len = len;
	v.start = start;
	return v;
}

static int exists(struct tally_value v) {
	return v.kind != TALLY_MISSING && v.kind != TALLY_NULL;
}

/* or_else returns v unless it is missing, null or an empty string. */
static struct tally_value or_else(struct tally_value v, struct tally_value w) {
	return (!exists(v) || (v.kind == TALLY_STRING && v.len == 0)) ? w : v;
}

/* op appends an operation; keys are literals. */
static void op(uint32_t code, const char *k, uint32_t a, uint32_t b) {
	if (n_ops == MAX_OPS)
		return; /* cannot happen: one event */
	struct tally_op *o = &ops[n_ops++];
	o->op = code;
	o->key_ptr = k ? (uint32_t)(uintptr_t)k : 0;
	o->key_len = k ? (uint32_t)strlen(k) : 0;
	o->a = a;
	o->b = b;
}

static void str(const char *k, const char *val) {
	op(TALLY_OP_TEXT, k, (uint32_t)(uintptr_t)val, (uint32_t)strlen(val));
}

/* str_value passes a string as it arrived (the host checks its escapes);
 * numbers and booleans are written as strings. */
static void str_value(const char *k, struct tally_value v) {
	if (v.kind != TALLY_STRING && v.kind != TALLY_NUMBER && v.kind != TALLY_TRUE &&
	    v.kind != TALLY_FALSE)
		return;
	op(TALLY_OP_STRING | TALLY_OP_FROM_INPUT, k, v.start, v.len);
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* is_number: exactly a JSON number (the host refuses anything else). */
static int is_number(const char *s, uint32_t n) {
	uint32_t i = 0, j;
	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0')
		i++;
	else if (i < n && s[i] >= '1' && s[i] <= '9')
		while (i < n && is_digit(s[i]))
			i++;
	else
		return 0;
	if (i < n && s[i] == '.') {
		j = ++i;
		while (i < n && is_digit(s[i]))
			i++;
		if (i == j)
			return 0;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		j = i;
		while (i < n && is_digit(s[i]))
			i++;
		if (i == j)
			return 0;
	}
	return i == n;
}

static void num_value(const char *k, struct tally_value v) {
	if ((v.kind == TALLY_NUMBER || v.kind == TALLY_STRING) && is_number(v.ptr, v.len))
		op(TALLY_OP_NUMBER | TALLY_OP_FROM_INPUT, k, v.start, v.len);
}

/* timestamp: the host converts what it recognises (oslo's
 * "YYYY-MM-DD HH:MM:SS[.f]", ISO 8601 with a zone) to RFC 3339 UTC, and
 * writes nothing for anything else. */
static void timestamp(const char *k, struct tally_value v) {
	if (v.kind == TALLY_STRING)
		op(TALLY_OP_TIME | TALLY_OP_FROM_INPUT, k, v.start, v.len);
}

static const char prefix[] = "compute.instance.";

TALLY_EXPORT("tally_map") uint64_t tally_map(uint32_t ptr, uint32_t len) {
	in_ptr = (const char *)(uintptr_t)ptr;
	in_len = len;
	n_ops = 0;

	struct tally_value et = get("event_type");
	uint32_t pl = sizeof prefix - 1;
	if (et.kind != TALLY_STRING || et.len < pl || memcmp(et.ptr, prefix, pl) != 0)
		return tally_pack(not_compute, sizeof not_compute - 1);

	op(TALLY_OP_EVENT, 0, 0, 0);
	str_value("event_id", get("message_id"));
	timestamp("timestamp", get("timestamp"));
	str_value("event_type", et);
	str("service", "nova");
	str("resource_type", "instance");
	str_value("resource_id", get("payload.instance_id"));
	str_value("project_id",
		  or_else(or_else(get("payload.tenant_id"), get("payload.project_id")), get("_context_project_id")));
	str_value("user_id", or_else(get("payload.user_id"), get("_context_user_id")));

	/* action: the verb after the prefix, without a .start/.end phase. */
	const char *verb = et.ptr + pl;
	uint32_t vl = et.len - pl;
	if (vl > 6 && memcmp(verb + vl - 6, ".start", 6) == 0)
		vl -= 6;
	else if (vl > 4 && memcmp(verb + vl - 4, ".end", 4) == 0)
		vl -= 4;
	op(TALLY_OP_STRING | TALLY_OP_FROM_INPUT, "action", et.start + pl, vl);

	op(TALLY_OP_OBJECT, "attributes", 0, 0);
	str_value("flavor_name", get("payload.instance_type"));
	str_value("flavor_id", or_else(get("payload.instance_flavor_id"), get("payload.instance_type_id")));
	num_value("vcpus", get("payload.vcpus"));
	num_value("memory_mb", get("payload.memory_mb"));
	num_value("root_gb", get("payload.root_gb"));
	num_value("ephemeral_gb", get("payload.ephemeral_gb"));
	num_value("disk_gb", get("payload.disk_gb"));
	str_value("state", get("payload.state"));
	str_value("image_ref", get("payload.image_ref"));
	str_value("availability_zone", get("payload.availability_zone"));
	str_value("host", get("payload.host"));
	timestamp("launched_at", get("payload.launched_at"));
	timestamp("terminated_at", get("payload.terminated_at"));
	timestamp("deleted_at", get("payload.deleted_at"));
	op(TALLY_OP_END, 0, 0, 0);
	op(TALLY_OP_END, 0, 0, 0);
	tally_emit(ops, n_ops); /* a refusal fails the call on the host's side */
	return 0;
}
