/*
 * failalloc.c — the --wrap side of failalloc.h: each wrapped allocation
 * counts, and the armed one returns NULL (errno ENOMEM) instead of memory.
 */
#include "failalloc.h"

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);

static _Atomic uint64_t countdown; /* 0: off; 1: the next allocation fails */
static _Atomic uint64_t counted, failed;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static int trace; /* KILN_FAILALLOC_TRACE=1: print where the injected failure happened */

static void read_env(void)
{
    const char *v = getenv("KILN_FAIL_ALLOC_AT");
    if (v && *v) atomic_store(&countdown, strtoull(v, NULL, 10));
    trace = getenv("KILN_FAILALLOC_TRACE") != NULL;
    if (trace) {
        void *f[2];
        backtrace(f, 2); /* loads what backtrace needs now, not inside a failing call */
    }
}

/* 1 when this allocation is the one to fail. */
static int fail_now(void)
{
    pthread_once(&env_once, read_env);
    atomic_fetch_add(&counted, 1);
    uint64_t c = atomic_load(&countdown);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
            if (c == 1) {
                atomic_fetch_add(&failed, 1);
                if (trace) {
                    void *f[16];
                    int n = backtrace(f, 16);
                    backtrace_symbols_fd(f, n, 2);
                }
                errno = ENOMEM;
                return 1;
            }
            return 0;
        }
    }
    return 0;
}

void failalloc_arm(uint64_t n)
{
    pthread_once(&env_once, read_env);
    atomic_store(&countdown, n);
}

int failalloc_armed(void)
{
    return atomic_load(&countdown) > 0;
}

uint64_t failalloc_count(void)
{
    return atomic_load(&counted);
}

uint64_t failalloc_failures(void)
{
    return atomic_load(&failed);
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    return fail_now() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now() ? NULL : __real_strndup(s, n);
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    return fail_now() ? ENOMEM : __real_posix_memalign(p, a, n);
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
    return fail_now() ? NULL : __real_aligned_alloc(a, n);
}

