/*
 * cli_common.c — helpers shared by the verbs.
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_ids(const char *verb, const char *s, int32_t **out, int32_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 16, len = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return 2;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "kiln %s: bad token id list '%s'\n", verb, s);
            free(ids);
            return 2;
        }
        if (len == cap) {
            cap *= 2;
            int32_t *ni = realloc(ids, cap * sizeof *ids);
            if (!ni) {
                free(ids);
                return 2;
            }
            ids = ni;
        }
        ids[len++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    if (len == 0) {
        fprintf(stderr, "kiln %s: empty token id list\n", verb);
        free(ids);
        return 2;
    }
    *out = ids;
    *n = (int32_t)len;
    return 0;
}

int cli_fail(const char *verb, const kiln_err *err)
{
    fprintf(stderr, "kiln %s: %s\n", verb, err->msg);
    return 1;
}

int cli_kv_apply(const char *verb, const cli_kv_flags *kvf, eng_runtime_opts *o)
{
    kiln_err err;
    if (kvf->quant && kv_quant_parse(kvf->quant, &o->kv_quant, &err)) {
        fprintf(stderr, "kiln %s: %s\n", verb, err.msg);
        return 2;
    }
    if (kvf->group < 0 || kvf->group > 65536 || kvf->start < 0 || kvf->start > INT32_MAX) {
        fprintf(stderr, "kiln %s: --kv-group must be in 1..65536 and --quantized-kv-start >= 0\n",
                verb);
        return 2;
    }
    o->kv_group = (int32_t)kvf->group;
    o->kv_quant_start = (int32_t)kvf->start;
    const char *mm = kvf->matmul ? kvf->matmul : getenv("KILN_MATMUL");
    if (mm && *mm && strcmp(mm, "exact") != 0 && strcmp(mm, "int8") != 0) {
        fprintf(stderr, "kiln %s: %s '%s': expected exact or int8\n", verb,
                kvf->matmul ? "--matmul" : "KILN_MATMUL", mm);
        return 2;
    }
    o->matmul = mm;
    const char *se = kvf->state_every;
    if (se && strcmp(se, "auto") != 0) {
        char *end = NULL;
        long v = strcmp(se, "off") == 0 ? -1 : strtol(se, &end, 10);
        if (v == 0 || v < -1 || v > 1 << 20 || (v > 0 && (!end || *end))) {
            fprintf(stderr, "kiln %s: --state-every '%s': expected auto, off or a block count\n",
                    verb, se);
            return 2;
        }
        o->state_every = (int32_t)v;
    }
    if (kvf->state_blocks < 0 || kvf->state_blocks > 1 << 20) {
        fprintf(stderr, "kiln %s: --state-blocks must be in 1..1048576\n", verb);
        return 2;
    }
    o->state_blocks = (int32_t)kvf->state_blocks;
    return 0;
}
