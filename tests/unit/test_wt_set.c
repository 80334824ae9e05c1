/*
 * test_wt_set.c — snapshot folders: one file, sharded with an index, listings
 * without one, and the folder-level bad inputs (index names escaping the
 * folder, duplicate tensors, index/file disagreement, unreadable folder).
 */
#include <sys/stat.h>

#include "test.h"
#include "util/kiln_err.h"
#include "weights/wt_set.h"

#define ASSERT_MSG_HAS(s)                                                                          \
    do {                                                                                           \
        if (!strstr(err.msg, (s))) TEST_FAIL_("message \"%s\" lacks \"%s\"", err.msg, (s));        \
    } while (0)

static char root[256];
static int dir_seq;

/* A fresh empty folder under root; path into buf. */
static const char *new_dir(char *buf, size_t n)
{
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/kiln_test_wt_set_XXXXXX");
        if (!mkdtemp(root)) exit(1);
    }
    snprintf(buf, n, "%s/d%d", root, dir_seq++);
    mkdir(buf, 0700);
    return buf;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
}

/* Writes a safetensors file holding U8 tensors of 4 bytes each, named by `names`
 * (comma separated). */
static void write_st(const char *dir, const char *name, const char *names)
{
    char hdr[2048] = "{", list[512];
    snprintf(list, sizeof list, "%s", names);
    int k = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","), k++) {
        char one[256];
        snprintf(one, sizeof one,
                 "%s\"%s\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[%d,%d]}", k ? "," : "",
                 tok, 4 * k, 4 * k + 4);
        strncat(hdr, one, sizeof hdr - strlen(hdr) - 1);
    }
    strncat(hdr, "}", sizeof hdr - strlen(hdr) - 1);
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    uint64_t hl = strlen(hdr);
    for (int i = 0; i < 8; i++)
        fputc((int)(hl >> (8 * i)) & 0xff, f);
    fputs(hdr, f);
    for (int i = 0; i < 4 * k; i++)
        fputc(i, f);
    fclose(f);
}

/* ---------------------------------------------------------------- cases */

static void test_sharded_with_index(void)
{
    kiln_err err;
    char d[512];
    new_dir(d, sizeof d);
    write_st(d, "model-00001-of-00002.safetensors", "a,b");
    write_st(d, "model-00002-of-00002.safetensors", "c,extra");
    write_st(d, "reference.safetensors", "a"); /* not in the index: never opened */
    write_text(d, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":16},\"weight_map\":{"
               "\"a\":\"model-00001-of-00002.safetensors\","
               "\"b\":\"model-00001-of-00002.safetensors\","
               "\"c\":\"model-00002-of-00002.safetensors\"}}");
    wt_set *ws;
    ASSERT_OK(wt_set_open(d, &ws, &err));
    ASSERT_EQ_I64(wt_set_count(ws), 4);
    ASSERT_EQ_I64(wt_set_file_count(ws), 2);
    ASSERT_EQ_U64(wt_set_bytes(ws), 16);
    ASSERT_STR_EQ(wt_set_at(ws, 0)->name, "a");
    ASSERT_STR_EQ(wt_set_at(ws, 3)->name, "extra");
    const wt_tensor *t = wt_set_find(ws, "c");
    ASSERT_TRUE(t != NULL);
    ASSERT_TRUE(strstr(wt_set_file_of(ws, t), "model-00002-of-00002.safetensors") != NULL);
    ASSERT_TRUE(wt_set_find(ws, "zzz") == NULL);
    ASSERT_STR_EQ(wt_set_dir(ws), d);
    wt_set_close(ws);
    wt_set_close(NULL);
}

static void test_listing_without_index(void)
{
    kiln_err err;
    char d[512];
    new_dir(d, sizeof d);
    write_st(d, "model-b.safetensors", "y");
    write_st(d, "model-a.safetensors", "x");
    write_st(d, "reference.safetensors", "x"); /* skipped: model*.safetensors exist */
    wt_set *ws;
    ASSERT_OK(wt_set_open(d, &ws, &err));
    ASSERT_EQ_I64(wt_set_count(ws), 2);
    ASSERT_TRUE(strstr(wt_st_path(wt_set_file_at(ws, 0)), "model-a.safetensors") != NULL);
    wt_set_close(ws);
    new_dir(d, sizeof d);
    write_st(d, "weights.safetensors", "x,y,z");
    ASSERT_OK(wt_set_open(d, &ws, &err));
    ASSERT_EQ_I64(wt_set_count(ws), 3);
    wt_set_close(ws);
}

static void test_duplicate_tensor_across_shards_is_corrupt(void)
{
    kiln_err err;
    char d[512];
    new_dir(d, sizeof d);
    write_st(d, "model-1.safetensors", "a,b");
    write_st(d, "model-2.safetensors", "b,c");
    wt_set *ws = (wt_set *)1;
    ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_CORRUPT);
    ASSERT_TRUE(ws == NULL);
    ASSERT_MSG_HAS("tensor 'b' is in both model-1.safetensors and model-2.safetensors");
    ASSERT_MSG_HAS(d);
}

static void test_index_names_outside_folder_are_refused(void)
{
    kiln_err err;
    static const char *bad[] = {"../model.safetensors", "sub/model.safetensors", "/etc/passwd",
                                "..", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char d[512], idx[512];
        new_dir(d, sizeof d);
        write_st(d, "model.safetensors", "a");
        snprintf(idx, sizeof idx, "{\"weight_map\":{\"a\":\"%s\"}}", bad[i]);
        write_text(d, "model.safetensors.index.json", idx);
        wt_set *ws;
        kiln_code c = wt_set_open(d, &ws, &err);
        if (c != KILN_E_CORRUPT) TEST_FAIL_("'%s' -> %s", bad[i], kiln_code_name(c));
        ASSERT_MSG_HAS("model.safetensors.index.json");
        ASSERT_MSG_HAS("not a plain file name");
    }
}

static void test_index_and_files_must_agree(void)
{
    kiln_err err;
    char d[512];
    wt_set *ws;
    new_dir(d, sizeof d);
    write_st(d, "model.safetensors", "a");
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model.safetensors\",\"lost\":\"model.safetensors\"}}");
    ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_CORRUPT);
    ASSERT_MSG_HAS("model.safetensors.index.json: tensor 'lost' is not in model.safetensors");
    /* a named shard that does not exist */
    new_dir(d, sizeof d);
    write_st(d, "model.safetensors", "a");
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model.safetensors\",\"b\":\"model-2.safetensors\"}}");
    ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_NOT_FOUND);
    ASSERT_MSG_HAS("model-2.safetensors");
    /* mapped to the wrong shard */
    new_dir(d, sizeof d);
    write_st(d, "model-1.safetensors", "a");
    write_st(d, "model-2.safetensors", "b");
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model-2.safetensors\",\"b\":\"model-1.safetensors\"}}");
    ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_CORRUPT);
    /* malformed indexes */
    static const char *bad[] = {"nope", "{}", "{\"weight_map\":[]}", "{\"weight_map\":{}}",
                                "{\"weight_map\":{\"a\":1}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        new_dir(d, sizeof d);
        write_st(d, "model.safetensors", "a");
        write_text(d, "model.safetensors.index.json", bad[i]);
        kiln_code c = wt_set_open(d, &ws, &err);
        if (c != KILN_E_CORRUPT) TEST_FAIL_("'%s' -> %s", bad[i], kiln_code_name(c));
        ASSERT_MSG_HAS("model.safetensors.index.json");
    }
}

static void test_missing_or_unreadable_folder(void)
{
    kiln_err err;
    wt_set *ws;
    ASSERT_CODE(wt_set_open("/nonexistent/kiln/snap", &ws, &err), KILN_E_NOT_FOUND);
    ASSERT_MSG_HAS("/nonexistent/kiln/snap");
    char d[512];
    new_dir(d, sizeof d);
    ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_NOT_FOUND); /* empty */
    ASSERT_MSG_HAS(d);
    ASSERT_MSG_HAS("no *.safetensors");
    write_st(d, "model.safetensors", "a");
    char f[600];
    snprintf(f, sizeof f, "%s/model.safetensors", d);
    ASSERT_CODE(wt_set_open(f, &ws, &err), KILN_E_NOT_FOUND); /* a file, not a folder */
    /* a corrupt shard: its own message, naming the file */
    write_text(d, "model.safetensors", "garbage!garbage!");
    ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_CORRUPT);
    ASSERT_MSG_HAS("model.safetensors");
    if (geteuid() != 0) {
        chmod(d, 0);
        ASSERT_CODE(wt_set_open(d, &ws, &err), KILN_E_IO);
        ASSERT_MSG_HAS(d);
        chmod(d, 0700);
    }
}

static void test_shared_snapshots_open(void)
{
    static const char *dirs[] = {"models/stories260K", "oracle/qwen2_f32/hf",
                                 "vectors/mlx-quant/emulated/stories260K-mlx-bf16-4bit",
                                 "vectors/mlx-quant/emulated/stories260K-mlx-f16-mixed_3_6-g32"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        kiln_err err;
        char p[512];
        test_shared_path(p, sizeof p, dirs[i]);
        if (!test_path_exists(p)) {
            fprintf(stderr, "  (%s absent)\n", p);
            continue;
        }
        wt_set *ws;
        ASSERT_OK(wt_set_open(p, &ws, &err));
        ASSERT_TRUE(wt_set_find(ws, "model.norm.weight") != NULL);
        ASSERT_TRUE(wt_set_find(ws, "teacher_forced_logits") == NULL); /* reference file */
        ASSERT_TRUE(wt_set_bytes(ws) > 0);
        if (i >= 2) {
            const wt_tensor *w = wt_set_find(ws, "model.layers.0.self_attn.q_proj.weight");
            ASSERT_EQ_I64(w->dtype, WT_U32);
            ASSERT_TRUE(wt_set_find(ws, "model.layers.0.mlp.down_proj.scales") == NULL);
        }
        wt_set_close(ws);
    }
}

static void cleanup(void)
{
    char cmd[300];
    if (!root[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
}

int main(void)
{
    RUN(test_sharded_with_index);
    RUN(test_listing_without_index);
    RUN(test_duplicate_tensor_across_shards_is_corrupt);
    RUN(test_index_names_outside_folder_are_refused);
    RUN(test_index_and_files_must_agree);
    RUN(test_missing_or_unreadable_folder);
    RUN(test_shared_snapshots_open);
    cleanup();
    return TEST_DONE();
}
