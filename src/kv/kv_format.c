/*
 * kv_format.c — per-layer K/V storage formats (contract: kv_format.h):
 * flag parsing, kv_config.json, byte sizes, the description shown in /stats
 * and `kiln fit`, and the namespace hash.
 * Invariants (checked by kv_format_check_layer on every path that builds one):
 *   (1) affine formats have an even group in [2, 512] that divides head_dim
 *   (2) non-affine formats have group 0 (so equal formats compare equal bytewise)
 */
#include "kv/kv_format.h"
#include "util/plat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char *const mode_names[] = {"off", "f16", "bf16", "8", "4", "config"};

kiln_code kv_quant_parse(const char *s, kv_quant_mode *out, kiln_err *err)
{
    if (!s) return kiln_fail(err, KILN_E_INVALID, "--kv-quant: missing value");
    if (!strcmp(s, "off") || !strcmp(s, "f32") || !strcmp(s, "none"))
        *out = KV_QUANT_OFF;
    else if (!strcmp(s, "f16"))
        *out = KV_QUANT_F16;
    else if (!strcmp(s, "bf16"))
        *out = KV_QUANT_BF16;
    else if (!strcmp(s, "8") || !strcmp(s, "q8"))
        *out = KV_QUANT_8;
    else if (!strcmp(s, "4") || !strcmp(s, "q4"))
        *out = KV_QUANT_4;
    else if (!strcmp(s, "config"))
        *out = KV_QUANT_CONFIG;
    else
        return kiln_fail(err, KILN_E_INVALID,
                         "--kv-quant '%s': expected off, f16, bf16, 8, 4 or config", s);
    return KILN_OK;
}

const char *kv_quant_name(kv_quant_mode m)
{
    return m >= KV_QUANT_OFF && m <= KV_QUANT_CONFIG ? mode_names[m] : "?";
}

/* The format for `bits` (4, 8 affine; 16 bf16; 32 f32) and a requested group. */
static kiln_code make_fmt(int bits, int32_t group, int32_t head_dim, const char *what,
                          kn_kv_fmt *out, kiln_err *err)
{
    kn_kv_fmt f = {0, 0, 0};
    switch (bits) {
    case 32:
        f.dtype = KN_KV_F32;
        break;
    case 16:
        f.dtype = KN_KV_BF16;
        break;
    case 8:
        f.dtype = KN_KV_Q8;
        break;
    case 4:
        f.dtype = KN_KV_Q4;
        break;
    default:
        return kiln_fail(err, KILN_E_INVALID, "%s: bits %d (expected 4, 8, 16 or 32)", what, bits);
    }
    if (f.dtype == KN_KV_Q8 || f.dtype == KN_KV_Q4) {
        if (group == 0) group = KV_GROUP_DEFAULT;
        if (group > head_dim) group = head_dim; /* small heads: one group per head */
        if (group < 2 || group % 2 != 0 || group > 512 || head_dim % group != 0)
            return kiln_fail(err, KILN_E_INVALID,
                             "%s: group size %d must be even, at most 512, and divide head_dim %d",
                             what, (int)group, (int)head_dim);
        f.group = group;
        f.rot = kn_kv_rot_block(head_dim); /* always: see kv_format.h */
    }
    *out = f;
    return KILN_OK;
}

static kiln_code check_shape(int32_t n_layers, const int32_t *hd, int32_t quant_start,
                             int32_t group, kiln_err *err)
{
    if (n_layers < 1 || n_layers > KV_FMT_MAX_LAYERS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "kv format: %d layers", (int)n_layers);
    for (int32_t l = 0; l < n_layers; l++)
        if (hd[l] < 1 || hd[l] > 65536)
            return kiln_fail(err, KILN_E_UNSUPPORTED, "kv format: layer %d has head_dim %d", (int)l,
                             (int)hd[l]);
    if (quant_start < 0)
        return kiln_fail(err, KILN_E_INVALID, "--quantized-kv-start %d: must be >= 0",
                         (int)quant_start);
    if (group < 0) return kiln_fail(err, KILN_E_INVALID, "--kv-group %d: must be > 0", (int)group);
    return KILN_OK;
}

static void init_common(kv_format *f, int32_t n_layers, const int32_t *hd, int32_t quant_start)
{
    memset(f, 0, sizeof *f);
    f->n_layers = n_layers;
    f->head_dim = hd[0];
    for (int32_t l = 0; l < n_layers; l++) {
        f->hd[l] = hd[l];
        if (hd[l] != hd[0]) f->head_dim = 0; /* layers differ: see f->hd */
    }
    f->quant_start = quant_start;
    f->full = (kn_kv_fmt){KN_KV_F32, 0, 0};
}

/* n copies of head_dim (the uniform-shape entry points). */
static const int32_t *uniform_dims(int32_t n_layers, int32_t head_dim, int32_t *buf)
{
    for (int32_t l = 0; l < n_layers && l < KV_FMT_MAX_LAYERS; l++)
        buf[l] = head_dim;
    return buf;
}

kiln_code kv_format_init_dims(kv_format *f, kv_quant_mode mode, int32_t group, int32_t quant_start,
                              int32_t n_layers, const int32_t *hd, kiln_err *err)
{
    kiln_code rc = check_shape(n_layers, hd, quant_start, group, err);
    if (rc) return rc;
    init_common(f, n_layers, hd, quant_start);
    for (int32_t l = 0; l < n_layers; l++) {
        kn_kv_fmt one = {KN_KV_F32, 0, 0};
        switch (mode) {
        case KV_QUANT_OFF:
            break;
        case KV_QUANT_F16:
            one.dtype = KN_KV_F16;
            break;
        case KV_QUANT_BF16:
            one.dtype = KN_KV_BF16;
            break;
        case KV_QUANT_8:
        case KV_QUANT_4:
            if ((rc = make_fmt(mode == KV_QUANT_8 ? 8 : 4, group, hd[l], "--kv-quant", &one, err)))
                return rc;
            break;
        default:
            return kiln_fail(err, KILN_E_INVALID, "kv format: mode '%s' needs kv_config.json",
                             kv_quant_name(mode));
        }
        f->layer[l] = one;
    }
    return KILN_OK;
}

kiln_code kv_format_init(kv_format *f, kv_quant_mode mode, int32_t group, int32_t quant_start,
                         int32_t n_layers, int32_t head_dim, kiln_err *err)
{
    int32_t buf[KV_FMT_MAX_LAYERS];
    if (n_layers < 1 || n_layers > KV_FMT_MAX_LAYERS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "kv format: %d layers", (int)n_layers);
    return kv_format_init_dims(f, mode, group, quant_start, n_layers,
                               uniform_dims(n_layers, head_dim, buf), err);
}

/* ---------------------------------------------------------------- kv_config.json */

/* An entry: an integer (bits) or {"bits": B, "group_size": G} (also "dtype":
 * "f32"|"f16"|"bf16"). */
static kiln_code parse_entry(const json_t *e, int32_t group, int32_t head_dim, const char *what,
                             kn_kv_fmt *out, kiln_err *err)
{
    if (json_is_integer(e)) {
        json_int_t b = json_integer_value(e);
        return make_fmt(b > 64 || b < 0 ? -1 : (int)b, group, head_dim, what, out, err);
    }
    if (!json_is_object(e))
        return kiln_fail(err, KILN_E_INVALID, "%s: expected an object or a bit count", what);
    const json_t *dt = json_object_get(e, "dtype");
    if (dt) {
        const char *s = json_string_value(dt);
        if (s && !strcmp(s, "f16"))
            *out = (kn_kv_fmt){KN_KV_F16, 0, 0};
        else if (s && (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")))
            *out = (kn_kv_fmt){KN_KV_BF16, 0, 0};
        else if (s && (!strcmp(s, "f32") || !strcmp(s, "float32")))
            *out = (kn_kv_fmt){KN_KV_F32, 0, 0};
        else
            return kiln_fail(err, KILN_E_INVALID, "%s: dtype must be f32, f16 or bf16", what);
        return KILN_OK;
    }
    const json_t *b = json_object_get(e, "bits");
    if (!b) b = json_object_get(e, "kv_bits");
    const json_t *g = json_object_get(e, "group_size");
    if (!g) g = json_object_get(e, "kv_group_size");
    if (!json_is_integer(b))
        return kiln_fail(err, KILN_E_INVALID, "%s: \"bits\" must be an integer", what);
    if (g && !json_is_integer(g))
        return kiln_fail(err, KILN_E_INVALID, "%s: \"group_size\" must be an integer", what);
    json_int_t bits = json_integer_value(b), gs = g ? json_integer_value(g) : group;
    if (g && (gs < 1 || gs > 65536))
        return kiln_fail(err, KILN_E_INVALID, "%s: group_size %lld out of range", what,
                         (long long)gs);
    return make_fmt(bits > 64 || bits < 0 ? -1 : (int)bits, (int32_t)gs, head_dim, what, out, err);
}

/* "12" -> 12; anything else (signs, spaces, leading zeros, overflow) -> -1. */
static int32_t layer_index(const char *k)
{
    if (!k[0] || strlen(k) > 6 || (k[0] == '0' && k[1])) return -1;
    int32_t v = 0;
    for (const char *p = k; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static kiln_code parse_config_root(const json_t *root, const char *label, int32_t group,
                                   kv_format *f, kiln_err *err)
{
    char what[160];
    if (!json_is_object(root))
        return kiln_fail(err, KILN_E_INVALID, "%s: expected a JSON object", label);
    const json_t *d = json_object_get(root, "default");
    kiln_code rc;
    if (d) {
        snprintf(what, sizeof what, "%s: default", label);
    } else if (json_object_get(root, "bits")) { /* flat {"bits": 8, "group_size": 64} */
        d = root;
        snprintf(what, sizeof what, "%s", label);
    }
    for (int32_t l = 0; l < f->n_layers; l++) { /* the default at each layer's head_dim */
        f->layer[l] = (kn_kv_fmt){KN_KV_F32, 0, 0};
        if (d && (rc = parse_entry(d, group, f->hd[l], what, &f->layer[l], err))) return rc;
    }
    const json_t *layers = json_object_get(root, "layers");
    if (!layers) return KILN_OK;
    if (json_is_array(layers)) {
        if (json_array_size(layers) > (size_t)f->n_layers)
            return kiln_fail(err, KILN_E_INVALID, "%s: %zu layer entries for a %d-layer model",
                             label, json_array_size(layers), (int)f->n_layers);
        for (size_t i = 0; i < json_array_size(layers); i++) {
            const json_t *e = json_array_get(layers, i);
            if (json_is_null(e)) continue; /* keeps the default */
            snprintf(what, sizeof what, "%s: layer %zu", label, i);
            if ((rc = parse_entry(e, group, f->hd[i], what, &f->layer[i], err))) return rc;
        }
        return KILN_OK;
    }
    if (!json_is_object(layers))
        return kiln_fail(err, KILN_E_INVALID, "%s: \"layers\" must be an object or an array",
                         label);
    const char *k;
    const json_t *e;
    json_object_foreach((json_t *)layers, k, e)
    {
        int32_t l = layer_index(k);
        if (l < 0 || l >= f->n_layers)
            return kiln_fail(err, KILN_E_INVALID, "%s: layer '%.40s' is not in 0..%d", label, k,
                             (int)f->n_layers - 1);
        snprintf(what, sizeof what, "%s: layer %d", label, (int)l);
        if ((rc = parse_entry(e, group, f->hd[l], what, &f->layer[l], err))) return rc;
    }
    return KILN_OK;
}

kiln_code kv_format_parse_config_dims(const char *json, size_t len, const char *label,
                                      int32_t group, int32_t quant_start, int32_t n_layers,
                                      const int32_t *hd, kv_format *f, kiln_err *err)
{
    kiln_code rc = check_shape(n_layers, hd, quant_start, group, err);
    if (rc) return rc;
    init_common(f, n_layers, hd, quant_start);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return kiln_fail(err, KILN_E_INVALID, "%s: not valid JSON: %s (line %d, column %d)", label,
                         jerr.text, jerr.line, jerr.column);
    rc = parse_config_root(root, label, group, f, err);
    json_decref(root);
    return rc;
}

kiln_code kv_format_parse_config(const char *json, size_t len, const char *label, int32_t group,
                                 int32_t quant_start, int32_t n_layers, int32_t head_dim,
                                 kv_format *f, kiln_err *err)
{
    int32_t buf[KV_FMT_MAX_LAYERS];
    if (n_layers < 1 || n_layers > KV_FMT_MAX_LAYERS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "kv format: %d layers", (int)n_layers);
    return kv_format_parse_config_dims(json, len, label, group, quant_start, n_layers,
                                       uniform_dims(n_layers, head_dim, buf), f, err);
}

kiln_code kv_format_load_config_dims(const char *dir, int32_t group, int32_t quant_start,
                                     int32_t n_layers, const int32_t *hd, kv_format *f,
                                     kiln_err *err)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/kv_config.json", dir) >= sizeof path)
        return kiln_fail(err, KILN_E_INVALID, "kv_config.json: path too long");
    char *text;
    size_t len;
    kiln_code rc = plat_read_file(path, 1 << 20, &text, &len, err);
    if (rc) {
        if (rc == KILN_E_NOT_FOUND)
            return kiln_fail(err, rc, "--kv-quant config: %s does not exist", path);
        return rc;
    }
    rc = kv_format_parse_config_dims(text, len, path, group, quant_start, n_layers, hd, f, err);
    free(text);
    return rc;
}

kiln_code kv_format_load_config(const char *dir, int32_t group, int32_t quant_start,
                                int32_t n_layers, int32_t head_dim, kv_format *f, kiln_err *err)
{
    int32_t buf[KV_FMT_MAX_LAYERS];
    if (n_layers < 1 || n_layers > KV_FMT_MAX_LAYERS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "kv format: %d layers", (int)n_layers);
    return kv_format_load_config_dims(dir, group, quant_start, n_layers,
                                      uniform_dims(n_layers, head_dim, buf), f, err);
}

/* ---------------------------------------------------------------- sizes, names */

static int fmt_eq(kn_kv_fmt a, kn_kv_fmt b)
{
    return a.dtype == b.dtype && a.group == b.group && a.rot == b.rot;
}

int kv_format_split(const kv_format *f)
{
    if (f->quant_start <= 0) return 0;
    for (int32_t l = 0; l < f->n_layers; l++)
        if (!fmt_eq(f->layer[l], f->full)) return 1;
    return 0;
}

int kv_format_class(const kv_format *f, int32_t block_index, int32_t block_tokens)
{
    if (!kv_format_split(f)) return KV_CLASS_MAIN;
    return (int64_t)block_index * block_tokens < f->quant_start ? KV_CLASS_FULL : KV_CLASS_MAIN;
}

kn_kv_fmt kv_format_at(const kv_format *f, int cls, int32_t layer)
{
    return cls == KV_CLASS_FULL ? f->full : f->layer[layer];
}

uint64_t kv_format_bytes_per_token(const kv_format *f, int cls, int32_t n_kv_heads)
{
    uint64_t b = 0;
    for (int32_t l = 0; l < f->n_layers; l++)
        b += 2 * (uint64_t)n_kv_heads * kn_kv_rec_bytes(kv_format_at(f, cls, l), f->hd[l]);
    return b;
}

static int fmt_name(kn_kv_fmt k, char *buf, size_t n)
{
    if (k.dtype == KN_KV_Q8 || k.dtype == KN_KV_Q4)
        return snprintf(buf, n, "%sg%d", kn_kv_dtype_name(k.dtype), (int)k.group);
    return snprintf(buf, n, "%s", kn_kv_dtype_name(k.dtype));
}

void kv_format_describe(const kv_format *f, char *buf, size_t n)
{
    if (n == 0) return;
    buf[0] = 0;
    size_t at = 0;
    for (int32_t l = 0; l < f->n_layers;) {
        int32_t r = l + 1;
        while (r < f->n_layers && fmt_eq(f->layer[r], f->layer[l]))
            r++;
        char one[48], nm[24];
        fmt_name(f->layer[l], nm, sizeof nm);
        if (l == 0 && r == f->n_layers)
            snprintf(one, sizeof one, "%s", nm);
        else if (r - l > 1)
            snprintf(one, sizeof one, "%s%sx%d", l ? "," : "", nm, (int)(r - l));
        else
            snprintf(one, sizeof one, "%s%s", l ? "," : "", nm);
        size_t len = strlen(one);
        if (at + len + 4 >= n) {
            snprintf(buf + at, n - at, "...");
            return;
        }
        memcpy(buf + at, one, len + 1);
        at += len;
        l = r;
    }
    if (kv_format_split(f)) snprintf(buf + at, n - at, "@%d", (int)f->quant_start);
}

uint64_t kv_format_hash(const kv_format *f)
{
    /* version tag, shape, the split (canonical: 0 when it changes nothing), formats */
    int32_t hdr[4] = {0x6b766631 /* "kvf1" */, f->n_layers, f->head_dim,
                      kv_format_split(f) ? f->quant_start : 0};
    XXH64_hash_t h = XXH3_64bits_withSeed(hdr, sizeof hdr, 0);
    /* (dtype, group) pairs as the unrotated formats always hashed them, so f32,
     * f16 and bf16 caches keep their namespace; the rotations are mixed in only
     * when some layer rotates, which is what moves rotated q8/q4 away from the
     * entries written before rotation existed (those decode differently) */
    int32_t pairs[2 * KV_FMT_MAX_LAYERS + 2], rots[KV_FMT_MAX_LAYERS + 1], any = 0;
    for (int32_t l = 0; l <= f->n_layers; l++) {
        kn_kv_fmt k = l < f->n_layers ? f->layer[l] : f->full;
        pairs[2 * l] = k.dtype;
        pairs[2 * l + 1] = k.group;
        rots[l] = k.rot;
        any |= k.rot != 0;
    }
    h = XXH3_64bits_withSeed(pairs, sizeof(int32_t) * 2 * (size_t)f->n_layers, h);
    h = XXH3_64bits_withSeed(pairs + 2 * f->n_layers, sizeof(int32_t) * 2, h);
    if (f->head_dim == 0) /* layers of different head_dim (uniform shapes hash as before) */
        h = XXH3_64bits_withSeed(f->hd, sizeof(int32_t) * (size_t)f->n_layers, h);
    if (!any) return h;
    int32_t tag = 0x6b76726f; /* "kvro" */
    h = XXH3_64bits_withSeed(&tag, sizeof tag, h);
    return XXH3_64bits_withSeed(rots, sizeof(int32_t) * ((size_t)f->n_layers + 1), h);
}
