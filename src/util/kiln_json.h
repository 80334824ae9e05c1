/*
 * kiln_json.h — jansson's allocations go through kiln, so that a failed one
 * is never silent: jansson itself sometimes carries on after one (its lexer
 * drops the byte it could not store, json_copy/json_deep_copy skip the key,
 * json_dumps skips a key's text, the builders ignore a failed set), which
 * would turn an out-of-memory into a wrong request or a wrong reply.
 *
 *   kiln_json_init();                       // once, at start-up (main)
 *   uint64_t f0 = kiln_json_failures();     // before ...
 *   json_t *j = json_loadb(...);            // ... any jansson work on this thread
 *   if (kiln_json_failures() != f0) { json_decref(j); return KILN_E_NOMEM; }
 *
 * Without kiln_json_init (jansson's own allocator) nothing is counted.
 * Threads: the count is per thread; kiln_json_init before other threads use jansson.
 */
#ifndef KILN_JSON_H
#define KILN_JSON_H

#include <stdint.h>

/* API */
void kiln_json_init(void);
/* Failed jansson allocations on this thread so far (compare two readings). */
uint64_t kiln_json_failures(void);

#endif
