/*
 * bench_grammar.c — constrained-decoding speed: compile time per grammar and
 * token-mask time per token (mean, p50, p99, max) on a real tokenizer.
 *
 *   bench_grammar --tokenizer DIR [--schemas FILE.jsonl] [--gbnf FILE]... [--tokens N] [--seed S]
 *                 [--emit OUT.jsonl]
 *
 * Each grammar is compiled (timed), then a seeded random walk samples allowed
 * tokens (uniformly, finishing within the token budget as the engine does) and
 * every gr_matcher_mask call is timed. A fresh vocabulary is made per run, so
 * the first schema pays for the shared leaf sets (the JSON string body); later
 * ones reuse them as a server would. Prints one key=value line per grammar and
 * a summary line. Never pass/fail on time. --emit writes, per schema line, the
 * generated text or the compile error (tests/grammar/validate.py checks them).
 */
#include "grammar/gr.h"
#include "util/plat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int use_cpu; /* --cpu: this thread's CPU time (a loaded machine deschedules us) */

/* Every figure (vocabulary build, compiles, masks) on one clock. */
static double now(void)
{
    return use_cpu ? plat_thread_cpu() : plat_now();
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int32_t pick(const uint64_t *bits, int32_t n, uint64_t *seed)
{
    int32_t count = 0;
    for (size_t w = 0; w < (size_t)(n + 63) / 64; w++)
        count += __builtin_popcountll(bits[w]);
    if (!count) return -1;
    int32_t k = (int32_t)(rnd(seed) % (uint64_t)count);
    for (int32_t t = 0; t < n; t++)
        if ((bits[t >> 6] >> (t & 63) & 1) && k-- == 0) return t;
    return -1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double *t;
    size_t n, cap;
    double compile_sum;
    double ct[4096]; /* compile times */
    size_t nct;
    int grammars, failed_compile, unfinished;
} acc;

static void acc_add(acc *a, double x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->t = realloc(a->t, sizeof *a->t * a->cap);
    }
    a->t[a->n++] = x;
}

/* One walk: returns tokens generated, -1 if it could not finish. The text goes
 * to *text (malloc'd) when text is not NULL. */
static int run_walk(gr_grammar *g, gr_vocab *v, int max_tokens, uint64_t seed, acc *all,
                    double *mask_sum, double *mask_max, char **text)
{
    size_t tl = 0, tcap = 256;
    char *tb = text ? malloc(tcap) : NULL;
    kiln_err err;
    gr_matcher *m;
    if (gr_matcher_create(g, v, &m, &err)) return -1;
    int32_t n = gr_vocab_size(v);
    uint64_t *bits = calloc(gr_vocab_words(v), 8);
    int used = 0;
    for (; used < max_tokens && !gr_matcher_done(m); used++) {
        if (gr_matcher_accepting(m) && rnd(&seed) % 4 == 0) break;
        double t0 = now();
        if (gr_matcher_mask(m, bits, &err)) break;
        double dt = now() - t0;
        acc_add(all, dt);
        *mask_sum += dt;
        if (dt > *mask_max) *mask_max = dt;
        int32_t left = max_tokens - used - 1;
        int32_t t = pick(bits, n, &seed);
        if (t >= 0 && gr_matcher_distance_after(m, t) > left) {
            gr_matcher_mask_within(m, left, bits, &err);
            t = pick(bits, n, &seed);
        }
        if (t < 0 || gr_matcher_accept_token(m, t, &err)) break;
        if (tb) {
            size_t n;
            const uint8_t *b = gr_vocab_token(v, t, &n);
            if (tl + n + 1 > tcap) {
                while (tl + n + 1 > tcap)
                    tcap *= 2;
                tb = realloc(tb, tcap);
            }
            memcpy(tb + tl, b, n);
            tl += n;
        }
    }
    int ok = gr_matcher_accepting(m);
    if (tb) {
        tb[tl] = 0;
        *text = tb;
    }
    free(bits);
    gr_matcher_destroy(m);
    return ok ? used : -1;
}

static void report(const char *name, acc *a)
{
    if (!a->n) return;
    qsort(a->t, a->n, sizeof *a->t, cmp_d);
    double sum = 0;
    for (size_t i = 0; i < a->n; i++)
        sum += a->t[i];
    qsort(a->ct, a->nct, sizeof *a->ct, cmp_d);
    printf("bench=grammar set=%s grammars=%d compile_failed=%d unfinished=%d tokens=%zu "
           "mask_mean_us=%.1f mask_p50_us=%.1f mask_p99_us=%.1f mask_max_us=%.1f "
           "compile_mean_ms=%.3f compile_p50_ms=%.3f compile_p90_ms=%.3f compile_max_ms=%.1f\n",
           name, a->grammars, a->failed_compile, a->unfinished, a->n, 1e6 * sum / (double)a->n,
           1e6 * a->t[a->n / 2], 1e6 * a->t[(size_t)((double)a->n * 0.99)], 1e6 * a->t[a->n - 1],
           a->grammars ? 1e3 * a->compile_sum / a->grammars : 0.0,
           a->nct ? 1e3 * a->ct[a->nct / 2] : 0.0,
           a->nct ? 1e3 * a->ct[(size_t)((double)a->nct * 0.9)] : 0.0,
           a->nct ? 1e3 * a->ct[a->nct - 1] : 0.0);
}

int main(int argc, char **argv)
{
    const char *tokdir = NULL, *schemas = NULL, *emit_path = NULL;
    FILE *emit = NULL;
    const char *gbnf[16];
    int n_gbnf = 0, tokens = 256, json_any = 1, verbose = 0, strict = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tokdir = argv[++i];
        else if (!strcmp(argv[i], "--schemas") && i + 1 < argc)
            schemas = argv[++i];
        else if (!strcmp(argv[i], "--gbnf") && i + 1 < argc && n_gbnf < 16)
            gbnf[n_gbnf++] = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-json-any"))
            json_any = 0;
        else if (!strcmp(argv[i], "--strict"))
            strict = 1;
        else if (!strcmp(argv[i], "--cpu"))
            use_cpu = 1;
        else if (!strcmp(argv[i], "--emit") && i + 1 < argc)
            emit_path = argv[++i];
        else if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else {
            fprintf(stderr,
                    "usage: %s --tokenizer DIR [--schemas F.jsonl] [--gbnf F]... "
                    "[--tokens N] [--seed S] [--no-json-any] [--strict] [--cpu] [--emit F] [-v]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!tokdir) {
        fprintf(stderr, "bench_grammar: --tokenizer DIR is required\n");
        return 2;
    }
    if (emit_path && !(emit = fopen(emit_path, "w"))) {
        fprintf(stderr, "bench_grammar: cannot write %s\n", emit_path);
        return 1;
    }
    kiln_err err;
    tok_tokenizer *tok;
    if (tok_load(tokdir, &tok, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    double t0 = now();
    gr_vocab *v;
    if (gr_vocab_create(tok, &v, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    printf("bench=grammar vocab=%d vocab_build_ms=%.1f\n", gr_vocab_size(v), 1e3 * (now() - t0));
    if (json_any) {
        static acc a;
        memset(&a, 0, sizeof a);
        double ms = 0, mx = 0;
        gr_grammar *g;
        double c0 = now();
        if (!gr_compile_json_any(NULL, NULL, &g, &err)) {
            a.compile_sum += now() - c0;
            a.grammars++;
            for (int w = 0; w < 8; w++)
                if (run_walk(g, v, tokens, seed + (uint64_t)w, &a, &ms, &mx, NULL) < 0)
                    a.unfinished++;
            gr_grammar_release(g);
        }
        report("json_any", &a);
        free(a.t);
    }
    for (int k = 0; k < n_gbnf; k++) {
        FILE *f = fopen(gbnf[k], "rb");
        if (!f) continue;
        static char text[1 << 20];
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        static acc a;
        memset(&a, 0, sizeof a);
        double ms = 0, mx = 0;
        gr_grammar *g;
        double c0 = now();
        if (gr_compile_gbnf(text, len, NULL, &g, &err)) {
            fprintf(stderr, "%s: %s\n", gbnf[k], err.msg);
            continue;
        }
        a.compile_sum += now() - c0;
        a.grammars++;
        for (int w = 0; w < 8; w++)
            if (run_walk(g, v, tokens, seed + (uint64_t)w, &a, &ms, &mx, NULL) < 0) a.unfinished++;
        gr_grammar_release(g);
        report(gbnf[k], &a);
        free(a.t);
    }
    if (schemas) {
        FILE *f = fopen(schemas, "rb");
        if (!f) {
            fprintf(stderr, "bench_grammar: cannot open %s\n", schemas);
            return 1;
        }
        static acc a;
        memset(&a, 0, sizeof a);
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        int idx = 0;
        while ((len = getline(&line, &cap, f)) > 0) {
            json_error_t je;
            json_t *s = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
            if (!s) { /* keep the numbering: one result per line */
                if (emit)
                    fprintf(emit, "{\"i\":%d,\"error\":\"bad line: %s\",\"code\":\"invalid\"}\n",
                            idx, "json");
                idx++;
                continue;
            }
            json_t *schema = json_object_get(s, "schema") ? json_object_get(s, "schema") : s;
            gr_grammar *g;
            double c0 = now();
            gr_options go = gr_options_default();
            go.json_strict = strict; /* the API's default: JSON Schema's reading */
            kiln_code rc = gr_compile_json_schema(schema, &go, &g, &err);
            double cdt = now() - c0;
            if (rc) {
                a.failed_compile++;
                if (verbose) fprintf(stderr, "schema %d: %s\n", idx, err.msg);
                if (emit) {
                    json_t *o = json_pack("{s:i, s:s, s:s}", "i", idx, "error", err.msg, "code",
                                          kiln_code_name(rc));
                    char *d = json_dumps(o, JSON_COMPACT);
                    fprintf(emit, "%s\n", d);
                    free(d);
                    json_decref(o);
                }
            } else {
                a.compile_sum += cdt;
                if (a.nct < 4096) a.ct[a.nct++] = cdt;
                a.grammars++;
                double ms = 0, mx = 0;
                size_t before = a.n;
                char *text = NULL;
                int used =
                    run_walk(g, v, tokens, seed + (uint64_t)idx, &a, &ms, &mx, emit ? &text : NULL);
                if (used < 0) a.unfinished++;
                if (emit) {
                    json_t *o = json_pack("{s:i, s:b, s:s}", "i", idx, "finished", used >= 0,
                                          "text", text ? text : "");
                    if (!o) o = json_pack("{s:i, s:b, s:s}", "i", idx, "finished", 0, "text", "");
                    char *d = json_dumps(o, JSON_COMPACT);
                    fprintf(emit, "%s\n", d);
                    free(d);
                    json_decref(o);
                }
                free(text);
                if (verbose)
                    fprintf(stderr,
                            "schema %d: compile_ms=%.2f tokens=%zu mask_mean_us=%.1f "
                            "mask_max_us=%.1f\n",
                            idx, 1e3 * cdt, a.n - before,
                            a.n > before ? 1e6 * ms / (double)(a.n - before) : 0.0, 1e6 * mx);
                gr_grammar_release(g);
            }
            json_decref(s);
            idx++;
        }
        free(line);
        fclose(f);
        report("schemas", &a);
        free(a.t);
    }
    gr_vocab_destroy(v);
    tok_destroy(tok);
    if (emit) fclose(emit);
    return 0;
}
