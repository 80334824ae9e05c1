/*
 * kiln_json.h — jansson's allocations go through kiln, so that a failed one
 * is never silent, and so that what requests parse is counted in the request
 * memory account.
 *
 * Failures: jansson itself sometimes carries on after a failed allocation (its
 * lexer drops the byte it could not store, json_copy/json_deep_copy skip the
 * key, json_dumps skips a key's text, the builders ignore a failed set), which
 * would turn an out-of-memory into a wrong request or a wrong reply:
 *
 *   kiln_json_init();                       // once, at start-up (main)
 *   uint64_t f0 = kiln_json_failures();     // before ...
 *   json_t *j = json_loadb(...);            // ... any jansson work on this thread
 *   if (kiln_json_failures() != f0) { json_decref(j); return KILN_E_NOMEM; }
 *
 * Request memory: one process-wide account of bytes held by requests in
 * flight (their bodies while received and held, the JSON trees they parse),
 * capped by the server (--request-memory, inside --memory-budget). Bodies
 * reserve explicitly; jansson allocations made on a thread while
 * kiln_json_charge(true) is on are charged to it (their usable size) and
 * uncharged when jansson frees them, on whatever thread (a mark in the
 * block's last usable byte says it is charged; the pointer stays malloc's
 * own, so a json_dumps result may still be given to free()). An allocation
 * that would pass the cap fails (a failure above, and a budget failure). Keep
 * the window to parsing: a charged json_dumps result given to free() would
 * never be uncharged.
 *
 *   bool was = kiln_json_charge(true);  json_loadb(...);  kiln_json_charge(was);
 *
 * Without kiln_json_init (jansson's own allocator) nothing is counted or
 * charged. glibc (malloc_usable_size) is assumed, as elsewhere in kiln.
 * Threads: the failure counts, the charge switch and the net byte count are
 * per thread; the account is atomic.
 */
#ifndef KILN_JSON_H
#define KILN_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t; /* jansson's value (json_t) */

/* API */
void kiln_json_init(void);
/* Failed jansson allocations on this thread so far (compare two readings). */
uint64_t kiln_json_failures(void);
/* Of those, the ones refused by the request memory cap (compare two readings). */
uint64_t kiln_json_budget_failures(void);
/* At this thread's last budget failure: the charged bytes it held plus the
 * refused allocation (more than the cap: the work can never fit). */
uint64_t kiln_json_budget_need(void);
/* Bytes this thread's jansson allocations hold minus what it freed (usable
 * sizes): the difference of two readings around json_deep_copy is what the
 * copy holds. */
int64_t kiln_json_net_bytes(void);
/* Charges this thread's jansson allocations to the request memory account (on)
 * or not; returns the previous setting. */
bool kiln_json_charge(bool on);

/* API: nesting depth, measured without recursion proportional to the input.
 * Depth: a scalar is 0, [] and {} are 1, [[1]] is 2. Both stop counting as soon
 * as limit is passed and return limit + 1 then ("deeper than limit"), so a
 * 10,000-deep input costs what a limit-deep one does. */
/* Deepest nesting of arrays and objects in JSON text s[0..len): a byte scan
 * (strings and their escapes skipped), no parse, no allocation. Exact for valid
 * JSON; for invalid text it is at least the depth jansson would recurse to
 * before failing, so it may run before json_loadb to keep that parse shallow. */
int kiln_json_text_depth(const char *s, size_t len, int limit);
/* The same for a parsed value (recursion at most limit + 1 frames deep). */
int kiln_json_value_depth(const struct json_t *j, int limit);

/* API: the request memory account (process-wide) */
void kiln_reqmem_set_cap(uint64_t cap); /* 0 = no cap (counted only) */
uint64_t kiln_reqmem_cap(void);
uint64_t kiln_reqmem_used(void);
uint64_t kiln_reqmem_peak(void); /* the most ever held at once */
/* Reserves n bytes: false (nothing reserved) when that would pass the cap. */
bool kiln_reqmem_reserve(uint64_t n);
void kiln_reqmem_release(uint64_t n);

#endif
