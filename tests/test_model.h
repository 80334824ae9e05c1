/*
 * test_model.h — helpers for tests that run models: make a test model, open a
 * runtime, feed a sequence in chunks of any size, read reference files.
 */
#ifndef KILN_TEST_MODEL_H
#define KILN_TEST_MODEL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/eng_runtime.h"
#include "test.h"

/* Makes a test model once: tools/make-test-model ARGS into
 * KILN_BINARY_DIR/test-models/NAME (d gets that folder), reused while its
 * config.json is there. Written to a temporary folder and renamed, so tests
 * running in parallel never see half a model. 0 on success. */
static inline int tm_make_model(char *d, size_t n, const char *name, const char *args)
{
    snprintf(d, n, "%s/test-models/%s", KILN_BINARY_DIR, name);
    char cfg[700], cmd[3000];
    snprintf(cfg, sizeof cfg, "%s/config.json", d);
    if (access(cfg, R_OK) == 0) return 0;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/test-models' && rm -rf '%s.tmp%d' && /usr/bin/python3 "
             "'%s/tools/make-test-model' %s --out '%s.tmp%d' >/dev/null && rm -rf '%s' && mv "
             "'%s.tmp%d' '%s'",
             KILN_BINARY_DIR, d, (int)getpid(), KILN_SOURCE_DIR, args, d, (int)getpid(), d, d,
             (int)getpid(), d);
    return system(cmd);
}

/* Opens dir with a context big enough for n_ctx tokens, max_seqs sequences;
 * matmul: "exact", "int8" or NULL (the runtime's default, KN_MATMUL_DEFAULT). */
static inline eng_runtime *tm_open_mode(const char *dir, int32_t n_ctx, int32_t max_seqs,
                                        int threads, const char *isa, const char *matmul,
                                        kiln_err *err)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = n_ctx;
    o.max_seqs = max_seqs;
    o.n_threads = threads;
    o.isa = isa;
    o.matmul = matmul;
    o.block_tokens = 8; /* small blocks: many block boundaries in short tests */
    eng_runtime *rt = NULL;
    if (eng_runtime_open(dir, &o, &rt, err) != KILN_OK) return NULL;
    return rt;
}

/* tm_open_mode in the default matmul mode. */
static inline eng_runtime *tm_open(const char *dir, int32_t n_ctx, int32_t max_seqs, int threads,
                                   const char *isa, kiln_err *err)
{
    return tm_open_mode(dir, n_ctx, max_seqs, threads, isa, NULL, err);
}

/* Feeds ids[0..n) from an empty cache in chunks of `chunk` tokens (0 = one step),
 * writing every position's logits to rows [n, vocab]. No prefix reuse. */
static inline kiln_code tm_logits(eng_runtime *rt, const int32_t *ids, int32_t n, int32_t chunk,
                                  float *rows, kiln_err *err)
{
    eng_seq *s;
    kiln_code rc = eng_seq_create(ids, n, &s, err);
    if (rc) return rc;
    int64_t vocab = mdl_vocab(rt->model);
    while (!rc && eng_seq_pending(s) > 0) {
        int32_t cap = rt->logit_rows;
        eng_step_item it = {.seq = s, .max_tokens = chunk > 0 && chunk < cap ? chunk : cap,
                            .all_logits = 1};
        rc = eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns ^ 0x5eed, rt->logits, rt->logit_rows, err);
        if (!rc) {
            memcpy(rows, rt->logits, sizeof(float) * (size_t)vocab * (size_t)it.n_logits);
            rows += (size_t)vocab * (size_t)it.n_logits;
        }
    }
    eng_seq_free(s, rt->kv);
    return rc;
}

/* Reads a whole float32 file into a new buffer; *n = floats. NULL on failure. */
static inline float *tm_read_f32(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *buf = malloc((size_t)sz + 4);
    if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *n = (size_t)sz / 4;
    return buf;
}

static inline int32_t *tm_json_ids(json_t *arr, int32_t *n)
{
    *n = (int32_t)json_array_size(arr);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int32_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

static inline double tm_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

static inline int32_t tm_argmax(const float *x, int64_t n)
{
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

#endif
