/*
 * test.h — the one test harness: assertions print both sides, each file's
 * main() runs its cases with RUN() and returns non-zero on failure.
 *
 *   static void test_x(void) { ASSERT_EQ_I64(1 + 1, 2); }
 *   int main(void) { RUN(test_x); return TEST_DONE(); }
 */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int test_failures_ __attribute__((unused)), test_cases_ __attribute__((unused)),
    test_skipped_ __attribute__((unused)), test_case_failed_ __attribute__((unused));

#define TEST_FAIL_(...)                                                                            \
    do {                                                                                           \
        fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__);                                     \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        test_case_failed_ = 1;                                                                     \
        return;                                                                                    \
    } while (0)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c)) TEST_FAIL_("expected true: %s", #c);                                             \
    } while (0)
#define ASSERT_EQ_I64(a, b)                                                                        \
    do {                                                                                           \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                                              \
        if (a_ != b_) TEST_FAIL_("%s == %s: %" PRId64 " != %" PRId64, #a, #b, a_, b_);           \
    } while (0)
#define ASSERT_EQ_U64(a, b)                                                                        \
    do {                                                                                           \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                           \
        if (a_ != b_) TEST_FAIL_("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, a_, b_);           \
    } while (0)
#define ASSERT_NEAR_F32(a, b, tol)                                                                 \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (double)(tol)))                                                     \
            TEST_FAIL_("%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol));        \
    } while (0)
#define ASSERT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",                 \
                       b_ ? b_ : "(null)");                                                        \
    } while (0)
/* ASSERT_OK(expr): expr returns kiln_code; prints err.msg of a kiln_err named `err`. */
#define ASSERT_OK(expr)                                                                            \
    do {                                                                                           \
        kiln_code c_ = (expr);                                                                     \
        if (c_ != KILN_OK) TEST_FAIL_("%s -> %s: %s", #expr, kiln_code_name(c_), err.msg);      \
    } while (0)
#define ASSERT_CODE(expr, code)                                                                    \
    do {                                                                                           \
        kiln_code c_ = (expr);                                                                     \
        if (c_ != (code))                                                                          \
            TEST_FAIL_("%s -> %s, expected %s (%s)", #expr, kiln_code_name(c_),                  \
                       kiln_code_name(code), err.msg);                                             \
    } while (0)

/* Skips the current case with a reason (e.g. a fixture that is genuinely absent). */
#define TEST_SKIP(...)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "  SKIP: ");                                                               \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        test_skipped_++;                                                                           \
        return;                                                                                    \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        test_case_failed_ = 0;                                                                     \
        test_cases_++;                                                                             \
        fn();                                                                                      \
        if (test_case_failed_) {                                                                   \
            test_failures_++;                                                                      \
            fprintf(stderr, "not ok %s\n", #fn);                                                   \
        } else {                                                                                   \
            fprintf(stderr, "ok %s\n", #fn);                                                       \
        }                                                                                          \
    } while (0)

#define TEST_DONE()                                                                                \
    (fprintf(stderr, "%d passed, %d failed, %d skipped\n", test_cases_ - test_failures_, test_failures_, test_skipped_), \
     test_failures_ ? 1 : 0)

/* Path under ../shared (compile-time KILN_SHARED_DIR); returns a static buffer per call site. */
static inline const char *test_shared_path(char *buf, size_t n, const char *rel)
{
#ifdef KILN_SHARED_DIR
    const char *base = getenv("KILN_SHARED_DIR") ? getenv("KILN_SHARED_DIR") : KILN_SHARED_DIR;
#else
    const char *base = getenv("KILN_SHARED_DIR") ? getenv("KILN_SHARED_DIR") : "../shared";
#endif
    snprintf(buf, n, "%s/%s", base, rel);
    return buf;
}

static inline int test_path_exists(const char *p)
{
    return access(p, F_OK) == 0;
}

#endif
