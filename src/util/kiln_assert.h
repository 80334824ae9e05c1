/*
 * kiln_assert.h — assertions for kiln's own invariants (never for input).
 * kiln_panic() is the only place below cli/ that ends the process; reaching it
 * is always a kiln bug.
 */
#ifndef KILN_ASSERT_H
#define KILN_ASSERT_H

_Noreturn void kiln_panic(const char *file, int line, const char *what);

#define KILN_ASSERT(c) ((c) ? (void)0 : kiln_panic(__FILE__, __LINE__, #c))
#ifdef NDEBUG
#define KILN_DASSERT(c) ((void)0)
/* Defensive check on our own state: recovers (evaluates to 1) in release. */
#define KILN_NEVER(c) (c)
#else
#define KILN_DASSERT(c) KILN_ASSERT(c)
#define KILN_NEVER(c) ((c) ? (kiln_panic(__FILE__, __LINE__, #c), 1) : 0)
#endif

#endif
