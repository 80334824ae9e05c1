/*
 * test_wt_safetensors.c — the safetensors reader: valid files, every bad-input
 * case of issue 2 §7 that a single file can have, and the real fixtures.
 */
#include <stdint.h>
#include <sys/stat.h>

#include "test.h"
#include "util/kiln_err.h"
#include "weights/wt_safetensors.h"

/* ------------------------------------------------------------- helpers */

static char tmpdir[256];

static void make_tmpdir(void)
{
    if (tmpdir[0]) return;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_test_wt_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* Builds [len][header][data] in a new buffer; *n gets its size. hlen_override
 * < 0 means "the real header length". Data bytes are i & 0xff. */
static uint8_t *build(const char *header, size_t data_len, int64_t hlen_override, size_t *n)
{
    size_t hl = strlen(header);
    *n = 8 + hl + data_len;
    uint8_t *b = malloc(*n ? *n : 1);
    uint64_t v = hlen_override >= 0 ? (uint64_t)hlen_override : hl;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hl + i] = (uint8_t)i;
    return b;
}

/* Writes bytes to tmpdir/name; returns the path in a static-per-call buffer. */
static const char *write_file(const char *name, const uint8_t *b, size_t n, char *path, size_t cap)
{
    make_tmpdir();
    snprintf(path, cap, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(b, 1, n, f);
    fclose(f);
    return path;
}

/* Opens header+data as a file named `name`; returns the code, leaves err set. */
static kiln_code open_built(const char *name, const char *header, size_t data_len,
                            int64_t hlen_override, size_t truncate_to, kiln_err *err)
{
    size_t n;
    uint8_t *b = build(header, data_len, hlen_override, &n);
    char path[512];
    write_file(name, b, truncate_to && truncate_to < n ? truncate_to : n, path, sizeof path);
    free(b);
    wt_st *st = NULL;
    kiln_code c = wt_st_open(path, &st, err);
    wt_st_close(st);
    return c;
}

#define ASSERT_MSG_HAS(s)                                                                          \
    do {                                                                                           \
        if (!strstr(err.msg, (s))) TEST_FAIL_("message \"%s\" lacks \"%s\"", err.msg, (s));        \
    } while (0)

static const char *GOOD =
    "{\"__metadata__\":{\"format\":\"mlx\"},"
    "\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
    "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
    "\"empty\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[28,28]},"
    "\"scalar\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[28,32]}}    ";

/* ---------------------------------------------------------------- cases */

static void test_valid_file_is_found_sorted_and_in_place(void)
{
    kiln_err err;
    size_t n;
    uint8_t *b = build(GOOD, 32, -1, &n);
    char path[512];
    write_file("good.safetensors", b, n, path, sizeof path);
    wt_st *st;
    ASSERT_OK(wt_st_open(path, &st, &err));
    ASSERT_EQ_I64(wt_st_count(st), 4);
    ASSERT_STR_EQ(wt_st_at(st, 0)->name, "a.weight");
    ASSERT_STR_EQ(wt_st_at(st, 3)->name, "scalar");
    ASSERT_TRUE(wt_st_at(st, 4) == NULL && wt_st_at(st, -1) == NULL);
    const wt_tensor *t = wt_st_find(st, "b.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ_I64(t->dtype, WT_BF16);
    ASSERT_EQ_I64(t->ndim, 2);
    ASSERT_EQ_I64(t->shape[0], 2);
    ASSERT_EQ_I64(t->shape[1], 3);
    ASSERT_EQ_I64(t->numel, 6);
    ASSERT_EQ_U64(t->nbytes, 12);
    ASSERT_EQ_I64(((const uint8_t *)t->data)[0], 16); /* data byte i is i */
    t = wt_st_find(st, "scalar");
    ASSERT_EQ_I64(t->ndim, 0);
    ASSERT_EQ_I64(t->numel, 1);
    t = wt_st_find(st, "empty");
    ASSERT_EQ_I64(t->numel, 0);
    ASSERT_TRUE(wt_st_find(st, "nope") == NULL);
    ASSERT_STR_EQ(wt_st_meta(st, "format"), "mlx");
    ASSERT_TRUE(wt_st_meta(st, "other") == NULL);
    ASSERT_STR_EQ(wt_st_path(st), path);
    ASSERT_EQ_U64(wt_st_data_bytes(st), 32);
    wt_st_close(st);
    /* the same bytes from memory */
    ASSERT_OK(wt_st_open_mem(b, n, "mem", &st, &err));
    ASSERT_EQ_I64(wt_st_count(st), 4);
    ASSERT_TRUE(wt_st_find(st, "a.weight")->data == b + 8 + strlen(GOOD));
    wt_st_close(st);
    free(b);
    wt_st_close(NULL);
}

static void test_dtype_table_round_trips(void)
{
    for (int i = 0; i < WT_DTYPE_COUNT; i++) {
        wt_dtype d;
        ASSERT_EQ_I64(wt_dtype_parse(wt_dtype_name((wt_dtype)i), &d), 0);
        ASSERT_EQ_I64(d, i);
        ASSERT_TRUE(wt_dtype_size((wt_dtype)i) >= 1);
    }
    wt_dtype d;
    ASSERT_EQ_I64(wt_dtype_parse("bf16", &d), -1);
    ASSERT_EQ_I64(wt_dtype_size(WT_BF16), 2);
    ASSERT_EQ_I64(wt_dtype_size(WT_F64), 8);
}

static void test_truncated_file_is_corrupt(void)
{
    kiln_err err;
    ASSERT_CODE(open_built("trunc4.safetensors", GOOD, 32, -1, 4, &err), KILN_E_CORRUPT);
    ASSERT_MSG_HAS("trunc4.safetensors");
    ASSERT_MSG_HAS("truncated");
    /* cut inside the data section: header length now runs past or tensors overflow */
    ASSERT_CODE(open_built("trunc_data.safetensors", GOOD, 32, -1, 8 + strlen(GOOD) + 20, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("trunc_data.safetensors");
    ASSERT_MSG_HAS("do not fit 20-byte data section");
    /* an empty file */
    char path[512];
    write_file("empty.safetensors", NULL, 0, path, sizeof path);
    wt_st *st;
    ASSERT_CODE(wt_st_open(path, &st, &err), KILN_E_CORRUPT);
    ASSERT_TRUE(st == NULL);
    ASSERT_MSG_HAS("empty.safetensors");
}

static void test_header_length_past_end_is_corrupt(void)
{
    kiln_err err;
    ASSERT_CODE(open_built("hlen.safetensors", GOOD, 32, 100000, 0, &err), KILN_E_CORRUPT);
    ASSERT_MSG_HAS("hlen.safetensors");
    ASSERT_MSG_HAS("header length 100000 runs past the end");
    ASSERT_CODE(open_built("hlen_huge.safetensors", GOOD, 32, INT64_MAX, 0, &err), KILN_E_CORRUPT);
    ASSERT_MSG_HAS("runs past the end");
}

static void test_offsets_out_of_range_are_corrupt(void)
{
    kiln_err err;
    ASSERT_CODE(open_built("range.safetensors",
                           "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 16,
                           -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("range.safetensors: tensor 'x': bytes [8, 24) do not fit 16-byte data section");
    ASSERT_CODE(open_built("rev.safetensors",
                           "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 16,
                           -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("rev.safetensors");
    ASSERT_CODE(open_built("neg.safetensors",
                           "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 16,
                           -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("neg.safetensors");
    ASSERT_CODE(open_built("huge.safetensors",
                           "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":"
                           "[9223372036854775800,9223372036854775807]}}",
                           16, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("huge.safetensors");
}

static void test_overlapping_offsets_are_corrupt(void)
{
    kiln_err err;
    ASSERT_CODE(open_built("overlap.safetensors",
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                           32, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("overlap.safetensors");
    ASSERT_MSG_HAS("overlap");
    /* a range nested inside a bigger one, with a third after both */
    ASSERT_CODE(open_built("nested.safetensors",
                           "{\"a\":{\"dtype\":\"U8\",\"shape\":[20],\"data_offsets\":[0,20]},"
                           "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
                           "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[20,22]}}",
                           32, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("'a' [0, 20) and 'b' [4, 6) overlap");
    /* gaps and empty tensors inside others are fine */
    ASSERT_OK(open_built("gap.safetensors",
                         "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                         "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]}}",
                         32, -1, 0, &err));
}

static void test_shape_times_dtype_must_equal_byte_length(void)
{
    kiln_err err;
    ASSERT_CODE(open_built("shape.safetensors",
                           "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,16]}}",
                           16, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("shape.safetensors: tensor 'w': shape [2, 3] x BF16 is 12 bytes");
    /* numel overflow */
    ASSERT_CODE(open_built("ovf.safetensors",
                           "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                           "\"data_offsets\":[0,16]}}",
                           16, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("ovf.safetensors");
    ASSERT_CODE(open_built("ovf2.safetensors",
                           "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                           "\"data_offsets\":[0,16]}}",
                           16, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("overflows");
    ASSERT_CODE(open_built("negdim.safetensors",
                           "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}",
                           16, -1, 0, &err),
                KILN_E_CORRUPT);
    ASSERT_MSG_HAS("negdim.safetensors");
    ASSERT_CODE(open_built("dims.safetensors",
                           "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                           "\"data_offsets\":[0,1]}}",
                           16, -1, 0, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("dims.safetensors");
}

static void test_unknown_dtype_is_named(void)
{
    kiln_err err;
    ASSERT_CODE(open_built("dtype.safetensors",
                           "{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[4],\"data_offsets\":[0,4]}}", 16,
                           -1, 0, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("dtype.safetensors: tensor 'w': unknown dtype 'Q4_K'");
}

static void test_malformed_headers_are_corrupt(void)
{
    kiln_err err;
    static const char *bad[] = {
        "not json",
        "[1,2,3]",
        ("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}"),
        "{\"a\":5}",
        "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":5,\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}",
        "{\"__metadata__\":{\"k\":1}}",
        "{\"__metadata__\":[]}",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%zu.safetensors", i);
        kiln_code c = open_built(name, bad[i], 4, -1, 0, &err);
        if (c != KILN_E_CORRUPT)
            TEST_FAIL_("case %zu: %s -> %s (%s)", i, bad[i], kiln_code_name(c), err.msg);
        ASSERT_MSG_HAS(name);
    }
}

static void test_missing_file_is_not_found(void)
{
    kiln_err err;
    wt_st *st = (wt_st *)1;
    ASSERT_CODE(wt_st_open("/nonexistent/kiln/model.safetensors", &st, &err), KILN_E_NOT_FOUND);
    ASSERT_TRUE(st == NULL);
    ASSERT_MSG_HAS("/nonexistent/kiln/model.safetensors");
    make_tmpdir();
    ASSERT_CODE(wt_st_open(tmpdir, &st, &err), KILN_E_IO); /* a directory */
}

static void test_real_fixture_opens(void)
{
    char p[512];
    test_shared_path(p, sizeof p, "models/stories260K/model.safetensors");
    if (!test_path_exists(p)) TEST_SKIP("%s absent", p);
    kiln_err err;
    wt_st *st;
    ASSERT_OK(wt_st_open(p, &st, &err));
    const wt_tensor *t = wt_st_find(st, "model.embed_tokens.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ_I64(t->ndim, 2);
    ASSERT_EQ_I64(t->shape[0], 512);
    wt_st_close(st);
    test_shared_path(p, sizeof p, "vectors/mlx-quant/affine_b4_g64.safetensors");
    if (!test_path_exists(p)) TEST_SKIP("%s absent", p);
    ASSERT_OK(wt_st_open(p, &st, &err));
    ASSERT_STR_EQ(wt_st_meta(st, "bits"), "4");
    t = wt_st_find(st, "bf16.scales");
    ASSERT_EQ_I64(t->dtype, WT_BF16);
    ASSERT_EQ_I64(t->shape[1], 4);
    wt_st_close(st);
}

static void cleanup(void)
{
    char cmd[300];
    if (!tmpdir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
}

int main(void)
{
    RUN(test_valid_file_is_found_sorted_and_in_place);
    RUN(test_dtype_table_round_trips);
    RUN(test_truncated_file_is_corrupt);
    RUN(test_header_length_past_end_is_corrupt);
    RUN(test_offsets_out_of_range_are_corrupt);
    RUN(test_overlapping_offsets_are_corrupt);
    RUN(test_shape_times_dtype_must_equal_byte_length);
    RUN(test_unknown_dtype_is_named);
    RUN(test_malformed_headers_are_corrupt);
    RUN(test_missing_file_is_not_found);
    RUN(test_real_fixture_opens);
    cleanup();
    return TEST_DONE();
}
