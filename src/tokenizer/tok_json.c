/*
 * tok_json.c — tokenizer.json and tokenizer_config.json (jansson) into a
 * tok_tokenizer: the BPE model (vocab, merges in "a b" or ["a","b"] form, unk,
 * byte_fallback, fuse_unk, ignore_merges), added tokens, normalizer,
 * pre-tokenizer, post-processor, decoder; from the config, add_bos_token /
 * add_eos_token, special token strings, chat templates, cleanup.
 *
 * Invariants once tok_json_build returns KILN_OK:
 *   (1) every id in vocab, merges, added tokens and post-processor is in [0, n_ids).
 *   (2) every merge's parts and result are in the vocab (else KILN_E_CORRUPT).
 *   (3) component trees are at most MAX_DEPTH deep.
 * Errors: malformed JSON or wrong types are KILN_E_CORRUPT; models, normalizers,
 * pre-tokenizers or decoders kiln does not implement are KILN_E_UNSUPPORTED,
 * naming the type. On failure t holds partial state for tok_destroy.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

#define MAX_DEPTH 16
#define MAX_IDS (1 << 22) /* 4M ids: far above any real vocab, bounds allocations */

static const char *GPT2_RE = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                             "\\s+(?!\\S)|\\s+";

static kiln_code nomem(kiln_err *err)
{
    return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory while loading");
}

static const char *jstr(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(const json_t *o, const char *k, bool dflt)
{
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ================================================================ patterns */

static kiln_code parse_pattern(const json_t *o, tok_pattern *p, const char *what, kiln_err *err)
{
    const json_t *s = json_object_get(o, "String"), *r = json_object_get(o, "Regex");
    if (json_is_string(s)) {
        p->is_regex = false;
        p->lit_len = json_string_length(s);
        p->lit = dupn(json_string_value(s), p->lit_len);
        return p->lit ? KILN_OK : nomem(err);
    }
    if (json_is_string(r))
        return tok_pattern_compile_regex(p, json_string_value(r), json_string_length(r), err);
    return kiln_fail(err, KILN_E_CORRUPT, "%s: pattern needs \"String\" or \"Regex\"", what);
}

static kiln_code set_content(const json_t *o, const char *key, char **dst, size_t *len,
                             kiln_err *err)
{
    const json_t *v = json_object_get(o, key);
    if (v && !json_is_string(v)) return kiln_fail(err, KILN_E_CORRUPT, "\"%s\" must be a string", key);
    *len = v ? json_string_length(v) : 0;
    *dst = dupn(v ? json_string_value(v) : "", *len);
    return *dst ? KILN_OK : nomem(err);
}

static kiln_code set_char(const json_t *o, const char *key, const char *dflt, char out[8],
                          size_t *len, kiln_err *err)
{
    const json_t *v = json_object_get(o, key);
    const char *s = json_is_string(v) ? json_string_value(v) : dflt;
    size_t n = json_is_string(v) ? json_string_length(v) : strlen(dflt);
    if (n == 0 || n > 4) return kiln_fail(err, KILN_E_CORRUPT, "\"%s\" must be one character", key);
    memcpy(out, s, n);
    out[n] = 0;
    *len = n;
    return KILN_OK;
}

/* ================================================================ normalizers */

void tok_norm_free(tok_norm *n)
{
    if (!n) return;
    for (size_t i = 0; i < n->n_subs; i++) tok_norm_free(&n->subs[i]);
    free(n->subs);
    tok_pattern_free(&n->pat);
    free(n->content);
}

static kiln_code parse_norm(const json_t *o, tok_norm *n, int depth, kiln_err *err)
{
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type) return kiln_fail(err, KILN_E_CORRUPT, "normalizer: no type");
    if (depth > MAX_DEPTH) return kiln_fail(err, KILN_E_CORRUPT, "normalizer: nested too deep");
    if (!strcmp(type, "Sequence")) {
        const json_t *a = json_object_get(o, "normalizers");
        if (!json_is_array(a)) return kiln_fail(err, KILN_E_CORRUPT, "normalizer Sequence: no list");
        n->kind = TOK_NORM_SEQUENCE;
        n->subs = calloc(json_array_size(a) + 1, sizeof *n->subs);
        if (!n->subs) return nomem(err);
        for (size_t i = 0; i < json_array_size(a); i++) {
            n->n_subs = i + 1;
            kiln_code rc = parse_norm(json_array_get(a, i), &n->subs[i], depth + 1, err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    }
    static const struct {
        const char *name;
        tok_norm_kind kind;
    } simple[] = {{"NFC", TOK_NORM_NFC},           {"NFD", TOK_NORM_NFD},
                  {"NFKC", TOK_NORM_NFKC},         {"NFKD", TOK_NORM_NFKD},
                  {"Lowercase", TOK_NORM_LOWERCASE}, {"StripAccents", TOK_NORM_STRIP_ACCENTS}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name)) {
            n->kind = simple[i].kind;
            return KILN_OK;
        }
    if (!strcmp(type, "Replace")) {
        n->kind = TOK_NORM_REPLACE;
        kiln_code rc = parse_pattern(json_object_get(o, "pattern"), &n->pat, "Replace", err);
        return rc ? rc : set_content(o, "content", &n->content, &n->content_len, err);
    }
    if (!strcmp(type, "Prepend")) {
        n->kind = TOK_NORM_PREPEND;
        return set_content(o, "prepend", &n->content, &n->content_len, err);
    }
    if (!strcmp(type, "Strip")) {
        n->kind = TOK_NORM_STRIP;
        n->strip_left = jbool(o, "strip_left", true);
        n->strip_right = jbool(o, "strip_right", true);
        return KILN_OK;
    }
    return kiln_fail(err, KILN_E_UNSUPPORTED, "normalizer type \"%s\" is not supported", type);
}

/* ================================================================ pre-tokenizers */

void tok_pretok_free(tok_pretok *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_subs; i++) tok_pretok_free(&p->subs[i]);
    free(p->subs);
    tok_pattern_free(&p->pat);
    free(p->content);
}

static kiln_code parse_behavior(const json_t *o, tok_split_behavior dflt, tok_split_behavior *b,
                                kiln_err *err)
{
    const char *s = jstr(o, "behavior");
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    *b = dflt;
    if (!s) return KILN_OK;
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *b = (tok_split_behavior)i;
            return KILN_OK;
        }
    return kiln_fail(err, KILN_E_CORRUPT, "Split: unknown behavior \"%s\"", s);
}

static kiln_code parse_pre(const json_t *o, tok_pretok *p, int depth, kiln_err *err);

static kiln_code parse_pre_seq(const json_t *a, tok_pretok *p, int depth, kiln_err *err)
{
    if (!json_is_array(a)) return kiln_fail(err, KILN_E_CORRUPT, "pre-tokenizer Sequence: no list");
    p->kind = TOK_PRE_SEQUENCE;
    p->subs = calloc(json_array_size(a) + 1, sizeof *p->subs);
    if (!p->subs) return nomem(err);
    for (size_t i = 0; i < json_array_size(a); i++) {
        p->n_subs = i + 1;
        kiln_code rc = parse_pre(json_array_get(a, i), &p->subs[i], depth + 1, err);
        if (rc != KILN_OK) return rc;
    }
    return KILN_OK;
}

static kiln_code parse_metaspace(const json_t *o, tok_pretok *p, kiln_err *err)
{
    p->kind = TOK_PRE_METASPACE;
    kiln_code rc = set_char(o, "replacement", "\xE2\x96\x81", p->repl, &p->repl_len, err);
    if (rc != KILN_OK) return rc;
    const char *ps = jstr(o, "prepend_scheme");
    p->prepend = jbool(o, "add_prefix_space", true) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    if (ps && !strcmp(ps, "first")) p->prepend = TOK_PREPEND_FIRST;
    if (ps && !strcmp(ps, "never")) p->prepend = TOK_PREPEND_NEVER;
    if (ps && !strcmp(ps, "always")) p->prepend = TOK_PREPEND_ALWAYS;
    p->split = jbool(o, "split", true);
    return KILN_OK;
}

static kiln_code parse_pre(const json_t *o, tok_pretok *p, int depth, kiln_err *err)
{
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type) return kiln_fail(err, KILN_E_CORRUPT, "pre-tokenizer: no type");
    if (depth > MAX_DEPTH) return kiln_fail(err, KILN_E_CORRUPT, "pre-tokenizer: nested too deep");
    if (!strcmp(type, "Sequence")) return parse_pre_seq(json_object_get(o, "pretokenizers"), p, depth, err);
    if (!strcmp(type, "ByteLevel")) {
        p->kind = TOK_PRE_BYTELEVEL;
        p->add_prefix_space = jbool(o, "add_prefix_space", true);
        p->use_regex = jbool(o, "use_regex", true);
        return p->use_regex ? tok_pattern_compile_regex(&p->pat, GPT2_RE, strlen(GPT2_RE), err)
                            : KILN_OK;
    }
    if (!strcmp(type, "Split")) {
        p->kind = TOK_PRE_SPLIT;
        p->invert = jbool(o, "invert", false);
        kiln_code rc = parse_behavior(o, TOK_SPLIT_ISOLATED, &p->behavior, err);
        return rc ? rc : parse_pattern(json_object_get(o, "pattern"), &p->pat, "Split", err);
    }
    if (!strcmp(type, "Digits")) {
        p->kind = TOK_PRE_DIGITS;
        p->individual_digits = jbool(o, "individual_digits", false);
        return KILN_OK;
    }
    if (!strcmp(type, "Metaspace")) return parse_metaspace(o, p, err);
    if (!strcmp(type, "Whitespace")) {
        p->kind = TOK_PRE_WHITESPACE;
        static const char *ws = "\\w+|[^\\w\\s]+";
        return tok_pattern_compile_regex(&p->pat, ws, strlen(ws), err);
    }
    if (!strcmp(type, "WhitespaceSplit")) {
        p->kind = TOK_PRE_WHITESPACE_SPLIT;
        return KILN_OK;
    }
    if (!strcmp(type, "Punctuation")) {
        p->kind = TOK_PRE_PUNCTUATION;
        return parse_behavior(o, TOK_SPLIT_ISOLATED, &p->behavior, err);
    }
    if (!strcmp(type, "BertPreTokenizer")) {
        /* HF: split on whitespace (removed), then isolate each punctuation char */
        p->kind = TOK_PRE_SEQUENCE;
        p->subs = calloc(2, sizeof *p->subs);
        if (!p->subs) return nomem(err);
        p->n_subs = 2;
        p->subs[0].kind = TOK_PRE_WHITESPACE_SPLIT;
        p->subs[1].kind = TOK_PRE_PUNCTUATION;
        p->subs[1].behavior = TOK_SPLIT_ISOLATED;
        return KILN_OK;
    }
    if (!strcmp(type, "Replace")) {
        p->kind = TOK_PRE_REPLACE;
        kiln_code rc = parse_pattern(json_object_get(o, "pattern"), &p->pat, "Replace", err);
        return rc ? rc : set_content(o, "content", &p->content, &p->content_len, err);
    }
    return kiln_fail(err, KILN_E_UNSUPPORTED, "pre-tokenizer type \"%s\" is not supported", type);
}

static bool pre_ends_bytelevel(const tok_pretok *p)
{
    if (!p) return false;
    if (p->kind == TOK_PRE_BYTELEVEL) return true;
    if (p->kind == TOK_PRE_SEQUENCE && p->n_subs) return pre_ends_bytelevel(&p->subs[p->n_subs - 1]);
    return false;
}

/* ================================================================ decoders */

void tok_dec_free(tok_dec *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->n_subs; i++) tok_dec_free(&d->subs[i]);
    free(d->subs);
    tok_pattern_free(&d->pat);
    free(d->content);
}

static kiln_code parse_dec(const json_t *o, tok_dec *d, int depth, kiln_err *err)
{
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type) return kiln_fail(err, KILN_E_CORRUPT, "decoder: no type");
    if (depth > MAX_DEPTH) return kiln_fail(err, KILN_E_CORRUPT, "decoder: nested too deep");
    if (!strcmp(type, "Sequence")) {
        const json_t *a = json_object_get(o, "decoders");
        if (!json_is_array(a)) return kiln_fail(err, KILN_E_CORRUPT, "decoder Sequence: no list");
        d->kind = TOK_DEC_SEQUENCE;
        d->subs = calloc(json_array_size(a) + 1, sizeof *d->subs);
        if (!d->subs) return nomem(err);
        for (size_t i = 0; i < json_array_size(a); i++) {
            d->n_subs = i + 1;
            kiln_code rc = parse_dec(json_array_get(a, i), &d->subs[i], depth + 1, err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    }
    if (!strcmp(type, "ByteLevel")) return d->kind = TOK_DEC_BYTELEVEL, KILN_OK;
    if (!strcmp(type, "ByteFallback")) return d->kind = TOK_DEC_BYTEFALLBACK, KILN_OK;
    if (!strcmp(type, "Fuse")) return d->kind = TOK_DEC_FUSE, KILN_OK;
    if (!strcmp(type, "Metaspace")) {
        d->kind = TOK_DEC_METASPACE;
        const char *ps = jstr(o, "prepend_scheme");
        d->prepend_first = ps ? strcmp(ps, "never") != 0 : jbool(o, "add_prefix_space", true);
        return set_char(o, "replacement", "\xE2\x96\x81", d->repl, &d->repl_len, err);
    }
    if (!strcmp(type, "Strip")) {
        d->kind = TOK_DEC_STRIP;
        const json_t *c = json_object_get(o, "content");
        uint32_t cp = ' ';
        if (json_is_string(c)) {
            int l = tok_utf8_next((const unsigned char *)json_string_value(c), json_string_length(c), &cp);
            if (l == 0 || (size_t)l != json_string_length(c))
                return kiln_fail(err, KILN_E_CORRUPT, "Strip decoder: content must be one character");
        }
        d->strip_cp = cp;
        json_int_t a = json_integer_value(json_object_get(o, "start"));
        json_int_t b = json_integer_value(json_object_get(o, "stop"));
        d->strip_start = (int)(a < 0 ? 0 : a > 1000 ? 1000 : a);
        d->strip_stop = (int)(b < 0 ? 0 : b > 1000 ? 1000 : b);
        return KILN_OK;
    }
    if (!strcmp(type, "Replace")) {
        d->kind = TOK_DEC_REPLACE;
        kiln_code rc = parse_pattern(json_object_get(o, "pattern"), &d->pat, "Replace decoder", err);
        return rc ? rc : set_content(o, "content", &d->content, &d->content_len, err);
    }
    if (!strcmp(type, "BPEDecoder")) {
        d->kind = TOK_DEC_BPE;
        const json_t *s = json_object_get(o, "suffix");
        if (!json_is_string(s)) {
            d->content = dupn("</w>", 4);
            d->content_len = 4;
            return d->content ? KILN_OK : nomem(err);
        }
        return set_content(o, "suffix", &d->content, &d->content_len, err);
    }
    return kiln_fail(err, KILN_E_UNSUPPORTED, "decoder type \"%s\" is not supported", type);
}

/* ================================================================ model */

static kiln_code parse_vocab(tok_tokenizer *t, const json_t *vocab, int32_t *max_id, kiln_err *err)
{
    if (!json_is_object(vocab)) return kiln_fail(err, KILN_E_CORRUPT, "model.vocab must be an object");
    if (tok_strmap_init(&t->vocab, json_object_size(vocab))) return nomem(err);
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach((json_t *)vocab, key, klen, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_IDS)
            return kiln_fail(err, KILN_E_CORRUPT, "vocab id of \"%.40s\" out of range", key);
        int32_t id = (int32_t)json_integer_value(v);
        if (tok_strmap_put(&t->vocab, key, klen, id)) return nomem(err);
        if (id > *max_id) *max_id = id;
    }
    return KILN_OK;
}

static kiln_code merge_parts(const json_t *m, size_t i, const char **a, size_t *al, const char **b,
                             size_t *bl, kiln_err *err)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (!sp) return kiln_fail(err, KILN_E_CORRUPT, "merge #%zu \"%.40s\" has no space", i, s);
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = n - *al - 1;
        return KILN_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return KILN_OK;
    }
    return kiln_fail(err, KILN_E_CORRUPT, "merge #%zu must be \"a b\" or [\"a\", \"b\"]", i);
}

static kiln_code parse_merges(tok_tokenizer *t, const json_t *merges, kiln_err *err)
{
    size_t n = json_is_array(merges) ? json_array_size(merges) : 0;
    if (merges && !json_is_array(merges))
        return kiln_fail(err, KILN_E_CORRUPT, "model.merges must be a list");
    if (n >= (size_t)INT32_MAX) return kiln_fail(err, KILN_E_CORRUPT, "too many merges");
    if (tok_mergemap_init(&t->merges, n)) return nomem(err);
    tok_buf cat = {0};
    kiln_code rc = KILN_OK;
    for (size_t i = 0; i < n && rc == KILN_OK; i++) {
        const char *a = "", *b = "";
        size_t al = 0, bl = 0;
        rc = merge_parts(json_array_get(merges, i), i, &a, &al, &b, &bl, err);
        if (rc != KILN_OK) break;
        cat.len = 0;
        if (tok_buf_put(&cat, a, al) || tok_buf_put(&cat, b, bl)) {
            rc = nomem(err);
            break;
        }
        int32_t ia = tok_strmap_get(&t->vocab, a, al), ib = tok_strmap_get(&t->vocab, b, bl);
        int32_t ic = tok_strmap_get(&t->vocab, cat.p, cat.len);
        if (ia < 0 || ib < 0 || ic < 0) {
            rc = kiln_fail(err, KILN_E_CORRUPT, "merge #%zu \"%.*s\" + \"%.*s\": token not in vocab", i,
                           (int)(al > 40 ? 40 : al), a, (int)(bl > 40 ? 40 : bl), b);
            break;
        }
        if (tok_mergemap_put(&t->merges, ia, ib, (int32_t)i, ic)) rc = nomem(err);
    }
    tok_buf_free(&cat);
    return rc;
}

/* Which characters precede "▁" inside vocab tokens (see meta_split). */
static void find_meta_split(tok_tokenizer *t)
{
    t->meta_split = !t->ignore_merges && tok_strmap_get(&t->vocab, "\xE2\x96\x81", 3) >= 0;
    for (size_t e = 0; e < t->vocab.n && t->meta_split; e++) {
        const unsigned char *k = (const unsigned char *)t->vocab.keys.p + t->vocab.ents[e].off;
        size_t n = t->vocab.ents[e].len, i = 0;
        uint32_t prev = UINT32_MAX;
        while (i < n) {
            uint32_t cp;
            int l = tok_utf8_next(k + i, n - i, &cp);
            if (!l) break;
            if (cp == 0x2581 && prev != UINT32_MAX) {
                int j = 0;
                while (j < t->n_meta_prev && t->meta_prev[j] != prev) j++;
                if (j == t->n_meta_prev) {
                    if (t->n_meta_prev == 16) {
                        t->meta_split = false; /* too many: do not split */
                        break;
                    }
                    t->meta_prev[t->n_meta_prev++] = prev;
                }
            }
            prev = cp;
            i += (size_t)l;
        }
    }
}

static kiln_code parse_model(tok_tokenizer *t, const json_t *m, int32_t *max_id, kiln_err *err)
{
    if (!json_is_object(m)) return kiln_fail(err, KILN_E_CORRUPT, "tokenizer.json has no model");
    const char *type = jstr(m, "type");
    if (type && strcmp(type, "BPE") != 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "model type \"%s\" is not supported: kiln implements BPE tokenizers only "
                         "(byte-level and SentencePiece-style)", type);
    if (!type && !json_object_get(m, "merges"))
        return kiln_fail(err, KILN_E_UNSUPPORTED, "model without type or merges: only BPE is supported");
    const json_t *dropout = json_object_get(m, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "BPE dropout is a training feature; refused");
    const char *csp = jstr(m, "continuing_subword_prefix"), *eow = jstr(m, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "BPE continuing_subword_prefix/end_of_word_suffix are not supported");
    kiln_code rc = parse_vocab(t, json_object_get(m, "vocab"), max_id, err);
    if (rc == KILN_OK) rc = parse_merges(t, json_object_get(m, "merges"), err);
    if (rc != KILN_OK) return rc;
    t->byte_fallback = jbool(m, "byte_fallback", false);
    t->fuse_unk = jbool(m, "fuse_unk", false);
    t->ignore_merges = jbool(m, "ignore_merges", false);
    const json_t *unk = json_object_get(m, "unk_token");
    t->unk_id = json_is_string(unk) ? tok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk)) : -1;
    for (int b = 0; b < 256; b++) {
        char hex[8], c[2];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_ids[b] = tok_strmap_get(&t->vocab, hex, 6);
        int l = tok_bytelevel_char((unsigned)b, c);
        t->bl_ids[b] = tok_strmap_get(&t->vocab, c, (size_t)l);
    }
    find_meta_split(t);
    return KILN_OK;
}

static kiln_code parse_added(tok_tokenizer *t, const json_t *a, int32_t *max_id, kiln_err *err)
{
    if (!a || json_is_null(a)) return KILN_OK;
    if (!json_is_array(a)) return kiln_fail(err, KILN_E_CORRUPT, "added_tokens must be a list");
    t->added = calloc(json_array_size(a) + 1, sizeof *t->added);
    if (!t->added || tok_strmap_init(&t->added_map, json_array_size(a))) return nomem(err);
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *o = json_array_get(a, i), *id = json_object_get(o, "id");
        const json_t *c = json_object_get(o, "content");
        if (!json_is_integer(id) || !json_is_string(c) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= MAX_IDS)
            return kiln_fail(err, KILN_E_CORRUPT, "added token #%zu needs an id and content", i);
        tok_added *ad = &t->added[t->n_added++];
        ad->id = (int32_t)json_integer_value(id);
        ad->len = json_string_length(c);
        ad->content = dupn(json_string_value(c), ad->len);
        if (!ad->content) return nomem(err);
        ad->special = jbool(o, "special", false);
        ad->normalized = jbool(o, "normalized", !ad->special);
        ad->lstrip = jbool(o, "lstrip", false);
        ad->rstrip = jbool(o, "rstrip", false);
        ad->single_word = jbool(o, "single_word", false);
        if (tok_strmap_put(&t->added_map, ad->content, ad->len, ad->id)) return nomem(err);
        if (ad->id > *max_id) *max_id = ad->id;
    }
    return KILN_OK;
}

/* ================================================================ post-processor */

static kiln_code ids_append(int32_t **v, size_t *n, const int32_t *src, size_t k, bool front,
                            kiln_err *err)
{
    if (k == 0) return KILN_OK;
    int32_t *p = realloc(*v, (*n + k + 1) * sizeof *p);
    if (!p) return nomem(err);
    if (front) {
        memmove(p + k, p, *n * sizeof *p);
        memcpy(p, src, k * sizeof *p);
    } else {
        memcpy(p + *n, src, k * sizeof *p);
    }
    *v = p;
    *n += k;
    return KILN_OK;
}

static kiln_code template_ids(const json_t *specials, const char *name, int32_t **ids, size_t *n,
                              kiln_err *err)
{
    const json_t *sp = json_object_get(json_object_get(specials, name), "ids");
    if (!json_is_array(sp))
        return kiln_fail(err, KILN_E_CORRUPT, "TemplateProcessing: special token \"%.40s\" undefined", name);
    *n = json_array_size(sp);
    *ids = malloc((*n + 1) * sizeof **ids);
    if (!*ids) return nomem(err);
    for (size_t i = 0; i < *n; i++) {
        const json_t *x = json_array_get(sp, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= MAX_IDS) {
            free(*ids);
            *ids = NULL;
            return kiln_fail(err, KILN_E_CORRUPT, "TemplateProcessing: bad id for \"%.40s\"", name);
        }
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    return KILN_OK;
}

/* Wraps the current (pre, post) with one more processor: pre' = mine + pre,
 * post' = post + mine (processors in a Sequence apply in order). */
static kiln_code parse_post(tok_tokenizer *t, const json_t *o, int depth, kiln_err *err)
{
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type) return kiln_fail(err, KILN_E_CORRUPT, "post_processor: no type");
    if (depth > MAX_DEPTH) return kiln_fail(err, KILN_E_CORRUPT, "post_processor: nested too deep");
    if (!strcmp(type, "ByteLevel")) return KILN_OK; /* offsets only */
    if (!strcmp(type, "Sequence")) {
        const json_t *a = json_object_get(o, "processors");
        if (!json_is_array(a)) return kiln_fail(err, KILN_E_CORRUPT, "post_processor Sequence: no list");
        for (size_t i = 0; i < json_array_size(a); i++) {
            kiln_code rc = parse_post(t, json_array_get(a, i), depth + 1, err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(o, "single"), *sp = json_object_get(o, "special_tokens");
        if (!json_is_array(single)) return kiln_fail(err, KILN_E_CORRUPT, "TemplateProcessing: no single");
        int32_t *pre = NULL, *post = NULL;
        size_t npre = 0, npost = 0;
        bool seen_a = false;
        kiln_code rc = KILN_OK;
        for (size_t i = 0; i < json_array_size(single) && rc == KILN_OK; i++) {
            const json_t *it = json_array_get(single, i);
            const json_t *st = json_object_get(it, "SpecialToken");
            if (json_object_get(it, "Sequence")) {
                seen_a = true;
                continue;
            }
            const char *name = jstr(st, "id");
            if (!name) {
                rc = kiln_fail(err, KILN_E_CORRUPT, "TemplateProcessing: bad item");
                break;
            }
            int32_t *ids = NULL;
            size_t k = 0;
            rc = template_ids(sp, name, &ids, &k, err);
            if (rc != KILN_OK) break;
            rc = seen_a ? ids_append(&post, &npost, ids, k, false, err)
                        : ids_append(&pre, &npre, ids, k, false, err);
            free(ids);
        }
        if (rc == KILN_OK) rc = ids_append(&t->post_pre, &t->n_post_pre, pre, npre, true, err);
        if (rc == KILN_OK) rc = ids_append(&t->post_post, &t->n_post_post, post, npost, false, err);
        free(pre);
        free(post);
        return rc;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const json_t *cls = json_array_get(json_object_get(o, "cls"), 1);
        const json_t *sep = json_array_get(json_object_get(o, "sep"), 1);
        if (!json_is_integer(cls) || !json_is_integer(sep) || json_integer_value(cls) < 0 ||
            json_integer_value(sep) < 0 || json_integer_value(cls) >= MAX_IDS ||
            json_integer_value(sep) >= MAX_IDS)
            return kiln_fail(err, KILN_E_CORRUPT, "%s: bad cls/sep", type);
        int32_t c = (int32_t)json_integer_value(cls), s = (int32_t)json_integer_value(sep);
        kiln_code rc = ids_append(&t->post_pre, &t->n_post_pre, &c, 1, true, err);
        return rc ? rc : ids_append(&t->post_post, &t->n_post_post, &s, 1, false, err);
    }
    return kiln_fail(err, KILN_E_UNSUPPORTED, "post_processor type \"%s\" is not supported", type);
}

/* ================================================================ config */

/* A token in tokenizer_config: a string or an AddedToken object {"content": ...}. */
static const char *cfg_token(const json_t *cfg, const char *key)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return jstr(v, "content");
    return NULL;
}

static kiln_code add_template(tok_tokenizer *t, const char *name, const char *text, kiln_err *err)
{
    for (size_t i = 0; i < t->n_tmpls; i++)
        if (!strcmp(t->tmpls[i].name, name)) {
            char *s = strdup(text);
            if (!s) return nomem(err);
            free(t->tmpls[i].text);
            t->tmpls[i].text = s;
            return KILN_OK;
        }
    void *p = realloc(t->tmpls, (t->n_tmpls + 1) * sizeof *t->tmpls);
    if (!p) return nomem(err);
    t->tmpls = p;
    t->tmpls[t->n_tmpls].name = strdup(name);
    t->tmpls[t->n_tmpls].text = strdup(text);
    t->n_tmpls++;
    if (!t->tmpls[t->n_tmpls - 1].name || !t->tmpls[t->n_tmpls - 1].text) return nomem(err);
    return KILN_OK;
}

/* Used for tokenizer_config.json and chat_template.json alike. */
kiln_code tok_json_templates(tok_tokenizer *t, const json_t *ct, kiln_err *err);
kiln_code tok_json_templates(tok_tokenizer *t, const json_t *ct, kiln_err *err)
{
    if (json_is_string(ct)) return add_template(t, "default", json_string_value(ct), err);
    if (json_is_object(ct)) { /* {name: template} */
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)ct, k, v)
        {
            if (!json_is_string(v)) continue;
            kiln_code rc = add_template(t, k, json_string_value(v), err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    }
    if (!json_is_array(ct)) return KILN_OK;
    for (size_t i = 0; i < json_array_size(ct); i++) {
        const json_t *o = json_array_get(ct, i);
        const char *name = jstr(o, "name"), *text = jstr(o, "template");
        if (!name || !text) return kiln_fail(err, KILN_E_CORRUPT, "chat_template list item #%zu needs name and template", i);
        kiln_code rc = add_template(t, name, text, err);
        if (rc != KILN_OK) return rc;
    }
    return KILN_OK;
}

static kiln_code parse_config(tok_tokenizer *t, const json_t *cfg, kiln_err *err)
{
    static const char *keys[TOK_SP_COUNT] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                             "sep_token", "cls_token", "mask_token"};
    t->cleanup = jbool(cfg, "clean_up_tokenization_spaces", true);
    for (int i = 0; i < TOK_SP_COUNT; i++) {
        const char *s = cfg_token(cfg, keys[i]);
        if (s && !(t->special_text[i] = strdup(s))) return nomem(err);
    }
    kiln_code rc = tok_json_templates(t, json_object_get(cfg, "chat_template"), err);
    if (rc != KILN_OK) return rc;
    const json_t *extra = json_object_get(cfg, "additional_special_tokens");
    for (size_t i = 0; json_is_array(extra) && i < json_array_size(extra); i++) {
        const json_t *x = json_array_get(extra, i);
        const char *s = json_is_string(x) ? json_string_value(x) : jstr(x, "content");
        int32_t id = s ? tok_piece_to_id(t, s, strlen(s)) : -1;
        if (id >= 0) t->special[id] = 1;
    }
    return KILN_OK;
}

/* add_bos_token / add_eos_token in the config replace the post-processor's
 * template (transformers' update_post_processor). */
static kiln_code apply_add_bos_eos(tok_tokenizer *t, const json_t *cfg, kiln_err *err)
{
    const json_t *ab = json_object_get(cfg, "add_bos_token"), *ae = json_object_get(cfg, "add_eos_token");
    if (!json_is_boolean(ab) && !json_is_boolean(ae)) return KILN_OK;
    free(t->post_pre);
    free(t->post_post);
    t->post_pre = t->post_post = NULL;
    t->n_post_pre = t->n_post_post = 0;
    if (json_is_true(ab) && t->bos_id >= 0) {
        kiln_code rc = ids_append(&t->post_pre, &t->n_post_pre, &t->bos_id, 1, false, err);
        if (rc != KILN_OK) return rc;
    }
    if (json_is_true(ae) && t->eos_id >= 0)
        return ids_append(&t->post_post, &t->n_post_post, &t->eos_id, 1, false, err);
    return KILN_OK;
}

/* ================================================================ assembly */

static kiln_code build_pieces(tok_tokenizer *t, int32_t max_id, kiln_err *err)
{
    t->n_ids = max_id + 1;
    t->piece_off = malloc((size_t)t->n_ids * sizeof *t->piece_off);
    t->piece_len = calloc((size_t)t->n_ids, sizeof *t->piece_len);
    t->special = calloc((size_t)t->n_ids, 1);
    if (!t->piece_off || !t->piece_len || !t->special) return nomem(err);
    for (int32_t i = 0; i < t->n_ids; i++) t->piece_off[i] = SIZE_MAX;
    for (size_t e = 0; e < t->vocab.n; e++) {
        const struct tok_strent *s = &t->vocab.ents[e];
        int32_t val = tok_strmap_get(&t->vocab, t->vocab.keys.p + s->off, s->len);
        t->piece_off[val] = t->piece_buf.len;
        t->piece_len[val] = s->len;
        if (tok_buf_put(&t->piece_buf, t->vocab.keys.p + s->off, s->len) ||
            tok_buf_putc(&t->piece_buf, 0))
            return nomem(err);
    }
    for (size_t i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        t->piece_off[a->id] = t->piece_buf.len;
        t->piece_len[a->id] = (uint32_t)a->len;
        if (tok_buf_put(&t->piece_buf, a->content, a->len) || tok_buf_putc(&t->piece_buf, 0))
            return nomem(err);
        if (a->special) t->special[a->id] = 1;
    }
    return KILN_OK;
}

static kiln_code build_tries(tok_tokenizer *t, kiln_err *err)
{
    if (tok_trie_init(&t->trie_raw) || tok_trie_init(&t->trie_norm)) return nomem(err);
    tok_rx rx;
    if (tok_rx_init(&rx)) return nomem(err);
    kiln_code rc = KILN_OK;
    tok_buf nb = {0};
    for (size_t i = 0; i < t->n_added && rc == KILN_OK; i++) {
        tok_added *a = &t->added[i];
        if (a->normalized && t->norm) {
            rc = tok_norm_apply(t->norm, &rx, a->content, a->len, &nb, err);
            if (rc != KILN_OK) break;
            a->norm_len = nb.len;
            a->norm_content = dupn(nb.p ? nb.p : "", nb.len);
            if (!a->norm_content || tok_trie_add(&t->trie_norm, a->norm_content, a->norm_len, (int32_t)i))
                rc = nomem(err);
        } else if (tok_trie_add(&t->trie_raw, a->content, a->len, (int32_t)i)) {
            rc = nomem(err);
        }
    }
    tok_buf_free(&nb);
    tok_rx_free(&rx);
    return rc;
}

static kiln_code build_components(tok_tokenizer *t, const json_t *root, kiln_err *err)
{
    const json_t *n = json_object_get(root, "normalizer"), *p = json_object_get(root, "pre_tokenizer");
    const json_t *d = json_object_get(root, "decoder"), *pp = json_object_get(root, "post_processor");
    kiln_code rc;
    if (n && !json_is_null(n)) {
        if (!(t->norm = calloc(1, sizeof *t->norm))) return nomem(err);
        if ((rc = parse_norm(n, t->norm, 0, err)) != KILN_OK) return rc;
    }
    if (p && !json_is_null(p)) {
        if (!(t->pre = calloc(1, sizeof *t->pre))) return nomem(err);
        if ((rc = parse_pre(p, t->pre, 0, err)) != KILN_OK) return rc;
        t->pre_bytelevel_last = pre_ends_bytelevel(t->pre);
    }
    if (d && !json_is_null(d)) {
        if (!(t->dec = calloc(1, sizeof *t->dec))) return nomem(err);
        if ((rc = parse_dec(d, t->dec, 0, err)) != KILN_OK) return rc;
    }
    if (pp && !json_is_null(pp) && (rc = parse_post(t, pp, 0, err)) != KILN_OK) return rc;
    return KILN_OK;
}

static kiln_code check_post_ids(const tok_tokenizer *t, kiln_err *err)
{
    for (size_t i = 0; i < t->n_post_pre; i++)
        if (t->post_pre[i] >= t->n_ids) return kiln_fail(err, KILN_E_CORRUPT, "post_processor id %d out of vocab", (int)t->post_pre[i]);
    for (size_t i = 0; i < t->n_post_post; i++)
        if (t->post_post[i] >= t->n_ids) return kiln_fail(err, KILN_E_CORRUPT, "post_processor id %d out of vocab", (int)t->post_post[i]);
    return KILN_OK;
}

kiln_code tok_json_build(tok_tokenizer *t, const char *json, size_t len, const char *cfgs,
                         size_t cfg_len, kiln_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je), *cfg = NULL;
    kiln_code rc;
    if (!json_is_object(root)) {
        rc = kiln_fail(err, KILN_E_CORRUPT, "tokenizer.json: %s (line %d)", root ? "not an object" : je.text, je.line);
        goto done;
    }
    if (cfgs) {
        cfg = json_loadb(cfgs, cfg_len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je); /* model_max_length: 1e30 */
        if (!json_is_object(cfg)) {
            rc = kiln_fail(err, KILN_E_CORRUPT, "tokenizer_config.json: %s (line %d)", cfg ? "not an object" : je.text, je.line);
            goto done;
        }
    }
    int32_t max_id = -1;
    t->bos_id = t->eos_id = t->unk_id = -1;
    if ((rc = parse_model(t, json_object_get(root, "model"), &max_id, err)) != KILN_OK) goto done;
    if ((rc = parse_added(t, json_object_get(root, "added_tokens"), &max_id, err)) != KILN_OK) goto done;
    if (max_id < 0) {
        rc = kiln_fail(err, KILN_E_CORRUPT, "tokenizer.json: empty vocabulary");
        goto done;
    }
    if ((rc = build_pieces(t, max_id, err)) != KILN_OK) goto done;
    if ((rc = build_components(t, root, err)) != KILN_OK) goto done;
    if ((rc = check_post_ids(t, err)) != KILN_OK) goto done;
    if ((rc = build_tries(t, err)) != KILN_OK) goto done;
    if (cfg) {
        if ((rc = parse_config(t, cfg, err)) != KILN_OK) goto done;
        const char *bos = t->special_text[TOK_SP_BOS], *eos = t->special_text[TOK_SP_EOS];
        if (bos) t->bos_id = tok_piece_to_id(t, bos, strlen(bos));
        if (eos) t->eos_id = tok_piece_to_id(t, eos, strlen(eos));
        for (int i = 0; i < TOK_SP_COUNT; i++) {
            const char *s = t->special_text[i];
            int32_t id = s ? tok_piece_to_id(t, s, strlen(s)) : -1;
            if (id >= 0) t->special[id] = 1;
        }
        rc = apply_add_bos_eos(t, cfg, err);
    } else {
        t->cleanup = true;
    }
done:
    json_decref(root);
    json_decref(cfg);
    return rc;
}
