/*
 * eng_spec.c — the n-gram drafter, per-row draft length and the step cost
 * model; see eng_spec.h. Pure functions over caller-owned state.
 */
#include "engine/eng_spec.h"

#include <string.h>

eng_spec_opts eng_spec_opts_default(void)
{
    eng_spec_opts o = {
        .method = ENG_SPEC_OFF, .max_draft = 4, .ngram_min = 1, .ngram_max = 3, .adaptive = 1};
    return o;
}

kiln_code eng_spec_opts_validate(const eng_spec_opts *o, kiln_err *err)
{
    if (o->method != ENG_SPEC_OFF && o->method != ENG_SPEC_NGRAM && o->method != ENG_SPEC_DRAFT &&
        o->method != ENG_SPEC_MTP)
        return kiln_fail(err, KILN_E_INVALID, "speculative method must be off, ngram, draft or mtp");
    if (o->max_draft < 1 || o->max_draft > ENG_SPEC_MAX_DRAFT)
        return kiln_fail(err, KILN_E_INVALID, "--spec-max-draft must be in 1..%d, got %d",
                         ENG_SPEC_MAX_DRAFT, (int)o->max_draft);
    if (o->ngram_min < 1 || o->ngram_max < o->ngram_min || o->ngram_max > 64)
        return kiln_fail(err, KILN_E_INVALID,
                         "--spec-ngram must be 1 <= min <= max <= 64, got %d..%d",
                         (int)o->ngram_min, (int)o->ngram_max);
    return KILN_OK;
}

const char *eng_spec_method_name(eng_spec_method m)
{
    switch (m) {
    case ENG_SPEC_OFF:
        return "off";
    case ENG_SPEC_NGRAM:
        return "ngram";
    case ENG_SPEC_DRAFT:
        return "draft";
    case ENG_SPEC_MTP:
        return "mtp";
    default:
        return "default";
    }
}

kiln_code eng_spec_method_parse(const char *s, eng_spec_method *out, kiln_err *err)
{
    if (strcmp(s, "off") == 0 || strcmp(s, "none") == 0)
        *out = ENG_SPEC_OFF;
    else if (strcmp(s, "ngram") == 0 || strcmp(s, "prompt_lookup") == 0)
        *out = ENG_SPEC_NGRAM;
    else if (strcmp(s, "draft") == 0 || strcmp(s, "draft_model") == 0)
        *out = ENG_SPEC_DRAFT;
    else if (strcmp(s, "mtp") == 0)
        *out = ENG_SPEC_MTP;
    else
        return kiln_fail(err, KILN_E_INVALID,
                         "unknown speculative method \"%.40s\" (off, ngram, draft or mtp)", s);
    return KILN_OK;
}

/* ---------------------------------------------------------------- n-gram drafter */

int32_t eng_spec_ngram_draft(const int32_t *toks, int32_t n, int32_t nmin, int32_t nmax, int32_t k,
                             int32_t *out)
{
    if (k < 1 || nmin < 1) return 0;
    for (int32_t g = nmax < n - 1 ? nmax : n - 1; g >= nmin; g--) {
        const int32_t *pat = toks + n - g;
        /* the most recent earlier occurrence: its continuation is what the
         * text most likely repeats (an edit re-quoting the lines just read) */
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (toks[i] != pat[0] || memcmp(toks + i, pat, sizeof *toks * (size_t)g) != 0) continue;
            int32_t d = n - (i + g);
            if (d > k) d = k;
            memcpy(out, toks + i + g, sizeof *toks * (size_t)d);
            return d;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- per-row length */

void eng_spec_row_init(eng_spec_row *r, const eng_spec_opts *o, int32_t max_draft)
{
    (void)o;
    r->k = max_draft;
    r->rate = 0.5;
    r->pending = 0;
}

void eng_spec_row_update(eng_spec_row *r, int32_t max_draft, int32_t drafted, int32_t accepted)
{
    if (drafted <= 0) return;
    r->rate = 0.7 * r->rate + 0.3 * (double)accepted / (double)drafted;
    if (accepted == drafted) {
        if (drafted >= r->k && r->k < max_draft) r->k++; /* the whole draft held: ask for more */
    } else {
        int32_t k = accepted + 1; /* it broke after `accepted`: next time about that long */
        if (k < r->k) r->k = k;
    }
    if (r->k < 1) r->k = 1;
    if (r->k > max_draft) r->k = max_draft;
}

void eng_spec_row_skipped(eng_spec_row *r)
{
    if (r->rate < 0.5) r->rate += 0.02 * (0.5 - r->rate);
}

/* ---------------------------------------------------------------- cost model */

void eng_spec_cost_add(eng_spec_cost *c, int32_t tokens, double seconds)
{
    if (tokens < 1 || seconds <= 0) return;
    if (tokens > ENG_SPEC_COST_MAX) tokens = ENG_SPEC_COST_MAX;
    if (!c->seen[tokens]) {
        c->t[tokens] = (float)seconds;
        c->seen[tokens] = 1;
    } else {
        c->t[tokens] = (float)(0.8 * c->t[tokens] + 0.2 * seconds);
    }
}

double eng_spec_cost_at(const eng_spec_cost *c, int32_t T, double s_per_token)
{
    if (T < 1) T = 1;
    int32_t over = 0; /* tokens past the tracked sizes */
    if (T > ENG_SPEC_COST_MAX) {
        over = T - ENG_SPEC_COST_MAX;
        T = ENG_SPEC_COST_MAX;
    }
    double extra = (double)over * (s_per_token > 0 ? s_per_token : 0);
    if (c->seen[T]) return c->t[T] + extra;
    int32_t lo = T - 1, hi = T + 1;
    while (lo >= 1 && !c->seen[lo])
        lo--;
    while (hi <= ENG_SPEC_COST_MAX && !c->seen[hi])
        hi++;
    if (lo >= 1 && hi <= ENG_SPEC_COST_MAX)
        return c->t[lo] + (c->t[hi] - c->t[lo]) * (double)(T - lo) / (double)(hi - lo) + extra;
    if (lo >= 1) return c->t[lo] + (double)(T - lo) * (s_per_token > 0 ? s_per_token : 0) + extra;
    if (hi <= ENG_SPEC_COST_MAX) return c->t[hi] + extra;
    return -1;
}

int eng_spec_pays(const eng_spec_cost *c, double s_per_token, int32_t T, double work, int32_t d,
                  double gain)
{
    return eng_spec_pays_with(c, s_per_token, T, work, d, gain, 0);
}

int eng_spec_pays_with(const eng_spec_cost *c, double s_per_token, int32_t T, double work,
                       int32_t d, double gain, double extra_s)
{
    double t0 = eng_spec_cost_at(c, T, s_per_token), t1 = eng_spec_cost_at(c, T + d, s_per_token);
    if (t0 <= 0 || t1 <= 0) return 1; /* nothing measured: draft, and so measure */
    if (t1 < t0) t1 = t0;             /* noise: a bigger step never costs less */
    return (work + gain) / (t1 + (extra_s > 0 ? extra_s : 0)) > work / t0;
}
