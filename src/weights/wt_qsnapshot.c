/*
 * wt_qsnapshot.c — wt_quantize_snapshot: a Hugging Face snapshot in, an MLX
 * affine-quantized snapshot out, laid out as `mlx_lm.convert -q` writes it
 * (mlx-quant-format.md §2): same tensor names, `P.weight` U32 + `P.scales` +
 * `P.biases` per quantized module, config.json with "quantization" and
 * "quantization_config", safetensors `__metadata__` {"format": "mlx"}, and a
 * model.safetensors.index.json (mlx-lm always writes one).
 *
 * Decisions, per input tensor (mlx-lm quantize_model + each family's sanitize
 * and quant_predicate: wt_qfamily.c renames, drops and splits tensors and
 * keeps some modules float or at other bits):
 *   lm_head.weight with tied embeddings, *.rotary_emb.inv_freq  -> dropped
 *   2-D float "*.weight" with last dim % group_size == 0          -> quantized
 *       (every such tensor in Llama/Mistral/Qwen2/Qwen3 is a Linear or the
 *        embedding; norms are 1-D); 3-D ones are expert stacks, quantized
 *       per expert (row by row: scales/biases [E, rows, cols / group])
 *   vision-tower tensors (model.visual.*; kiln runs the text path)  -> not quantized
 *   *.A_log (Qwen3.5 DeltaNet decay; mlx-lm's cast_predicate)    -> kept as stored (F32)
 *   other float tensors                                          -> cast to the model dtype
 *   integer tensors                                              -> copied
 * Floats are first rounded to the model dtype (convert casts before it
 * quantizes), then quantized in float32 (wt_quantize.c).
 * Memory: one output tensor at a time (the writer's fill callback), plus the
 * three outputs of the module being quantized and one float32 row or chunk:
 * never a float32 copy of a whole tensor.
 * Output files are each written atomically; config.json goes last.
 * Errors: KILN_E_UNSUPPORTED (bits/group/dtype/recipe, an input that is
 * already quantized), KILN_E_INVALID (out_dir == in_dir, NaN/inf weights),
 * plus whatever loading the input reports.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/plat.h"
#include "weights/wt_config.h"
#include "weights/wt_qfamily.h"
#include "weights/wt_quantize.h"
#include "weights/wt_set.h"
#include "weights/wt_writer.h"

/* ------------------------------------------------------------------ types */

typedef enum { QS_COPY, QS_CAST, QS_QWEIGHT, QS_QSCALES, QS_QBIASES } qs_kind;

typedef struct {
    qs_kind kind;
    const wt_tensor *src; /* BORROWED from the input wt_set */
    int bits, group;      /* quantized kinds */
    char *name;           /* OWNED */
    int64_t R, r0, rows;  /* rows [r0, r0 + rows) of each [R, cols] slice of src (a split
                             fused expert tensor); rows == 0: all of src */
} qs_item;

typedef struct {
    const char *in_dir;
    wt_dtype dtype; /* model dtype */
    int gs;
    qs_item *items;       /* OWNED [n] */
    wt_write_tensor *out; /* OWNED [n]; names BORROWED from items */
    int n, cap;
    /* cache: the module last quantized (its source and first row) */
    const wt_tensor *cached;
    int64_t cached_r0;
    uint32_t *qw;           /* OWNED */
    void *qs, *qb;          /* OWNED */
    uint64_t params;        /* logical parameter count (index metadata) */
    const wt_quant_opts *o; /* BORROWED: the progress callback */
    uint64_t done, total;   /* output bytes written / to write (progress) */
} qs_ctx;

/* Files copied as they are when present. */
static const char *const copied_files[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
};

/* ------------------------------------------------------------- helpers */

static bool is_float(wt_dtype d)
{
    return d == WT_F32 || d == WT_F16 || d == WT_BF16 || d == WT_F64;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static kiln_code model_dtype(const wt_quant_opts *o, const wt_config *cfg, const wt_set *ws,
                             wt_dtype *out, kiln_err *err)
{
    if (o->dtype_set) {
        *out = o->dtype;
    } else if (strcmp(cfg->torch_dtype, "bfloat16") == 0) {
        *out = WT_BF16;
    } else if (strcmp(cfg->torch_dtype, "float16") == 0) {
        *out = WT_F16;
    } else if (strcmp(cfg->torch_dtype, "float32") == 0) {
        *out = WT_F32;
    } else {
        const wt_tensor *e = wt_set_find(ws, "model.embed_tokens.weight");
        *out = e ? e->dtype : WT_F32;
        if (*out == WT_F64) *out = WT_F32;
    }
    if (*out != WT_F32 && *out != WT_F16 && *out != WT_BF16)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "quantize: model dtype %s (F32, F16 or BF16)",
                         wt_dtype_name(*out));
    return KILN_OK;
}

/* mlx-lm's mixed_* predicates: bits for module `path` (already known to be
 * quantizable), or the uniform bits without a recipe. */
static kiln_code recipe_bits(const wt_quant_opts *o, int64_t n_layers, const char *path, int *bits,
                             kiln_err *err)
{
    *bits = o->bits;
    if (!o->recipe) return KILN_OK;
    int low, high = 6;
    if (strcmp(o->recipe, "mixed_2_6") == 0) {
        low = 2;
    } else if (strcmp(o->recipe, "mixed_3_4") == 0) {
        low = 3;
        high = 4;
    } else if (strcmp(o->recipe, "mixed_3_6") == 0) {
        low = 3;
    } else if (strcmp(o->recipe, "mixed_4_6") == 0) {
        low = 4;
    } else {
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "quantize: recipe '%s' (mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6)",
                         o->recipe);
    }
    int64_t idx = 0;
    const char *l = strstr(path, "layers.");
    if (l) idx = strtoll(l + 7, NULL, 10);
    int64_t n8 = n_layers / 8;
    bool more = idx < n8 || idx >= 7 * n_layers / 8 || (idx - n8) % 3 == 2;
    if ((strstr(path, "v_proj") || strstr(path, "down_proj")) && more)
        *bits = high;
    else if (strstr(path, "lm_head"))
        *bits = high;
    else
        *bits = low;
    return KILN_OK;
}

/* ------------------------------------------------------------- planning */

static kiln_code add_item(qs_ctx *q, qs_kind kind, const wt_tensor *src, const wt_qf_out *map,
                          int bits, const char *name, wt_dtype dt, int ndim, const int64_t *shape,
                          kiln_err *err)
{
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 64;
        qs_item *ni = realloc(q->items, (size_t)cap * sizeof *ni);
        if (ni) q->items = ni;
        wt_write_tensor *no = ni ? realloc(q->out, (size_t)cap * sizeof *no) : NULL;
        if (!no) return kiln_fail(err, KILN_E_NOMEM, "quantize: out of memory");
        q->out = no;
        q->cap = cap;
    }
    qs_item *it = &q->items[q->n];
    *it = (qs_item){.kind = kind,
                    .src = src,
                    .bits = bits,
                    .group = q->gs,
                    .name = strdup(name),
                    .R = map ? map->R : 0,
                    .r0 = map ? map->r0 : 0,
                    .rows = map ? map->rows : 0};
    if (!it->name) return kiln_fail(err, KILN_E_NOMEM, "quantize: out of memory");
    wt_write_tensor *w = &q->out[q->n];
    *w = (wt_write_tensor){.name = it->name, .dtype = dt, .ndim = ndim};
    memcpy(w->shape, shape, (size_t)ndim * sizeof *shape);
    q->n++;
    return KILN_OK;
}

/* Adds the three outputs of quantized module `mod` (name without ".weight"):
 * the output shape `map` with its last dim packed / grouped. */
static kiln_code plan_quantized(qs_ctx *q, const wt_tensor *t, const wt_qf_out *map,
                                const char *mod, int bits, int group, kiln_err *err)
{
    char name[1040];
    int nd = map->ndim;
    int64_t wshape[4], sshape[4];
    for (int i = 0; i < nd; i++)
        wshape[i] = sshape[i] = map->shape[i];
    wshape[nd - 1] = map->shape[nd - 1] * bits / 32;
    sshape[nd - 1] = map->shape[nd - 1] / group;
    kiln_code c;
    int first = q->n;
    snprintf(name, sizeof name, "%s.biases", mod);
    if ((c = add_item(q, QS_QBIASES, t, map, bits, name, q->dtype, nd, sshape, err))) return c;
    snprintf(name, sizeof name, "%s.scales", mod);
    if ((c = add_item(q, QS_QSCALES, t, map, bits, name, q->dtype, nd, sshape, err))) return c;
    snprintf(name, sizeof name, "%s.weight", mod);
    if ((c = add_item(q, QS_QWEIGHT, t, map, bits, name, WT_U32, nd, wshape, err))) return c;
    for (int i = first; i < q->n; i++)
        q->items[i].group = group;
    return KILN_OK;
}

static kiln_code plan_all(qs_ctx *q, const wt_set *ws, const wt_config *cfg, const wt_quant_opts *o,
                          json_t *qcfg, kiln_err *err)
{
    for (int i = 0; i < wt_set_count(ws); i++) {
        const wt_tensor *t = wt_set_at(ws, i);
        if ((cfg->tie_word_embeddings && strcmp(t->name, "lm_head.weight") == 0) ||
            ends_with(t->name, "rotary_emb.inv_freq"))
            continue;
        if (strlen(t->name) >= 1000)
            return kiln_fail(err, KILN_E_UNSUPPORTED, "quantize: tensor name too long");
        if (ends_with(t->name, ".A_log")) {
            q->params += (uint64_t)t->numel;
            kiln_code c = add_item(q, QS_COPY, t, NULL, 0, t->name, t->dtype, t->ndim, t->shape, err);
            if (c) return c;
            continue;
        }
        bool vision = strncmp(t->name, "model.visual.", 13) == 0;
        wt_qf_out outs[2];
        int n_out = wt_qf_map(cfg, t, outs);
        for (int k = 0; k < n_out; k++) {
            const wt_qf_out *mo = &outs[k];
            int64_t last = mo->shape[mo->ndim - 1];
            q->params += (uint64_t)(mo->rows ? t->numel / t->shape[1] * mo->rows : t->numel);
            kiln_code c;
            char mod[1024];
            int bits = o->bits, group = q->gs;
            bool expl = false;
            if (!vision && is_float(t->dtype) && (mo->ndim == 2 || mo->ndim == 3) &&
                ends_with(mo->name, ".weight") && last > 0 && last % q->gs == 0) {
                snprintf(mod, sizeof mod, "%.*s", (int)(strlen(mo->name) - 7), mo->name);
                if ((c = recipe_bits(o, cfg->n_layers, mod, &bits, err))) return c;
                if (wt_qf_quantize(cfg, mod, &bits, &group, &expl) && last % group == 0) {
                    if ((c = plan_quantized(q, t, mo, mod, bits, group, err))) return c;
                    if ((o->recipe || expl) &&
                        json_object_set_new(qcfg, mod,
                                            json_pack("{s:i, s:i, s:s}", "group_size", group,
                                                      "bits", bits, "mode", "affine")))
                        return kiln_fail(err, KILN_E_NOMEM, "quantize: out of memory");
                    continue;
                }
            }
            c = add_item(q, is_float(t->dtype) ? QS_CAST : QS_COPY, t, mo, 0, mo->name,
                         is_float(t->dtype) ? q->dtype : t->dtype, mo->ndim, mo->shape, err);
            if (c) return c;
        }
    }
    return KILN_OK;
}

/* ----------------------------------------------------------------- fill */

/* Elements [at, at + n) of t as float32, rounded through the model dtype. */
static kiln_code src_f32(const qs_ctx *q, const wt_tensor *t, int64_t at, int64_t n, float *f,
                         kiln_err *err)
{
    const uint8_t *src = (const uint8_t *)t->data + (size_t)at * wt_dtype_size(t->dtype);
    wt_to_f32(t->dtype, src, n, f);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(f[i]))
            return kiln_fail(err, KILN_E_INVALID,
                             "quantize: tensor '%s' has NaN or infinite values", t->name);
    if (q->dtype == WT_F32) return KILN_OK;
    uint16_t tmp[512]; /* round to the model dtype in place, 512 at a time */
    for (int64_t i = 0; i < n; i += 512) {
        int64_t m = n - i < 512 ? n - i : 512;
        wt_from_f32(q->dtype, f + i, m, tmp);
        wt_to_f32(q->dtype, tmp, m, f + i);
    }
    return KILN_OK;
}

/* The source element offset of output row r of item it. */
static int64_t src_row(const qs_item *it, int64_t r, int64_t cols)
{
    if (!it->rows) return r * cols;
    return ((r / it->rows) * it->R + it->r0 + r % it->rows) * cols;
}

/* Quantizes module it (its rows of it->src) row by row into q->qw/qs/qb (kept
 * for the other two tensors of the same module). Memory: the outputs plus one
 * f32 row. */
static kiln_code quantize_module(qs_ctx *q, const qs_item *it, kiln_err *err)
{
    if (q->cached == it->src && q->cached_r0 == it->r0) return KILN_OK;
    const wt_tensor *t = it->src;
    const int64_t cols = t->shape[t->ndim - 1];
    const int64_t rows = (it->rows ? t->numel / it->R / cols * it->rows : t->numel / cols);
    const int64_t groups = cols / it->group;
    const int64_t row_words = cols * it->bits / 32;
    const size_t es = wt_dtype_size(q->dtype);
    free(q->qw);
    free(q->qs);
    free(q->qb);
    q->cached = NULL;
    q->qw = malloc((size_t)(rows * row_words) * 4 + 4);
    q->qs = malloc((size_t)(rows * groups) * es + 4);
    q->qb = malloc((size_t)(rows * groups) * es + 4);
    float *f = malloc((size_t)cols * sizeof *f);
    kiln_code c = KILN_OK;
    if (!q->qw || !q->qs || !q->qb || !f)
        c = kiln_fail(err, KILN_E_NOMEM, "quantize: cannot allocate for '%s'", t->name);
    for (int64_t r = 0; r < rows && !c; r++) {
        c = src_f32(q, t, src_row(it, r, cols), cols, f, err);
        if (!c)
            c = wt_quantize_affine(f, 1, cols, it->bits, it->group, q->dtype,
                                   q->qw + r * row_words,
                                   (uint8_t *)q->qs + (size_t)(r * groups) * es,
                                   (uint8_t *)q->qb + (size_t)(r * groups) * es, NULL, err);
    }
    free(f);
    if (!c) {
        q->cached = t;
        q->cached_r0 = it->r0;
    }
    return c;
}

/* A float tensor (or its rows of a split) cast to the model dtype, 64K
 * elements (or one row) at a time. */
static kiln_code cast_tensor(const qs_ctx *q, const qs_item *it, void *dst, kiln_err *err)
{
    enum { CHUNK = 65536 };
    const wt_tensor *t = it->src;
    const int64_t cols = t->shape[t->ndim - 1];
    float *f = malloc((size_t)(cols > CHUNK ? cols : CHUNK) * sizeof *f);
    if (!f) return kiln_fail(err, KILN_E_NOMEM, "quantize: out of memory");
    kiln_code c = KILN_OK;
    const size_t es = wt_dtype_size(q->dtype);
    if (it->rows) {
        int64_t rows = t->numel / it->R / cols * it->rows;
        for (int64_t r = 0; r < rows && !c; r++) {
            c = src_f32(q, t, src_row(it, r, cols), cols, f, err);
            if (!c) wt_from_f32(q->dtype, f, cols, (uint8_t *)dst + (size_t)(r * cols) * es);
        }
        free(f);
        return c;
    }
    for (int64_t i = 0; i < t->numel && !c; i += CHUNK) {
        int64_t m = t->numel - i < CHUNK ? t->numel - i : CHUNK;
        c = src_f32(q, t, i, m, f, err);
        if (!c) wt_from_f32(q->dtype, f, m, (uint8_t *)dst + (size_t)i * es);
    }
    free(f);
    return c;
}

static kiln_code fill_one(void *ctx, int index, void *dst, uint64_t nbytes, kiln_err *err)
{
    qs_ctx *q = ctx;
    const qs_item *it = &q->items[index];
    kiln_code c = KILN_OK;
    switch (it->kind) {
    case QS_COPY:
        memcpy(dst, it->src->data, (size_t)nbytes);
        break;
    case QS_CAST:
        c = cast_tensor(q, it, dst, err);
        break;
    case QS_QWEIGHT:
    case QS_QSCALES:
    case QS_QBIASES:
        if ((c = quantize_module(q, it, err))) break;
        memcpy(dst,
               it->kind == QS_QWEIGHT   ? (void *)q->qw
               : it->kind == QS_QSCALES ? q->qs
                                        : q->qb,
               (size_t)nbytes);
        break;
    }
    q->done += nbytes;
    if (!c && q->o && q->o->progress) q->o->progress(q->o->progress_user, q->done, q->total);
    return c;
}

/* ------------------------------------------------------------ side files */

static kiln_code write_json(const char *dir, const char *name, json_t *obj, kiln_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = json_dumps(obj, JSON_INDENT(4));
    if (!text) return kiln_fail(err, KILN_E_NOMEM, "%s: cannot serialise", path);
    kiln_code c = wt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return c;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* config.json: the input's keys (sorted, as mlx-lm's save_config writes them)
 * plus "quantization" and "quantization_config". */
static kiln_code write_config(const char *in_dir, const char *out_dir, json_t *qcfg, kiln_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    json_error_t je;
    json_t *in = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *out = json_object();
    size_t n = in ? json_object_size(in) : 0;
    const char **keys = calloc(n + 2, sizeof *keys);
    kiln_code c = KILN_OK;
    if (!in || !out || !keys) {
        c = kiln_fail(err, KILN_E_INVALID, "%s: cannot re-read: %s", path,
                      in ? "no memory" : je.text);
        goto done;
    }
    json_object_set(in, "quantization", qcfg);
    json_object_set(in, "quantization_config", qcfg);
    n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(in, k, v) keys[n++] = k;
    qsort(keys, n, sizeof *keys, cmp_cstr);
    for (size_t i = 0; i < n; i++)
        json_object_set(out, keys[i], json_object_get(in, keys[i]));
    c = write_json(out_dir, "config.json", out, err);
done:
    free(keys);
    json_decref(in);
    json_decref(out);
    return c;
}

static kiln_code write_index(const qs_ctx *q, const char *out_dir, kiln_err *err)
{
    uint64_t total = 0;
    json_t *map = json_object();
    for (int i = 0; map && i < q->n; i++) {
        int ok;
        total += wt_tensor_bytes(q->out[i].dtype, q->out[i].ndim, q->out[i].shape, &ok);
        json_object_set_new(map, q->out[i].name, json_string("model.safetensors"));
    }
    json_t *root = json_pack("{s:{s:I, s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                             "total_parameters", (json_int_t)q->params, "weight_map", map);
    if (!root) return kiln_fail(err, KILN_E_NOMEM, "quantize: out of memory");
    kiln_code c = write_json(out_dir, "model.safetensors.index.json", root, err);
    json_decref(root);
    return c;
}

static kiln_code copy_side_files(const char *in_dir, const char *out_dir, kiln_err *err)
{
    for (size_t i = 0; i < sizeof copied_files / sizeof copied_files[0]; i++) {
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", in_dir, copied_files[i]);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, copied_files[i]);
        if (!plat_is_file(src)) continue;
        char *buf;
        size_t len;
        kiln_code c = plat_read_file(src, (size_t)1 << 30, &buf, &len, err);
        if (!c) c = wt_write_file_atomic(dst, buf, len, err);
        if (!c) free(buf);
        if (c) return c;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ API */

static kiln_code prepare_out_dir(const char *in_dir, const char *out_dir, kiln_err *err)
{
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return kiln_fail(err, KILN_E_IO, "%s: cannot create: %s", out_dir, strerror(errno));
    if (!plat_is_dir(out_dir)) return kiln_fail(err, KILN_E_IO, "%s: not a folder", out_dir);
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(in_dir, a) || !realpath(out_dir, b))
        return kiln_fail(err, KILN_E_IO, "%s: cannot resolve: %s", out_dir, strerror(errno));
    if (strcmp(a, b) == 0)
        return kiln_fail(err, KILN_E_INVALID, "%s: the output folder is the input folder", out_dir);
    return KILN_OK;
}

static kiln_code check_opts(const wt_quant_opts *o, kiln_err *err)
{
    if (o->bits != 2 && o->bits != 3 && o->bits != 4 && o->bits != 5 && o->bits != 6 &&
        o->bits != 8)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "quantize: %d-bit quantization is not supported (bits 2, 3, 4, 5, 6, 8)",
                         o->bits);
    if (o->group_size != 32 && o->group_size != 64 && o->group_size != 128)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "quantize: group_size %d is not supported (32, 64, 128)", o->group_size);
    return KILN_OK;
}

static void ctx_free(qs_ctx *q)
{
    for (int i = 0; i < q->n; i++)
        free(q->items[i].name);
    free(q->items);
    free(q->out);
    free(q->qw);
    free(q->qs);
    free(q->qb);
}

kiln_code wt_quantize_snapshot_ex(const char *in_dir, const char *out_dir,
                                  const wt_quant_opts *opts, kiln_err *err)
{
    wt_quant_opts o = *opts;
    if (!o.bits) o.bits = 4;
    if (!o.group_size) o.group_size = 64;
    wt_config cfg;
    wt_set *ws = NULL;
    qs_ctx q = {.in_dir = in_dir, .gs = o.group_size, .o = &o};
    json_t *qcfg =
        json_pack("{s:i, s:i, s:s}", "group_size", o.group_size, "bits", o.bits, "mode", "affine");
    kiln_code c = check_opts(&o, err);
    if (!c && o.recipe) c = recipe_bits(&o, 1, "x", &(int){0}, err);
    if (!c)
        c = wt_config_load(in_dir, &cfg, err);
    else
        memset(&cfg, 0, sizeof cfg);
    if (!c && cfg.quant.mode != WT_QMODE_NONE)
        c = kiln_fail(err, KILN_E_UNSUPPORTED, "%s: already quantized (%d-bit)", in_dir,
                      cfg.quant.bits);
    if (!c && !qcfg) c = kiln_fail(err, KILN_E_NOMEM, "quantize: out of memory");
    if (!c) c = wt_set_open(in_dir, &ws, err);
    if (!c) c = model_dtype(&o, &cfg, ws, &q.dtype, err);
    if (!c) c = prepare_out_dir(in_dir, out_dir, err);
    if (!c) c = plan_all(&q, ws, &cfg, &o, qcfg, err);
    for (int i = 0; !c && i < q.n; i++) {
        int ok;
        q.total += wt_tensor_bytes(q.out[i].dtype, q.out[i].ndim, q.out[i].shape, &ok);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    const char *meta[] = {"format", "mlx"};
    if (!c) c = wt_write_safetensors(path, q.out, q.n, meta, 1, fill_one, &q, err);
    if (!c) c = write_index(&q, out_dir, err);
    if (!c) c = copy_side_files(in_dir, out_dir, err);
    if (!c) c = write_config(in_dir, out_dir, qcfg, err);
    json_decref(qcfg);
    ctx_free(&q);
    wt_set_close(ws);
    wt_config_free(&cfg);
    return c;
}

kiln_code wt_quantize_snapshot(const char *in_dir, const char *out_dir, int bits, int group_size,
                               kiln_err *err)
{
    wt_quant_opts o = {.bits = bits, .group_size = group_size};
    if (bits == 0 || group_size == 0) /* 0 means "default" only through _ex */
        return check_opts(&o, err);
    return wt_quantize_snapshot_ex(in_dir, out_dir, &o, err);
}
