/*
 * tok_regex.c — tokenizer.json patterns: {"String": literal} and {"Regex": r}.
 * Regexes go through PCRE2 with PCRE2_UTF | PCRE2_UCP (so \s, \w, \d and
 * \p{..} are Unicode, like the Oniguruma engine HF uses), JIT-compiled when the
 * platform has a JIT.
 *
 * Invariants:
 *   (1) subjects are valid UTF-8 (tok_encode repairs its input first), so every
 *       match runs with PCRE2_NO_UTF_CHECK: one check per call would make a
 *       match loop over a long text quadratic.
 *   (2) compiled codes are read-only after load; match data, match context and
 *       JIT stack live in a per-call tok_rx, so one tokenizer serves many threads.
 * Errors: a JIT stack overflow retries the match in the interpreter; any other
 * PCRE2 failure is KILN_E_INTERNAL with PCRE2's message.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

int tok_rx_init(tok_rx *rx)
{
    memset(rx, 0, sizeof *rx);
    rx->md = pcre2_match_data_create(32, NULL);
    rx->mc = pcre2_match_context_create(NULL);
    if (!rx->md || !rx->mc) goto fail;
    rx->js = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, NULL);
    if (rx->js) pcre2_jit_stack_assign(rx->mc, NULL, rx->js);
    pcre2_set_match_limit(rx->mc, UINT32_MAX);
    pcre2_set_heap_limit(rx->mc, 1024 * 1024); /* KiB: 1 GiB for the interpreter fallback */
    return 0;
fail:
    tok_rx_free(rx);
    return -1;
}

void tok_rx_free(tok_rx *rx)
{
    if (rx->md) pcre2_match_data_free(rx->md);
    if (rx->mc) pcre2_match_context_free(rx->mc);
    if (rx->js) pcre2_jit_stack_free(rx->js);
    memset(rx, 0, sizeof *rx);
}

kiln_code tok_pattern_compile_regex(tok_pattern *p, const char *re, size_t len, kiln_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    p->is_regex = true;
    p->code = pcre2_compile((PCRE2_SPTR)re, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return kiln_fail(err, KILN_E_UNSUPPORTED, "regex /%.60s/ at offset %zu: %s", re,
                         (size_t)eo, (const char *)msg);
    }
    /* optional: the interpreter runs when there is no JIT */
    if (pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0) {
        size_t sz = 0;
        p->jit = pcre2_pattern_info(p->code, PCRE2_INFO_JITSIZE, &sz) == 0 && sz > 0;
    }
    return KILN_OK;
}

void tok_pattern_free(tok_pattern *p)
{
    if (p->code) pcre2_code_free(p->code);
    free(p->lit);
    memset(p, 0, sizeof *p);
}

static int range_push(tok_range **v, size_t *nv, size_t *cap, size_t s, size_t e)
{
    if (*nv == *cap) {
        size_t c = *cap ? *cap * 2 : 32;
        tok_range *nvp = realloc(*v, c * sizeof *nvp);
        if (!nvp) return -1;
        *v = nvp;
        *cap = c;
    }
    (*v)[(*nv)++] = (tok_range){s, e};
    return 0;
}

/* One PCRE2 match from `from`; 1 found, 0 none, <0 PCRE2 error code. */
static int rx_match(const tok_pattern *p, tok_rx *rx, const char *s, size_t n, size_t from,
                    uint32_t opts, size_t *ms, size_t *me)
{
    const pcre2_code *code = p->code;
    int rc = p->jit ? pcre2_jit_match(code, (PCRE2_SPTR)s, n, from, opts, rx->md, rx->mc)
                    : pcre2_match(code, (PCRE2_SPTR)s, n, from, opts | PCRE2_NO_UTF_CHECK, rx->md, rx->mc);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(code, (PCRE2_SPTR)s, n, from, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         rx->md, rx->mc);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return rc;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

static size_t utf8_step(const char *s, size_t n, size_t i)
{
    i++;
    while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    return i;
}

kiln_code tok_pattern_find(const tok_pattern *p, tok_rx *rx, const char *s, size_t n,
                           tok_range **v, size_t *nv, size_t *cap, kiln_err *err)
{
    return tok_pattern_find_from(p, rx, s, n, 0, SIZE_MAX, v, nv, cap, err);
}

kiln_code tok_pattern_find_from(const tok_pattern *p, tok_rx *rx, const char *s, size_t n,
                                size_t from, size_t max, tok_range **v, size_t *nv, size_t *cap,
                                kiln_err *err)
{
    if (!p->is_regex) {
        if (p->lit_len == 0) return KILN_OK;
        size_t i = from;
        while (i + p->lit_len <= n && *nv < max) {
            const char *hit = tok_memmem(s + i, n - i, p->lit, p->lit_len);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (range_push(v, nv, cap, at, at + p->lit_len)) goto nomem;
            i = at + p->lit_len;
        }
        return KILN_OK;
    }
    while (from <= n && *nv < max) {
        size_t ms, me;
        int rc = rx_match(p, rx, s, n, from, 0, &ms, &me);
        if (rc == 0) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return kiln_fail(err, KILN_E_INTERNAL, "regex match: %s", (const char *)msg);
        }
        if (me > ms) {
            if (range_push(v, nv, cap, ms, me)) goto nomem;
            from = me;
        } else {
            /* empty match: HF drops it; step one character past it */
            if (ms >= n) break;
            from = utf8_step(s, n, ms);
        }
    }
    return KILN_OK;
nomem:
    return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory in pattern search");
}
