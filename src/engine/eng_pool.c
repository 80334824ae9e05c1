/*
 * eng_pool.c — embedding pooling over final hidden states (see eng_pool.h).
 * Threads: pure functions; the engine thread calls them.
 */
#include "engine/eng_pool.h"

#include <math.h>
#include <string.h>

static const char *const names[] = {
    [ENG_POOL_NONE] = "none", [ENG_POOL_MEAN] = "mean", [ENG_POOL_CLS] = "cls",
    [ENG_POOL_LAST] = "last", [ENG_POOL_MAX] = "max", [ENG_POOL_MEAN_SQRT_LEN] = "mean_sqrt_len",
};

const char *eng_pool_name(eng_pooling p)
{
    return p >= ENG_POOL_NONE && p <= ENG_POOL_MEAN_SQRT_LEN ? names[p] : "?";
}

int eng_pool_parse(const char *s, eng_pooling *out)
{
    for (int i = ENG_POOL_MEAN; i <= ENG_POOL_MEAN_SQRT_LEN; i++)
        if (!strcmp(s, names[i])) {
            *out = (eng_pooling)i;
            return 0;
        }
    return -1;
}

int eng_pool_needs_all(eng_pooling p)
{
    return p != ENG_POOL_LAST && p != ENG_POOL_NONE;
}

void eng_pool_init(eng_pooling p, double *acc, int64_t hidden)
{
    for (int64_t d = 0; d < hidden; d++) acc[d] = p == ENG_POOL_MAX ? -INFINITY : 0.0;
}

void eng_pool_add(eng_pooling p, double *acc, const float *rows, int32_t n, int64_t hidden,
                  int32_t pos0, int32_t n_total)
{
    for (int32_t j = 0; j < n; j++) {
        const float *r = rows + (int64_t)j * hidden;
        int32_t pos = pos0 + j;
        switch (p) {
        case ENG_POOL_MEAN:
        case ENG_POOL_MEAN_SQRT_LEN:
            for (int64_t d = 0; d < hidden; d++) acc[d] += (double)r[d];
            break;
        case ENG_POOL_MAX:
            for (int64_t d = 0; d < hidden; d++)
                if ((double)r[d] > acc[d]) acc[d] = (double)r[d];
            break;
        case ENG_POOL_CLS:
            if (pos == 0)
                for (int64_t d = 0; d < hidden; d++) acc[d] = (double)r[d];
            break;
        case ENG_POOL_LAST:
            if (pos == n_total - 1)
                for (int64_t d = 0; d < hidden; d++) acc[d] = (double)r[d];
            break;
        default: break;
        }
    }
}

void eng_pool_finish(eng_pooling p, const double *acc, int64_t hidden, int32_t n_total, float *out)
{
    double div = p == ENG_POOL_MEAN ? (double)n_total
                 : p == ENG_POOL_MEAN_SQRT_LEN ? sqrt((double)n_total)
                                                : 1.0;
    if (div <= 0) div = 1.0;
    for (int64_t d = 0; d < hidden; d++) out[d] = (float)(acc[d] / div);
}
