/*
 * gr_schema_scalar.c — JSON Schema strings, formats and numbers as grammar.
 *
 * Strings: minLength/maxLength count characters (gr_json.c); `pattern`s and
 * `format`s are regular languages intersected with each other and with the
 * length bound (gr_and: the product of their DFAs), so every combination is
 * exact. Formats produce a subset that every validator accepts (ASCII-only
 * e-mail and hostnames, URIs without percent escapes, real calendar dates with
 * leap years, ...). Formats outside the JSON Schema vocabulary are
 * annotations for validators and are ignored here too.
 * Numbers: bounds (minimum, maximum, exclusive forms, draft 4's booleans
 * included) are digit-string comparisons against the bound's shortest decimal
 * form; a bounded number has no exponent and at most 15 significant digits, so
 * the decimal a validator parses is exactly the double it compares. multipleOf
 * an integer k is a divisibility automaton (one rule per remainder);
 * fractional multipleOf is refused (validators disagree: 0.3 / 0.1 is not an
 * integer in binary floating point).
 */
#include "grammar/gr_schema_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ formats */

#define Y "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
#define DATE                                                                                       \
    "(" Y "-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|" Y "-(0[469]|11)-(0[1-9]|[12][0-9]|30)|" Y  \
    "-02-(0[1-9]|1[0-9]|2[0-8])|([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|"      \
    "[13579][26])00)-02-29)"
#define TIME                                                                                       \
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]" \
    ")"
#define LABEL "[A-Za-z]([A-Za-z0-9]|-[A-Za-z0-9]){0,14}"
#define HOST LABEL "(\\." LABEL "){0,3}"
#define PCHAR "[A-Za-z0-9._~!$&'()*+,;=:@-]"
#define URI                                                                                        \
    "https?://" HOST "(:[0-9]{1,5})?(/" PCHAR "*)*(\\?(" PCHAR "|[/?])*)?(#(" PCHAR "|[/?])*)?"
#define REL "/[A-Za-z0-9._~!$&'()*+,;=@-]+(/" PCHAR "*)*"
#define DUR_T "T([0-9]{1,2}H([0-9]{1,2}M)?([0-9]{1,2}S)?|[0-9]{1,2}M([0-9]{1,2}S)?|[0-9]{1,2}S)"
#define DUR                                                                                        \
    "P(([0-9]{1,4}Y([0-9]{1,2}M)?([0-9]{1,2}D)?|[0-9]{1,2}M([0-9]{1,2}D)?|[0-9]{1,3}D)(" DUR_T     \
    ")?|[0-9]{1,3}W|" DUR_T ")"
#define PTR "(/([^/~]|~[01])*)*"

static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"date-time", "^" DATE "T" TIME "$"},
    {"duration", "^" DUR "$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"email", "^[A-Za-z0-9]+([._+-][A-Za-z0-9]+)*@" LABEL "(\\." LABEL "){0,2}\\.[A-Za-z]{2,6}$"},
    {"idn-email",
     "^[A-Za-z0-9]+([._+-][A-Za-z0-9]+)*@" LABEL "(\\." LABEL "){0,2}\\.[A-Za-z]{2,6}$"},
    {"hostname", "^" HOST "$"},
    {"idn-hostname", "^" HOST "$"},
    {"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-"
             "9]|[1-9]?[0-9])$"},
    {"ipv6", "^([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}$"},
    {"uri", "^" URI "$"},
    {"iri", "^" URI "$"},
    {"uri-reference", "^(" URI "|" REL ")$"},
    {"iri-reference", "^(" URI "|" REL ")$"},
    {"uri-template", "^(" URI "|" REL ")$"},
    {"json-pointer", "^" PTR "$"},
    {"relative-json-pointer", "^(0|[1-9][0-9]{0,8})(#|" PTR ")$"},
    {"regex", "^[A-Za-z0-9 _-]*$"},
};

/* The JSON Schema format vocabulary (drafts 4 to 2020-12); others are ignored. */
static const char *const SPEC_FORMATS[] = {"date-time",    "date",          "time",
                                           "duration",     "email",         "idn-email",
                                           "hostname",     "idn-hostname",  "ipv4",
                                           "ipv6",         "uri",           "uri-reference",
                                           "iri",          "iri-reference", "uuid",
                                           "uri-template", "json-pointer",  "relative-json-pointer",
                                           "regex",        "host-name",     "ip-address",
                                           "color",        "utc-millisec"};

static gr_expr quoted(sc *c, gr_expr body)
{
    gr_expr q = c->syn ? c->syn->quote : gr_str(c->b, "\"");
    gr_expr x[] = {q, body, q};
    return gr_seq(c->b, x, 3);
}

gr_expr sc_syn_number(sc *c, bool integer)
{
    /* parsed back one value at a time by a JSON reader (jansson): integers
     * that fit 64 bits, reals that neither overflow nor underflow (a subset) */
    static const uint32_t D09[] = {'0', '9'}, D19[] = {'1', '9'}, E[] = {'E', 'E', 'e', 'e'},
                          S[] = {'+', '+', '-', '-'};
    gr_builder *b = c->b;
    gr_expr d = gr_class(b, D09, 1, false);
    gr_expr x[] = {gr_rep(b, gr_str(b, "-"), 0, 1),
                   gr_alt2(b, gr_str(b, "0"), gr_seq2(b, gr_class(b, D19, 1, false), gr_rep(b, d, 0, 17)))};
    gr_expr in = gr_seq(b, x, 2);
    if (integer) return in;
    gr_expr ex[] = {gr_class(b, E, 2, false), gr_rep(b, gr_class(b, S, 2, false), 0, 1), gr_rep(b, d, 1, 2)};
    gr_expr y[] = {in, gr_rep(b, gr_seq2(b, gr_str(b, "."), gr_rep(b, d, 1, 17)), 0, 1),
                   gr_rep(b, gr_seq(b, ex, 3), 0, 1)};
    return gr_seq(b, y, 3);
}

gr_expr sc_quoted(sc *c, gr_expr body)
{
    return quoted(c, body);
}

gr_expr sc_raw(sc *c)
{
    static const uint32_t any[] = {0, GR_MAX_CP};
    if (c->raw >= 0) return c->raw;
    return c->raw = c->syn->n_forbid
                        ? gr_text_without(c->b, c->syn->forbid, c->syn->n_forbid)
                        : gr_rep(c->b, gr_class(c->b, any, 1, false), 0, -1);
}

/* The string expression for a format; -2 when the format is an annotation only. */
static gr_expr format_expr(sc *c, const char *f)
{
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (!strcmp(f, FORMATS[i].name)) {
            gr_expr e;
            kiln_err err;
            if (gr_regex_add(c->b, FORMATS[i].re, strlen(FORMATS[i].re), !c->syn, &e, &err))
                return sc_fail(c, KILN_E_INTERNAL, "format '%s': %s", f, err.msg);
            return quoted(c, e);
        }
    for (size_t i = 0; i < sizeof SPEC_FORMATS / sizeof *SPEC_FORMATS; i++)
        if (!strcmp(f, SPEC_FORMATS[i]))
            return sc_fail(c, KILN_E_UNSUPPORTED, "'format': \"%s\" is not supported", f);
    return -2;
}

/* ------------------------------------------------------------ strings */

static gr_rule leaf_rule(sc *c, const char *name, gr_expr body)
{
    gr_rule r = gr_rule_new(c->b, name);
    if (r < 0 || gr_rule_define(c->b, r, body, NULL)) return -1;
    return r;
}

gr_expr sc_string(sc *c, const json_t *const *list, int n)
{
    int64_t min = 0, max = -1;
    gr_expr parts[SC_MAX_LIST * 2 + 1];
    int np = 0;
    const char *fmt_only = NULL; /* the format, when the list has nothing else */
    for (int i = 0; i < n; i++) {
        const json_t *s = list[i], *v;
        if ((v = json_object_get(s, "minLength"))) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return sc_fail(c, KILN_E_INVALID, "'minLength' must be a non-negative integer");
            if (json_integer_value(v) > min) min = json_integer_value(v);
        }
        if ((v = json_object_get(s, "maxLength"))) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return sc_fail(c, KILN_E_INVALID, "'maxLength' must be a non-negative integer");
            if (max < 0 || json_integer_value(v) < max) max = json_integer_value(v);
        }
        if ((v = json_object_get(s, "pattern"))) {
            if (!json_is_string(v)) return sc_fail(c, KILN_E_INVALID, "'pattern' must be a string");
            gr_expr e;
            kiln_err err;
            if (gr_regex_add(c->b, json_string_value(v), json_string_length(v), !c->syn, &e, &err))
                return sc_fail(c, err.code, "%s", err.msg);
            parts[np++] = quoted(c, e);
        }
        if ((v = json_object_get(s, "format"))) {
            if (!json_is_string(v)) return sc_fail(c, KILN_E_INVALID, "'format' must be a string");
            gr_expr e = format_expr(c, json_string_value(v));
            if (e == -1) return -1;
            if (e >= 0) {
                parts[np++] = e;
                fmt_only = json_string_value(v);
            }
        }
    }
    if (max >= 0 && min > max) return gr_alt(c->b, NULL, 0); /* nothing */
    if (min > 100000 || max > 100000)
        return sc_fail(c, KILN_E_UNSUPPORTED, "'minLength'/'maxLength' over 100000");
    if (c->syn) { /* raw text: the bounds in code points, never a forbidden text */
        static const uint32_t any[] = {0, GR_MAX_CP};
        if (np == 0 && min == 0 && max < 0) {
            if (c->r_string < 0) c->r_string = leaf_rule(c, "string", quoted(c, sc_raw(c)));
            return gr_ref(c->b, c->r_string);
        }
        if (min > 0 || max >= 0)
            parts[np++] =
                quoted(c, gr_rep(c->b, gr_class(c->b, any, 1, false), (int32_t)min, (int32_t)max));
        parts[np++] = quoted(c, sc_raw(c));
        return gr_and(c->b, parts, (size_t)np);
    }
    if (np == 0 && min == 0 && max < 0) {
        if (c->r_string < 0) c->r_string = leaf_rule(c, "string", gr_json_string(c->b, 0, -1));
        return gr_ref(c->b, c->r_string);
    }
    if (np == 1 && min == 0 && max < 0 && fmt_only) { /* one format: one rule per grammar */
        for (int i = 0; i < c->n_fmt; i++)
            if (!strcmp(c->fmt[i].name, fmt_only)) return gr_ref(c->b, c->fmt[i].r);
        gr_rule r = leaf_rule(c, fmt_only, parts[0]);
        if (r >= 0 && c->n_fmt < 32) c->fmt[c->n_fmt].name = fmt_only, c->fmt[c->n_fmt++].r = r;
        return gr_ref(c->b, r);
    }
    if (min > 0 || max >= 0) parts[np++] = gr_json_string(c->b, (int32_t)min, (int32_t)max);
    if (np == 1) return gr_ref(c->b, leaf_rule(c, "string", parts[0]));
    return gr_and(c->b, parts, (size_t)np);
}

/* ------------------------------------------------------------ numbers */

typedef struct {
    bool neg;
    char ip[40]; /* integer digits, no leading zeros ("0" for zero) */
    char fp[40]; /* fraction digits, no trailing zeros */
} dec;

/* The shortest decimal that reads back as x (Python's repr), as a dec. -1 if
 * it needs more than 15 significant digits or is out of range. */
static int dec_of(double x, dec *d)
{
    char buf[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (prec > 15 || !isfinite(x)) return -1;
    /* buf: [-]d.ddde[+-]XX -> digits and exponent */
    memset(d, 0, sizeof *d);
    const char *p = buf;
    if (*p == '-') d->neg = true, p++;
    char digs[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digs[nd++] = *p;
    int e = atoi(p + 1); /* value = 0.d1d2.. * 10^(e+1) */
    int point = e + 1;   /* digits before the decimal point */
    if (point > 30 || point < -30) return -1;
    char ip[40], fp[80];
    int ni = 0, nf = 0;
    for (int i = 0; i < point; i++)
        ip[ni++] = i < nd ? digs[i] : '0';
    for (int i = point; i < 0; i++)
        fp[nf++] = '0';
    for (int i = point > 0 ? point : 0; i < nd; i++)
        fp[nf++] = digs[i];
    while (nf > 0 && fp[nf - 1] == '0')
        nf--;
    int s = 0;
    while (s < ni - 1 && ip[s] == '0')
        s++;
    if (ni == 0) ip[ni++] = '0', s = 0;
    if (ni - s >= (int)sizeof d->ip || nf >= (int)sizeof d->fp) return -1;
    memcpy(d->ip, ip + s, (size_t)(ni - s));
    memcpy(d->fp, fp, (size_t)nf);
    if (!strcmp(d->ip, "0") && !nf) d->neg = false; /* -0 is 0 */
    return 0;
}

static gr_expr digit(sc *c, int lo, int hi)
{
    if (lo > hi) return gr_alt(c->b, NULL, 0);
    uint32_t p[2] = {(uint32_t)('0' + lo), (uint32_t)('0' + hi)};
    return gr_class(c->b, p, 1, false);
}

static gr_expr digits(sc *c, int min, int max)
{
    return gr_rep(c->b, digit(c, 0, 9), min, max);
}

/* canonical integers (no sign) greater than L */
static gr_expr int_gt(sc *c, const char *L)
{
    int n = (int)strlen(L);
    gr_expr longer = gr_seq2(c->b, digit(c, 1, 9), digits(c, n, -1));
    gr_expr same = gr_alt(c->b, NULL, 0);
    for (int i = n - 1; i >= 0; i--) { /* GT(i) = [L[i]+1..9] D{n-i-1} | L[i] GT(i+1) */
        int d = L[i] - '0';
        gr_expr up = gr_seq2(c->b, digit(c, d + 1, 9), digits(c, n - i - 1, n - i - 1));
        same = gr_alt2(c->b, up, gr_seq2(c->b, digit(c, d, d), same));
    }
    return gr_alt2(c->b, longer, same);
}

/* canonical integers (no sign) less than H */
static gr_expr int_lt(sc *c, const char *H)
{
    int n = (int)strlen(H);
    gr_expr same = gr_alt(c->b, NULL, 0);
    for (int i = n - 1; i >= 0; i--) {
        int d = H[i] - '0', lo = (i == 0 && n > 1) ? 1 : 0;
        gr_expr down = gr_seq2(c->b, digit(c, lo, d - 1), digits(c, n - i - 1, n - i - 1));
        same = gr_alt2(c->b, down, gr_seq2(c->b, digit(c, d, d), same));
    }
    if (n < 2) return same;
    gr_expr shorter =
        gr_alt2(c->b, gr_str(c->b, "0"), gr_seq2(c->b, digit(c, 1, 9), digits(c, 0, n - 2)));
    return gr_alt2(c->b, shorter, same);
}

static gr_expr int_any(sc *c)
{
    return gr_alt2(c->b, gr_str(c->b, "0"), gr_seq2(c->b, digit(c, 1, 9), digits(c, 0, -1)));
}

static gr_expr frac_any(sc *c, bool integer)
{
    if (integer) return gr_seq(c->b, NULL, 0);
    return gr_rep(c->b, gr_seq2(c->b, gr_str(c->b, "."), digits(c, 1, -1)), 0, 1);
}

/* digit strings with a non-zero digit */
static gr_expr nonzero_digits(sc *c)
{
    gr_expr x[] = {digits(c, 0, -1), digit(c, 1, 9), digits(c, 0, -1)};
    return gr_seq(c->b, x, 3);
}

/* the optional fraction whose value is >= (>) 0.F */
static gr_expr frac_ge(sc *c, const char *F, bool strict, bool integer)
{
    int n = (int)strlen(F);
    if (integer) return n || strict ? gr_alt(c->b, NULL, 0) : gr_seq(c->b, NULL, 0);
    if (!n && !strict) return frac_any(c, false);
    gr_expr ge = strict ? nonzero_digits(c) : digits(c, 0, -1);
    for (int i = n - 1; i >= 0; i--) {
        int d = F[i] - '0';
        ge = gr_alt2(c->b, gr_seq2(c->b, digit(c, d + 1, 9), digits(c, 0, -1)),
                     gr_seq2(c->b, digit(c, d, d), ge));
    }
    if (!n) return gr_seq2(c->b, gr_str(c->b, "."), ge); /* strict, F empty: .0*[1-9]... */
    return gr_seq2(c->b, gr_str(c->b, "."), ge);
}

/* the optional fraction whose value is <= (<) 0.F: with LE(i) the digit
 * strings s (maybe empty) with s <= F[i..] (zero padded):
 *   LE(i) = "" | [0..F[i]-1] D* | F[i] LE(i+1),   LE(n) = 0* (strict: nothing)
 * and a fraction that starts with a digit after the point. */
static gr_expr frac_le(sc *c, const char *F, bool strict, bool integer)
{
    int n = (int)strlen(F);
    gr_expr none = gr_seq(c->b, NULL, 0), nothing = gr_alt(c->b, NULL, 0);
    if (integer) return n || !strict ? none : nothing;
    gr_expr zeros = gr_rep(c->b, gr_str(c->b, "0"), 0, -1);
    if (!n) /* value must be 0: no fraction, or zeros */
        return strict ? nothing
                      : gr_rep(c->b,
                               gr_seq2(c->b, gr_str(c->b, "."),
                                       gr_rep(c->b, gr_str(c->b, "0"), 1, -1)),
                               0, 1);
    gr_expr le = strict ? nothing : zeros;
    for (int i = n - 1; i >= 1; i--) {
        int d = F[i] - '0';
        gr_expr x[] = {none, gr_seq2(c->b, digit(c, 0, d - 1), digits(c, 0, -1)),
                       gr_seq2(c->b, digit(c, d, d), le)};
        le = gr_alt(c->b, x, 3);
    }
    int d = F[0] - '0';
    gr_expr first = gr_alt2(c->b, gr_seq2(c->b, digit(c, 0, d - 1), digits(c, 0, -1)),
                            gr_seq2(c->b, digit(c, d, d), le));
    return gr_alt2(c->b, none, gr_seq2(c->b, gr_str(c->b, "."), first));
}

static gr_expr mag_any(sc *c, bool integer)
{
    return gr_seq2(c->b, int_any(c), frac_any(c, integer));
}

static gr_expr mag_ge(sc *c, const dec *d, bool strict, bool integer)
{
    gr_expr above = gr_seq2(c->b, int_gt(c, d->ip), frac_any(c, integer));
    gr_expr at = gr_seq2(c->b, gr_str(c->b, d->ip), frac_ge(c, d->fp, strict, integer));
    return gr_alt2(c->b, above, at);
}

static gr_expr mag_le(sc *c, const dec *d, bool strict, bool integer)
{
    gr_expr below = gr_seq2(c->b, int_lt(c, d->ip), frac_any(c, integer));
    gr_expr at = gr_seq2(c->b, gr_str(c->b, d->ip), frac_le(c, d->fp, strict, integer));
    return gr_alt2(c->b, below, at);
}

static gr_expr num_ge(sc *c, const dec *lo, bool strict, bool integer)
{
    if (!lo->neg) return mag_ge(c, lo, strict, integer);
    return gr_alt2(c->b, mag_any(c, integer),
                   gr_seq2(c->b, gr_str(c->b, "-"), mag_le(c, lo, strict, integer)));
}

static gr_expr num_le(sc *c, const dec *hi, bool strict, bool integer)
{
    if (hi->neg) return gr_seq2(c->b, gr_str(c->b, "-"), mag_ge(c, hi, strict, integer));
    return gr_alt2(c->b, gr_seq2(c->b, gr_str(c->b, "-"), mag_any(c, integer)),
                   mag_le(c, hi, strict, integer));
}

typedef struct {
    bool has_lo, has_hi, lo_strict, hi_strict;
    double lo, hi;
} bounds;

static void tighten(bounds *b, double v, bool strict, bool upper)
{
    if (upper) {
        if (!b->has_hi || v < b->hi || (v == b->hi && strict)) b->hi = v, b->hi_strict = strict;
        b->has_hi = true;
    } else {
        if (!b->has_lo || v > b->lo || (v == b->lo && strict)) b->lo = v, b->lo_strict = strict;
        b->has_lo = true;
    }
}

static int read_bounds(sc *c, const json_t *const *list, int n, bounds *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < n; i++) {
        const json_t *s = list[i];
        const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
        const json_t *emn = json_object_get(s, "exclusiveMinimum"),
                     *emx = json_object_get(s, "exclusiveMaximum");
        if ((mn && !json_is_number(mn)) || (mx && !json_is_number(mx)))
            return sc_fail(c, KILN_E_INVALID, "'minimum'/'maximum' must be numbers"), -1;
        bool emn_b = emn && json_is_boolean(emn), emx_b = emx && json_is_boolean(emx); /* draft 4 */
        if ((emn && !emn_b && !json_is_number(emn)) || (emx && !emx_b && !json_is_number(emx)))
            return sc_fail(c, KILN_E_INVALID,
                           "'exclusiveMinimum'/'exclusiveMaximum' must be numbers"),
                   -1;
        if (mn) tighten(b, json_number_value(mn), emn_b && json_is_true(emn), false);
        if (mx) tighten(b, json_number_value(mx), emx_b && json_is_true(emx), true);
        if (emn && !emn_b) tighten(b, json_number_value(emn), true, false);
        if (emx && !emx_b) tighten(b, json_number_value(emx), true, true);
    }
    return 0;
}

static gr_rule remainder_rules(sc *c, int64_t k)
{
    /* R_r: the rest of a digit string after a prefix with value ≡ r (mod k) */
    gr_rule *R = malloc(sizeof *R * (size_t)k);
    if (!R) return sc_fail(c, KILN_E_NOMEM, "out of memory"), -1;
    for (int64_t r = 0; r < k; r++)
        R[r] = gr_rule_new(c->b, "multipleOf");
    for (int64_t r = 0; r < k && !c->b->failed; r++) {
        gr_expr alts[11];
        int na = 0;
        if (r == 0) alts[na++] = gr_seq(c->b, NULL, 0);
        for (int d = 0; d < 10; d++)
            alts[na++] = gr_seq2(c->b, digit(c, d, d), gr_ref(c->b, R[(10 * r + d) % k]));
        gr_rule_define(c->b, R[r], gr_alt(c->b, alts, (size_t)na), NULL);
    }
    /* canonical: 0, or a non-zero first digit d then R_{d mod k} */
    gr_expr alts[10];
    int na = 0;
    alts[na++] = gr_str(c->b, "0");
    for (int d = 1; d < 10; d++)
        alts[na++] = gr_seq2(c->b, digit(c, d, d), gr_ref(c->b, R[d % k]));
    gr_rule top = gr_rule_new(c->b, "multipleOf");
    gr_rule_define(
        c->b, top,
        gr_seq2(c->b, gr_rep(c->b, gr_str(c->b, "-"), 0, 1), gr_alt(c->b, alts, (size_t)na)), NULL);
    free(R);
    return top;
}

gr_expr sc_number(sc *c, const json_t *const *list, int n, bool integer)
{
    bounds b;
    if (read_bounds(c, list, n, &b)) return -1;
    int64_t mult = 1;
    for (int i = 0; i < n; i++) {
        const json_t *m = json_object_get(list[i], "multipleOf");
        if (!m) continue;
        double v = json_is_number(m) ? json_number_value(m) : -1;
        if (!(v > 0)) return sc_fail(c, KILN_E_INVALID, "'multipleOf' must be a number > 0");
        if (v != floor(v) || v > 100000)
            return sc_fail(c, KILN_E_UNSUPPORTED,
                           "'multipleOf': %g is not supported (integers up to "
                           "100000 only)",
                           v);
        int64_t k = (int64_t)v, a = mult, bb = k; /* lcm */
        while (bb) {
            int64_t t = a % bb;
            a = bb;
            bb = t;
        }
        mult = mult / a * k;
        if (mult > 100000)
            return sc_fail(c, KILN_E_UNSUPPORTED, "'multipleOf' combination too large");
        integer = true; /* a multiple of an integer is an integer: a valid subset */
    }
    if (mult > 1) {
        if (b.has_lo || b.has_hi)
            return sc_fail(c, KILN_E_UNSUPPORTED,
                           "'multipleOf' together with bounds is not supported");
        return gr_ref(c->b, remainder_rules(c, mult));
    }
    if (!b.has_lo && !b.has_hi) {
        gr_rule *r = integer ? &c->r_integer : &c->r_number;
        if (*r < 0)
            *r = leaf_rule(c, integer ? "integer" : "number",
                           c->syn    ? sc_syn_number(c, integer)
                           : integer ? gr_json_integer(c->b)
                                     : gr_json_number(c->b));
        return gr_ref(c->b, *r);
    }
    if (integer) { /* integral bounds: ceil / floor, strictness folded in */
        if (b.has_lo) {
            double v = b.lo_strict && b.lo == floor(b.lo) ? b.lo + 1 : ceil(b.lo);
            b.lo = v, b.lo_strict = false;
        }
        if (b.has_hi) {
            double v = b.hi_strict && b.hi == floor(b.hi) ? b.hi - 1 : floor(b.hi);
            b.hi = v, b.hi_strict = false;
        }
    }
    if (b.has_lo && b.has_hi && (b.lo > b.hi || (b.lo == b.hi && (b.lo_strict || b.hi_strict))))
        return gr_alt(c->b, NULL, 0);
    gr_expr parts[4];
    int np = 0;
    /* the syntax: no exponent; at most 15 significant digits (18 for integers) */
    gr_expr sign = gr_rep(c->b, gr_str(c->b, "-"), 0, 1);
    if (integer) {
        gr_expr mag =
            gr_alt2(c->b, gr_str(c->b, "0"), gr_seq2(c->b, digit(c, 1, 9), digits(c, 0, 17)));
        parts[np++] = gr_seq2(c->b, sign, mag);
    } else {
        gr_expr dg = gr_seq2(c->b, digit(c, 0, 9), gr_rep(c->b, gr_str(c->b, "."), 0, 1));
        parts[np++] = gr_seq2(c->b, sign, gr_rep(c->b, dg, 1, 15));
        parts[np++] = gr_seq2(c->b, gr_rep(c->b, gr_str(c->b, "-"), 0, 1), mag_any(c, false));
    }
    for (int side = 0; side < 2; side++) {
        if (!(side ? b.has_hi : b.has_lo)) continue;
        double v = side ? b.hi : b.lo;
        if (fabs(v) >= 1e15) {
            if (side == 0 && v > 0)
                return sc_fail(c, KILN_E_UNSUPPORTED, "'minimum' %g is beyond 15 digits", v);
            if (side == 1 && v < 0)
                return sc_fail(c, KILN_E_UNSUPPORTED, "'maximum' %g is beyond 15 digits", v);
            continue; /* every number kiln writes is within it */
        }
        dec d;
        if (dec_of(v, &d))
            return sc_fail(c, KILN_E_UNSUPPORTED,
                           "bound %.17g needs more than 15 significant digits", v);
        parts[np++] =
            side ? num_le(c, &d, b.hi_strict, integer) : num_ge(c, &d, b.lo_strict, integer);
    }
    return gr_and(c->b, parts, (size_t)np);
}
