/*
 * test_util.c — kiln_err, arena, checked math, half conversions, plat files.
 */
#include "test.h"

#include <sys/stat.h>
#include "util/arena.h"
#include "util/half.h"
#include "util/kiln_err.h"
#include "util/kiln_math.h"
#include "util/plat.h"

static void test_fail_fills_code_and_message(void)
{
    kiln_err err;
    ASSERT_EQ_I64(kiln_fail(&err, KILN_E_CORRUPT, "tensor '%s' bad", "x"), KILN_E_CORRUPT);
    ASSERT_EQ_I64(err.code, KILN_E_CORRUPT);
    ASSERT_STR_EQ(err.msg, "tensor 'x' bad");
    kiln_err_prefix(&err, "loading %s: ", "m.safetensors");
    ASSERT_STR_EQ(err.msg, "loading m.safetensors: tensor 'x' bad");
    ASSERT_EQ_I64(kiln_fail(NULL, KILN_E_IO, "x"), KILN_E_IO);
    ASSERT_STR_EQ(kiln_code_name(KILN_E_BUDGET), "budget");
}

static void test_arena_aligns_and_refuses_when_full(void)
{
    kiln_err err;
    arena a;
    ASSERT_OK(arena_init(&a, 256, &err));
    void *p = arena_alloc(&a, 10, 64);
    void *q = arena_alloc(&a, 10, 64);
    ASSERT_TRUE(p && q);
    ASSERT_EQ_I64(((uintptr_t)q - (uintptr_t)p), 64);
    ASSERT_TRUE(arena_alloc(&a, 1000, 8) == NULL);
    ASSERT_TRUE(arena_alloc(&a, SIZE_MAX, 8) == NULL);
    arena_reset(&a);
    ASSERT_EQ_I64(a.used, 0);
    ASSERT_EQ_I64(a.peak, 74);
    arena_free(&a);
}

static void test_checked_math_reports_overflow(void)
{
    uint64_t r;
    ASSERT_EQ_I64(kiln_mul_u64(UINT64_MAX / 2, 3, &r), 1);
    ASSERT_EQ_I64(kiln_mul_u64(6, 7, &r), 0);
    ASSERT_EQ_U64(r, 42);
    ASSERT_EQ_I64(kiln_add_u64(UINT64_MAX, 1, &r), 1);
}

static void test_half_conversions_are_exact(void)
{
    ASSERT_NEAR_F32(kiln_bf16_to_f32(0x3f80), 1.0f, 0);
    ASSERT_EQ_I64(kiln_f32_to_bf16(1.0f), 0x3f80);
    ASSERT_EQ_I64(kiln_f32_to_bf16(1.00390625f), 0x3f80); /* tie rounds to even */
    ASSERT_NEAR_F32(kiln_f16_to_f32(0x3c00), 1.0f, 0);
    ASSERT_NEAR_F32(kiln_f16_to_f32(0x0001), 5.9604644775390625e-08f, 0);
    ASSERT_NEAR_F32(kiln_f16_to_f32(0xc000), -2.0f, 0);
    /* every finite f16 round-trips */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if (((h >> 10) & 0x1f) == 0x1f) continue;
        uint16_t back = kiln_f32_to_f16(kiln_f16_to_f32((uint16_t)h));
        if (back != h) TEST_FAIL_("f16 0x%04x round-trips to 0x%04x", h, back);
    }
}

static void test_read_file_refuses_missing_and_large(void)
{
    kiln_err err;
    char *buf;
    size_t len;
    ASSERT_CODE(plat_read_file("/nonexistent/kiln", 100, &buf, &len, &err), KILN_E_NOT_FOUND);
    ASSERT_CODE(plat_read_file("/proc/self/exe", 10, &buf, &len, &err), KILN_E_TOO_LARGE);
    ASSERT_TRUE(plat_cpu_count() >= 1);
}

/* A FIFO where a file is expected (tokenizer.json, a safetensors shard) is
 * refused at once instead of blocking until a writer appears. */
static void test_read_and_map_refuse_a_fifo_without_blocking(void)
{
    kiln_err err;
    char path[256], *buf = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/util_fifo_%d", KILN_BINARY_DIR, (int)getpid());
    unlink(path);
    ASSERT_TRUE(mkfifo(path, 0600) == 0);
    alarm(30); /* a blocking open would hang the test here */
    kiln_code a = plat_read_file(path, 100, &buf, &len, &err);
    plat_map m;
    kiln_code b = plat_map_file(path, &m, &err);
    alarm(0);
    unlink(path);
    ASSERT_CODE(a, KILN_E_IO);
    ASSERT_CODE(b, KILN_E_IO);
}

int main(void)
{
    RUN(test_fail_fills_code_and_message);
    RUN(test_arena_aligns_and_refuses_when_full);
    RUN(test_checked_math_reports_overflow);
    RUN(test_half_conversions_are_exact);
    RUN(test_read_file_refuses_missing_and_large);
    RUN(test_read_and_map_refuse_a_fifo_without_blocking);
    return TEST_DONE();
}
