/*
 * failalloc.h — allocation failure injection for tests (Linux, GNU ld/lld):
 * a test executable linked with
 *   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,
 *   --wrap=posix_memalign,--wrap=aligned_alloc
 * (CMakeLists.txt, tests/failalloc/test_*.c) sends every allocation made by
 * kiln's own code through a counter — the static kiln_core objects, and
 * jansson's once kiln_json_init() (util/kiln_json.h) routes them through
 * kiln — so that the N-th one can fail:
 *
 *   KILN_FAIL_ALLOC_AT=N ./test      the N-th allocation of the process fails
 *   failalloc_arm(n);  ...           the n-th allocation from now fails (once)
 *   uint64_t k = failalloc_count();  allocations counted so far
 *   KILN_FAILALLOC_TRACE=1           print the stack of each injected failure
 *
 * Allocations inside other shared libraries (libc's own, libmicrohttpd,
 * PCRE2, utf8proc) are not counted: their failures are theirs to report.
 * Threads: the counter is atomic; any thread may allocate.
 */
#ifndef KILN_FAILALLOC_H
#define KILN_FAILALLOC_H

#include <stdint.h>

/* API */
void failalloc_arm(uint64_t n);      /* 0 disarms */
int failalloc_armed(void);           /* 1 until the armed failure has happened */
uint64_t failalloc_count(void);      /* wrapped allocations since the start */
uint64_t failalloc_failures(void);   /* injected failures since the start */

#endif
