/*
 * fuzz_model_dir.c — a whole snapshot folder into the model loader:
 * config.json, one or two safetensors shards, model.safetensors.index.json
 * and generation_config.json, in every combination the input makes, through
 * mdl_load (weights/wt_config.c + wt_set.c + wt_safetensors.c + the name and
 * shape mapping of model/mdl_load.c, MLX quantization specs included).
 *
 * Input: parts separated by the 8 bytes "\n<KILN>\n": config.json | first
 * shard | second shard | index | generation_config.json (missing parts are
 * absent files; one shard is written as model.safetensors, two as
 * model-0000{1,2}-of-00002.safetensors). The files go to a private folder
 * (/dev/shm when there is one) that is emptied after every input.
 * Checks, beyond no crash, no leak, no UB: a loaded model describes itself
 * and has a vocabulary; a failure says why (KILN_FUZZ_VERBOSE=1 prints which).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_files.h"

#include "model/mdl_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_PARTS 5

static char dir_[256];

static void remove_dir(void)
{
    if (dir_[0]) rmdir(dir_); /* emptied after every input */
}

static const char *dir(void)
{
    if (dir_[0]) return dir_;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir_, sizeof dir_, "%s/kiln-fuzz-model-%d-XXXXXX", base, (int)getpid());
    if (!mkdtemp(dir_))
        dir_[0] = 0;
    else
        atexit(remove_dir);
    return dir_;
}

static const char *const NAMES[] = {"config.json", "model.safetensors",
                                    "model-00001-of-00002.safetensors",
                                    "model-00002-of-00002.safetensors",
                                    "model.safetensors.index.json", "generation_config.json"};



int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *d = dir();
    if (!d[0]) return 0;
    const uint8_t *part[N_PARTS] = {0};
    size_t len[N_PARTS] = {0};
    int n = 0;
    for (const uint8_t *p = data, *end = data + size; n < N_PARTS;) {
        const uint8_t *s = fuzz_find_sep(p, (size_t)(end - p));
        part[n] = p;
        len[n++] = s ? (size_t)(s - p) : (size_t)(end - p);
        if (!s) break;
        p = s + FUZZ_SEP_LEN;
    }
    fuzz_put(d, NAMES[0], part[0], len[0]);
    if (n == 2) fuzz_put(d, NAMES[1], part[1], len[1]);
    if (n >= 3) {
        fuzz_put(d, NAMES[2], part[1], len[1]);
        fuzz_put(d, NAMES[3], part[2], len[2]);
    }
    if (n >= 4 && len[3]) fuzz_put(d, NAMES[4], part[3], len[3]);
    if (n >= 5 && len[4]) fuzz_put(d, NAMES[5], part[4], len[4]);
    mdl_model *m = NULL;
    kiln_err err;
    err.code = KILN_OK;
    if (mdl_load(d, &m, &err) == KILN_OK) {
        char buf[1024];
        if (mdl_vocab(m) <= 0) __builtin_trap();
        (void)mdl_describe_groups(m, buf, sizeof buf);
        (void)mdl_get_info(m);
        (void)mdl_fingerprint(m);
        mdl_free(m);
        if (getenv("KILN_FUZZ_VERBOSE")) fprintf(stderr, "loaded: %s\n", buf);
    } else if (err.code == KILN_OK || !err.msg[0]) {
        __builtin_trap(); /* a failure must say why */
    } else if (getenv("KILN_FUZZ_VERBOSE")) {
        fprintf(stderr, "refused: %s\n", err.msg);
    }
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        fuzz_rm(d, NAMES[i]);
    return 0;
}
