/*
 * mdl_tensors.c — a module's tensors found by name and checked against the
 * shape the plan expects.
 *
 * A linear module P is stored either as a float P.weight [out, in] (F32, F16,
 * BF16) or MLX-affine: P.weight U32 [out, in*bits/32] + P.scales/P.biases
 * [out, in/group] (wt_config_quant_for decides). Nothing is copied but small
 * norm/bias vectors (converted to f32 at load).
 */
#include "model/mdl_int.h"
#include "util/half.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_code fmt_of(const wt_tensor *t, kn_fmt *out, kiln_err *err)
{
    switch (t->dtype) {
    case WT_F32:
        *out = KN_F32;
        return KILN_OK;
    case WT_F16:
        *out = KN_F16;
        return KILN_OK;
    case WT_BF16:
        *out = KN_BF16;
        return KILN_OK;
    default:
        return kiln_fail(err, KILN_E_UNSUPPORTED, "tensor '%s': dtype %s is not a float weight",
                         t->name, wt_dtype_name(t->dtype));
    }
}

static kiln_code shape_err(const wt_tensor *t, int64_t a, int64_t b, kiln_err *err)
{
    char got[96] = "";
    for (int i = 0, o = 0; i < t->ndim && o < (int)sizeof got - 24; i++)
        o += snprintf(got + o, sizeof got - (size_t)o, i ? ", %" PRId64 : "%" PRId64, t->shape[i]);
    if (b >= 0)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "tensor '%s' has shape [%s], the config needs [%" PRId64 ", %" PRId64 "]",
                         t->name, got, a, b);
    return kiln_fail(err, KILN_E_CORRUPT,
                     "tensor '%s' has shape [%s], the config needs [%" PRId64 "]", t->name, got, a);
}

kiln_code mdl_load_mat(mdl_model *m, const char *path, int64_t rows, int64_t cols, kn_mat *out,
                       kiln_err *err)
{
    char name[320];
    snprintf(name, sizeof name, "%s.weight", path);
    const wt_tensor *w = wt_set_find(m->ws, name);
    if (!w) return kiln_fail(err, KILN_E_NOT_FOUND, "missing tensor '%s'", name);
    snprintf(name, sizeof name, "%s.scales", path);
    const wt_tensor *s = wt_set_find(m->ws, name);
    wt_qspec q = wt_config_quant_for(&m->cfg, path, s != NULL);
    memset(out, 0, sizeof *out);
    out->rows = rows;
    out->cols = cols;
    if (q.mode == WT_QMODE_NONE) {
        kiln_code rc = fmt_of(w, &out->fmt, err);
        if (rc) return rc;
        if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols)
            return shape_err(w, rows, cols, err);
        out->w = w->data;
        return KILN_OK;
    }
    if (q.mode != WT_QMODE_AFFINE)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "module '%s': only MLX affine quantization is supported", path);
    snprintf(name, sizeof name, "%s.biases", path);
    const wt_tensor *b = wt_set_find(m->ws, name);
    if (!s || !b)
        return kiln_fail(err, KILN_E_NOT_FOUND, "module '%s' is quantized but has no %s", path,
                         s ? "biases" : "scales");
    if (w->dtype != WT_U32)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "tensor '%s.weight': quantized weight must be U32, is %s", path,
                         wt_dtype_name(w->dtype));
    if (cols % q.group_size != 0 || (cols * q.bits) % 32 != 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "module '%s': %" PRId64 " columns do not split into groups of %d", path,
                         cols, q.group_size);
    if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols * q.bits / 32)
        return shape_err(w, rows, cols * q.bits / 32, err);
    if (s->ndim != 2 || s->shape[0] != rows || s->shape[1] != cols / q.group_size)
        return shape_err(s, rows, cols / q.group_size, err);
    if (b->ndim != 2 || b->shape[0] != rows || b->shape[1] != cols / q.group_size)
        return shape_err(b, rows, cols / q.group_size, err);
    if (s->dtype != b->dtype)
        return kiln_fail(err, KILN_E_CORRUPT, "module '%s': scales are %s but biases %s", path,
                         wt_dtype_name(s->dtype), wt_dtype_name(b->dtype));
    kiln_code rc = fmt_of(s, &out->sfmt, err);
    if (rc) return rc;
    out->fmt = KN_QAFFINE;
    out->w = w->data;
    out->scales = s->data;
    out->biases = b->data;
    out->bits = q.bits;
    out->group = q.group_size;
    return KILN_OK;
}

kiln_code mdl_load_vec(mdl_model *m, const char *name, int64_t n, int optional, float add,
                       float **out, kiln_err *err)
{
    *out = NULL;
    const wt_tensor *t = wt_set_find(m->ws, name);
    if (!t) {
        if (optional) return KILN_OK;
        return kiln_fail(err, KILN_E_NOT_FOUND, "missing tensor '%s'", name);
    }
    if (t->ndim != 1 || t->shape[0] != n) return shape_err(t, n, -1, err);
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return kiln_fail(err, KILN_E_NOMEM, "tensor '%s': out of memory", name);
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case WT_F32:
            memcpy(&v[i], p + 4 * i, 4);
            break;
        case WT_F16:
            memcpy(&h, p + 2 * i, 2);
            v[i] = kiln_f16_to_f32(h);
            break;
        case WT_BF16:
            memcpy(&h, p + 2 * i, 2);
            v[i] = kiln_bf16_to_f32(h);
            break;
        default:
            free(v);
            return kiln_fail(err, KILN_E_UNSUPPORTED, "tensor '%s': dtype %s is not a float vector",
                             name, wt_dtype_name(t->dtype));
        }
        if (add != 0.0f) v[i] += add; /* `1 + w` norms: the multiplier, as the kernel summed it */
    }
    *out = v;
    return KILN_OK;
}

int mdl_has_tensor(const mdl_model *m, const char *name)
{
    return wt_set_find(m->ws, name) != NULL;
}

static kiln_code shape3_err(const wt_tensor *t, int64_t a, int64_t b, int64_t c, kiln_err *err)
{
    char got[96] = "";
    for (int i = 0, o = 0; i < t->ndim && o < (int)sizeof got - 24; i++)
        o += snprintf(got + o, sizeof got - (size_t)o, i ? ", %" PRId64 : "%" PRId64, t->shape[i]);
    return kiln_fail(err, KILN_E_CORRUPT,
                     "tensor '%s' has shape [%s], the config needs [%" PRId64 ", %" PRId64
                     ", %" PRId64 "]",
                     t->name, got, a, b, c);
}

static int is3(const wt_tensor *t, int64_t a, int64_t b, int64_t c)
{
    return t->ndim == 3 && t->shape[0] == a && t->shape[1] == b && t->shape[2] == c;
}

kiln_code mdl_load_experts(mdl_model *m, const char *path, const char *name, int64_t E, int64_t R,
                           int64_t r0, int64_t rows, int64_t cols, kn_mat *out, kiln_err *err)
{
    char n[320];
    snprintf(n, sizeof n, "%s.scales", path);
    const wt_tensor *s = wt_set_find(m->ws, n);
    wt_qspec q = wt_config_quant_for(&m->cfg, path, s != NULL);
    const wt_tensor *w = wt_set_find(m->ws, name);
    if (!w) return kiln_fail(err, KILN_E_NOT_FOUND, "missing tensor '%s'", name);
    kn_mat base = {.rows = rows, .cols = cols};
    size_t row_bytes, srow_bytes = 0;
    if (q.mode == WT_QMODE_NONE) {
        kiln_code rc = fmt_of(w, &base.fmt, err);
        if (rc) return rc;
        if (!is3(w, E, R, cols)) return shape3_err(w, E, R, cols, err);
        row_bytes = (size_t)cols * wt_dtype_size(w->dtype);
    } else {
        if (q.mode != WT_QMODE_AFFINE)
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "module '%s': only MLX affine quantization is supported", path);
        snprintf(n, sizeof n, "%s.biases", path);
        const wt_tensor *b = wt_set_find(m->ws, n);
        if (!s || !b)
            return kiln_fail(err, KILN_E_NOT_FOUND, "module '%s' is quantized but has no %s", path,
                             s ? "biases" : "scales");
        if (w->dtype != WT_U32)
            return kiln_fail(err, KILN_E_CORRUPT,
                             "tensor '%s': quantized weight must be U32, is %s", name,
                             wt_dtype_name(w->dtype));
        if (cols % q.group_size != 0 || (cols * q.bits) % 32 != 0)
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "module '%s': %" PRId64 " columns do not split into groups of %d",
                             path, cols, q.group_size);
        if (!is3(w, E, R, cols * q.bits / 32)) return shape3_err(w, E, R, cols * q.bits / 32, err);
        if (!is3(s, E, R, cols / q.group_size))
            return shape3_err(s, E, R, cols / q.group_size, err);
        if (!is3(b, E, R, cols / q.group_size))
            return shape3_err(b, E, R, cols / q.group_size, err);
        if (s->dtype != b->dtype)
            return kiln_fail(err, KILN_E_CORRUPT, "module '%s': scales are %s but biases %s", path,
                             wt_dtype_name(s->dtype), wt_dtype_name(b->dtype));
        kiln_code rc = fmt_of(s, &base.sfmt, err);
        if (rc) return rc;
        base.fmt = KN_QAFFINE;
        base.bits = q.bits;
        base.group = q.group_size;
        row_bytes = (size_t)(cols * q.bits / 32) * 4;
        srow_bytes = (size_t)(cols / q.group_size) * wt_dtype_size(s->dtype);
        base.scales = s->data;
        base.biases = b->data;
    }
    for (int64_t e = 0; e < E; e++) {
        size_t row = (size_t)(e * R + r0); /* first row of expert e's slice */
        out[e] = base;
        out[e].w = (const uint8_t *)w->data + row * row_bytes;
        if (base.fmt == KN_QAFFINE) {
            out[e].scales = (const uint8_t *)base.scales + row * srow_bytes;
            out[e].biases = (const uint8_t *)base.biases + row * srow_bytes;
        }
    }
    return KILN_OK;
}
