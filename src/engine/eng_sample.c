/*
 * eng_sample.c — processors, filters and the draw; see eng_sample.h for the order.
 *
 * Filters work on a candidate list: the tokens whose log-probability is within
 * 30 nats of the best (the rest carry < 1e-13 of the mass each, < 2e-8 in all
 * for a 128k vocabulary), sorted by probability, ties by id. Everything is a
 * fixed sequence of operations over the row: no dependence on other rows.
 */
#include "engine/eng_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CAND_NATS 30.0f
#define SELECT_MAX 256 /* sorted-prefix lengths up to this use insertion selection */

eng_sampling eng_sampling_default(void)
{
    eng_sampling sp = {
        .temperature = 0.0f,
        .top_p = 1.0f,
        .top_k = 0,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .penalty_window = 64,
    };
    return sp;
}

kiln_code eng_sampling_validate(const eng_sampling *sp, int64_t vocab, kiln_err *err)
{
    if (!(sp->temperature >= 0.0f) || !isfinite(sp->temperature))
        return kiln_fail(err, KILN_E_INVALID, "temperature must be >= 0, got %g",
                         (double)sp->temperature);
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f))
        return kiln_fail(err, KILN_E_INVALID, "top_p must be in (0, 1], got %g", (double)sp->top_p);
    if (sp->top_k < 0)
        return kiln_fail(err, KILN_E_INVALID, "top_k must be >= 0, got %d", (int)sp->top_k);
    if (!(sp->min_p >= 0.0f && sp->min_p <= 1.0f))
        return kiln_fail(err, KILN_E_INVALID, "min_p must be in [0, 1], got %g", (double)sp->min_p);
    if (!(sp->repetition_penalty > 0.0f) || !isfinite(sp->repetition_penalty))
        return kiln_fail(err, KILN_E_INVALID, "repetition_penalty must be > 0, got %g",
                         (double)sp->repetition_penalty);
    if (!(sp->presence_penalty >= -2.0f && sp->presence_penalty <= 2.0f))
        return kiln_fail(err, KILN_E_INVALID, "presence_penalty must be in [-2, 2], got %g",
                         (double)sp->presence_penalty);
    if (!(sp->frequency_penalty >= -2.0f && sp->frequency_penalty <= 2.0f))
        return kiln_fail(err, KILN_E_INVALID, "frequency_penalty must be in [-2, 2], got %g",
                         (double)sp->frequency_penalty);
    if (sp->penalty_window < 0)
        return kiln_fail(err, KILN_E_INVALID, "penalty window must be >= 0");
    if (sp->top_logprobs < 0 || sp->top_logprobs > ENG_MAX_TOP_LOGPROBS)
        return kiln_fail(err, KILN_E_INVALID, "top_logprobs must be in [0, %d], got %d",
                         ENG_MAX_TOP_LOGPROBS, (int)sp->top_logprobs);
    for (int32_t i = 0; i < sp->n_bias; i++) {
        if (sp->logit_bias[i].token < 0 || sp->logit_bias[i].token >= vocab)
            return kiln_fail(err, KILN_E_INVALID, "logit_bias: token %d is out of range (vocab %lld)",
                             (int)sp->logit_bias[i].token, (long long)vocab);
        if (!isfinite(sp->logit_bias[i].bias) && sp->logit_bias[i].bias > 0)
            return kiln_fail(err, KILN_E_INVALID, "logit_bias: bias must be finite or -inf");
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- rng: counter-based */

/* SplitMix64's finalizer (Stafford's Mix13 variant): a bijection on 64 bits
 * whose output bits each depend on every input bit. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void eng_rng_seed(eng_rng *r, uint64_t seed)
{
    r->s[0] = mix64(seed + 0x9e3779b97f4a7c15ull);
    r->s[1] = r->s[2] = r->s[3] = 0;
}

void eng_rng_at(eng_rng *r, int64_t pos)
{
    r->s[1] = (uint64_t)pos;
    r->s[2] = 0;
}

/* A counter-based generator (in the spirit of Philox/Threefry, with a cheaper
 * mixer): the word for (key, pos, draw) is mix64 chained over the three, so
 * neighbouring positions and draws give unrelated words. */
double eng_rng_uniform(eng_rng *r)
{
    uint64_t x = mix64(r->s[0] ^ mix64(r->s[1] + 0x9e3779b97f4a7c15ull));
    x = mix64(x + 0xd1b54a32d192ed03ull * (r->s[2]++ + 1));
    return (double)(x >> 11) * 0x1.0p-53;
}

/* ---------------------------------------------------------------- processors */

typedef struct {
    int32_t id;
    float lp;
} cand;

size_t eng_sample_scratch_bytes(int64_t vocab)
{
    return (size_t)vocab * (sizeof(cand) + sizeof(int32_t)) + 128;
}

/* Penalties over the last window tokens of history; counts via a small
 * sort of the window (no per-vocab table needed). */
static void apply_penalties(const eng_sampling *sp, float *logits, const int32_t *hist,
                            int64_t n_hist, int64_t vocab, int32_t *buf)
{
    int rep = sp->repetition_penalty != 1.0f;
    int pres = sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f;
    if ((!rep && !pres) || n_hist <= 0 || sp->penalty_window == 0) return;
    int64_t n = n_hist < sp->penalty_window ? n_hist : sp->penalty_window;
    const int32_t *w = hist + (n_hist - n);
    memcpy(buf, w, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 1; i < n; i++) { /* insertion sort: windows are small */
        int32_t v = buf[i];
        int64_t j = i;
        while (j > 0 && buf[j - 1] > v) {
            buf[j] = buf[j - 1];
            j--;
        }
        buf[j] = v;
    }
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && buf[j] == buf[i]) j++;
        int32_t tok = buf[i];
        if (tok >= 0 && tok < vocab) {
            float *l = &logits[tok];
            if (rep) *l = *l < 0 ? *l * sp->repetition_penalty : *l / sp->repetition_penalty;
            if (pres) *l -= sp->presence_penalty + sp->frequency_penalty * (float)(j - i);
        }
        i = j;
    }
}

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->lp > y->lp) return -1;
    if (x->lp < y->lp) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t eng_sample_row(const eng_sampling *sp, float *logits, int64_t vocab,
                       const int32_t *history, int64_t n_history, eng_rng *rng, void *scratch,
                       eng_sample_out *out)
{
    return eng_sample_row_masked(sp, logits, vocab, history, n_history, NULL, rng, scratch, out);
}

/* Sorted-prefix selection of the candidates within CAND_NATS of the best: the
 * first `limit` by probability then id. */
static int32_t select_prefix(cand *c, int32_t n, cand x, int32_t limit)
{
    if (n == limit && cand_cmp(&x, &c[n - 1]) >= 0) return n;
    int32_t j = n < limit ? n++ : n - 1; /* insertion into the sorted prefix */
    while (j > 0 && cand_cmp(&x, &c[j - 1]) < 0) {
        c[j] = c[j - 1];
        j--;
    }
    c[j] = x;
    return n;
}

int32_t eng_sample_row_masked(const eng_sampling *sp, float *logits, int64_t vocab,
                              const int32_t *history, int64_t n_history, const uint64_t *allow,
                              eng_rng *rng, void *scratch, eng_sample_out *out)
{
    cand *c = scratch;
    int32_t *ibuf = (int32_t *)(c + vocab);
    for (int32_t i = 0; i < sp->n_bias; i++) logits[sp->logit_bias[i].token] += sp->logit_bias[i].bias;
    apply_penalties(sp, logits, history, n_history, vocab, ibuf);

    /* the tokens in play: all, or the allowed ones (a grammar's mask) in id order */
    int32_t n_ids = 0;
    if (allow) {
        for (int64_t w = 0; w < (vocab + 63) / 64; w++)
            for (uint64_t x = allow[w]; x; x &= x - 1) {
                int64_t i = w * 64 + __builtin_ctzll(x);
                if (i < vocab) ibuf[n_ids++] = (int32_t)i;
            }
        if (n_ids == 0) return -1;
    }
#define EACH(i, ...)                                                                               \
    do {                                                                                           \
        if (allow)                                                                                 \
            for (int32_t k_ = 0; k_ < n_ids; k_++) {                                               \
                int64_t i = ibuf[k_];                                                              \
                __VA_ARGS__;                                                                       \
            }                                                                                      \
        else                                                                                       \
            for (int64_t i = 0; i < vocab; i++) {                                                  \
                __VA_ARGS__;                                                                       \
            }                                                                                      \
    } while (0)

    /* log-softmax: max, then Σexp in index order */
    int32_t best = allow ? ibuf[0] : 0;
    EACH(i, if (logits[i] > logits[best]) best = (int32_t)i);
    float mx = logits[best];
    double sum = 0.0;
    EACH(i, sum += exp((double)(logits[i] - mx)));
    float lse = mx + (float)log(sum);

    int32_t n = 0;
    int need_cands = sp->temperature > 0.0f || sp->top_logprobs > 0;
    if (need_cands) {
        /* only the first `limit` of the sorted candidates are ever read: greedy
         * needs the top_logprobs, top_k sampling its k (top_p/min_p cut inside
         * that prefix). A flat distribution (a random model, high temperature)
         * has most of the vocabulary within CAND_NATS: selecting a short prefix
         * instead of sorting 100k+ entries saves ~10 ms a token. */
        int32_t limit = (int32_t)vocab;
        if (sp->temperature <= 0.0f) limit = sp->top_logprobs;
        else if (sp->top_k > 0) limit = sp->top_k > sp->top_logprobs ? sp->top_k : sp->top_logprobs;
        if (limit <= SELECT_MAX) {
            EACH(i, if (logits[i] >= mx - CAND_NATS) {
                cand x = {(int32_t)i, logits[i] - lse};
                n = select_prefix(c, n, x, limit);
            });
        } else {
            EACH(i, if (logits[i] >= mx - CAND_NATS) {
                cand x = {(int32_t)i, logits[i] - lse};
                c[n++] = x;
            });
            qsort(c, (size_t)n, sizeof *c, cand_cmp);
        }
    }
#undef EACH
    int32_t tok = best;
    if (sp->temperature > 0.0f) {
        int32_t keep = n;
        if (sp->top_p < 1.0f) { /* smallest prefix whose mass reaches top_p */
            double cum = 0.0;
            for (int32_t i = 0; i < n; i++) {
                cum += exp((double)c[i].lp);
                if (cum >= sp->top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if (sp->min_p > 0.0f) {
            float thr = c[0].lp + logf(sp->min_p);
            int32_t k = 0;
            while (k < keep && c[k].lp >= thr) k++;
            keep = k > 0 ? k : 1;
        }
        if (sp->top_k > 0 && sp->top_k < keep) keep = sp->top_k;
        /* softmax(lp / T) over the kept candidates, in their sorted order */
        double inv_t = 1.0 / sp->temperature, tot = 0.0;
        for (int32_t i = 0; i < keep; i++) tot += exp((double)(c[i].lp - c[0].lp) * inv_t);
        double u = eng_rng_uniform(rng) * tot, acc = 0.0;
        tok = c[keep - 1].id;
        for (int32_t i = 0; i < keep; i++) {
            acc += exp((double)(c[i].lp - c[0].lp) * inv_t);
            if (u < acc) {
                tok = c[i].id;
                break;
            }
        }
    }
    if (out) {
        out->token = tok;
        out->logprob = logits[tok] - lse;
        out->n_top = sp->top_logprobs < n ? sp->top_logprobs : n;
        for (int32_t i = 0; i < out->n_top; i++) {
            out->top_ids[i] = c[i].id;
            out->top_logprobs[i] = c[i].lp;
        }
    }
    return tok;
}
