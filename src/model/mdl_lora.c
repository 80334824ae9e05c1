/*
 * mdl_lora.c — LoRA adapter folders (PEFT and mlx-lm layouts) read and
 * checked against the base model, and the per-row low-rank update the
 * attention and MLP stages add after each base projection (mdl_lora.h).
 */
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"
#include "model/mdl_lora.h"
#include "util/half.h"
#include "util/plat.h"
#include "weights/wt_safetensors.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static const char *const TARGET_NAME[MDL_LT_COUNT] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};

typedef struct {
    int32_t r, in, out; /* r == 0: this module is not adapted */
    float scale;
    float *A;  /* OWNED [r, in] (one allocation with Bt) */
    float *Bt; /* BORROWED from A's allocation: B transposed, [r, out]: the update is r
                  contiguous axpys, not `out` dots of length r */
} lora_mod;

struct mdl_lora {
    atomic_int refs;    /* mdl_lora_retain / mdl_lora_free: the last reference frees it */
    const mdl_model *m; /* BORROWED */
    int32_t n_layers;
    lora_mod *mods; /* OWNED [n_layers * MDL_LT_COUNT] */
    mdl_lora_info info;
    uint64_t fingerprint;
};

/* ---------------------------------------------------------------- shapes */

/* The base projection's [out, in] for target t of layer L. */
static void target_dims(const mdl_model *m, int32_t L, int t, int64_t *out, int64_t *in)
{
    const mdl_layer_plan *p = &m->plan.layer[L];
    int64_t H = m->plan.hidden, qd = (int64_t)p->n_heads * p->head_dim,
            kd = (int64_t)p->n_kv_heads * p->head_dim, F = p->ffn_dim;
    switch (t) {
    case MDL_LT_Q:
        *out = p->attn_gate ? 2 * qd : qd, *in = H;
        break; /* gated: [query, gate] */
    case MDL_LT_K:
    case MDL_LT_V:
        *out = kd, *in = H;
        break;
    case MDL_LT_O:
        *out = H, *in = qd;
        break;
    case MDL_LT_GATE:
    case MDL_LT_UP:
        *out = F, *in = H;
        break;
    default:
        *out = H, *in = F;
        break;
    }
}

/* ---------------------------------------------------------------- names */

typedef enum { PART_A, PART_B } lora_part;

/* Splits an adapter tensor name into layer, target and part. The text before
 * "layers." must end with the model's language-model prefix (so a vision
 * tower's layers are never taken for the text model's). */
static kiln_code parse_name(const mdl_lora *a, mdl_lora_format fmt, const char *name, int32_t *L,
                            int *t, lora_part *part, kiln_err *err)
{
    const char *pfx = a->m->prefix;
    size_t np = strlen(pfx), n = strlen(name);
    static const struct {
        const char *suffix;
        mdl_lora_format fmt;
        lora_part part;
    } SUF[] = {{".lora_A.weight", MDL_LORA_PEFT, PART_A},
               {".lora_B.weight", MDL_LORA_PEFT, PART_B},
               {".lora_a", MDL_LORA_MLX, PART_A},
               {".lora_b", MDL_LORA_MLX, PART_B}};
    size_t cut = 0;
    for (size_t i = 0; i < sizeof SUF / sizeof *SUF; i++) {
        size_t ls = strlen(SUF[i].suffix);
        if (SUF[i].fmt == fmt && n > ls && strcmp(name + n - ls, SUF[i].suffix) == 0) {
            cut = n - ls;
            *part = SUF[i].part;
        }
    }
    if (!cut) {
        if (strstr(name, "lora_magnitude_vector"))
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "adapter tensor '%s': DoRA adapters are not supported", name);
        if (strstr(name, "lora_embedding"))
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "adapter tensor '%s': embedding adapters are not supported", name);
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "adapter tensor '%s' is not a LoRA A/B matrix of the %s layout "
                         "(full weights such as modules_to_save are not supported)",
                         name, fmt == MDL_LORA_PEFT ? "PEFT" : "mlx-lm");
    }
    /* the last "layers." before the module path */
    const char *lay = NULL;
    for (const char *p = name; (p = strstr(p, "layers.")) && p < name + cut; p++)
        if (p == name || p[-1] == '.') lay = p;
    if (!lay)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "adapter tensor '%s' is not in a transformer layer (only q/k/v/o and "
                         "gate/up/down projections can be adapted)",
                         name);
    size_t before = (size_t)(lay - name);
    if (before < np || strncmp(lay - np, pfx, np) != 0)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "adapter tensor '%s' is not under the base model's language model "
                         "('%slayers.'): is the adapter for another model?",
                         name, pfx);
    char *end;
    long li = strtol(lay + 7, &end, 10);
    if (end == lay + 7 || *end != '.' || li < 0)
        return kiln_fail(err, KILN_E_CORRUPT, "adapter tensor '%s': bad layer index", name);
    if (li >= a->n_layers)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "adapter tensor '%s' is for layer %ld, the base model has %d layers: "
                         "is the adapter for another model?",
                         name, li, (int)a->n_layers);
    /* module path: end+1 .. cut, e.g. "self_attn.q_proj" or "mlp.down_proj" */
    const char *mod = end + 1;
    size_t ml = (size_t)(name + cut - mod);
    const char *last = mod;
    for (const char *p = mod; p < name + cut; p++)
        if (*p == '.') last = p + 1;
    size_t ll = (size_t)(name + cut - last);
    for (int i = 0; i < MDL_LT_COUNT; i++)
        if (strlen(TARGET_NAME[i]) == ll && strncmp(last, TARGET_NAME[i], ll) == 0) {
            *L = (int32_t)li;
            *t = i;
            return KILN_OK;
        }
    return kiln_fail(err, KILN_E_UNSUPPORTED,
                     "adapter tensor '%s': module '%.*s' cannot be adapted (only q/k/v/o_proj and "
                     "gate/up/down_proj)",
                     name, (int)ml, mod);
}

/* ---------------------------------------------------------------- tensors */

static float elem(const wt_tensor *t, int64_t i)
{
    const uint8_t *p = t->data;
    uint16_t h;
    float f;
    switch (t->dtype) {
    case WT_F32:
        memcpy(&f, p + 4 * i, 4);
        return f;
    case WT_F16:
        memcpy(&h, p + 2 * i, 2);
        return kiln_f16_to_f32(h);
    default:
        memcpy(&h, p + 2 * i, 2);
        return kiln_bf16_to_f32(h);
    }
}

static kiln_code shape_fail(const wt_tensor *t, const char *want, int32_t L, int tg, kiln_err *err)
{
    char got[96] = "";
    for (int i = 0, o = 0; i < t->ndim && o < (int)sizeof got - 24; i++)
        o += snprintf(got + o, sizeof got - (size_t)o, i ? ", %" PRId64 : "%" PRId64, t->shape[i]);
    return kiln_fail(err, KILN_E_CORRUPT,
                     "adapter tensor '%s' has shape [%s], layer %d's %s of the base model needs "
                     "%s: is the adapter for another base model?",
                     t->name, got, (int)L, TARGET_NAME[tg], want);
}

/* Copies A and B of one module into f32 [r, in] and [r, out] (B transposed). */
static kiln_code take_module(mdl_lora *a, mdl_lora_format fmt, int32_t L, int tg,
                             const wt_tensor *ta, const wt_tensor *tb, kiln_err *err)
{
    int64_t out, in;
    target_dims(a->m, L, tg, &out, &in);
    const wt_tensor *ts[2] = {ta, tb};
    for (int i = 0; i < 2; i++)
        if (ts[i]->dtype != WT_F32 && ts[i]->dtype != WT_F16 && ts[i]->dtype != WT_BF16)
            return kiln_fail(err, KILN_E_UNSUPPORTED, "adapter tensor '%s': dtype %s is not float",
                             ts[i]->name, wt_dtype_name(ts[i]->dtype));
    if (ta->ndim != 2) return shape_fail(ta, "a 2-D matrix", L, tg, err);
    if (tb->ndim != 2) return shape_fail(tb, "a 2-D matrix", L, tg, err);
    int64_t r = fmt == MDL_LORA_PEFT ? ta->shape[0] : ta->shape[1];
    char want[96];
    if (r < 1 || r > MDL_LORA_MAX_RANK)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "adapter tensor '%s': rank %" PRId64 " (1..%d supported)", ta->name, r,
                         MDL_LORA_MAX_RANK);
    int64_t a0 = fmt == MDL_LORA_PEFT ? r : in, a1 = fmt == MDL_LORA_PEFT ? in : r;
    int64_t b0 = fmt == MDL_LORA_PEFT ? out : r, b1 = fmt == MDL_LORA_PEFT ? r : out;
    snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", a0, a1);
    if (ta->shape[0] != a0 || ta->shape[1] != a1) return shape_fail(ta, want, L, tg, err);
    snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", b0, b1);
    if (tb->shape[0] != b0 || tb->shape[1] != b1) return shape_fail(tb, want, L, tg, err);
    if (tg <= MDL_LT_O && a->m->plan.layer[L].mixer != MDL_MIX_ATTN)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "adapter tensor '%s': layer %d is a recurrent (linear-attention) layer, "
                         "which has no %s",
                         ta->name, (int)L, TARGET_NAME[tg]);
    if (tg == MDL_LT_V && a->m->plan.layer[L].k_eq_v)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "adapter tensor '%s': layer %d takes V from k_proj and has no v_proj",
                         ta->name, (int)L);
    if ((tg == MDL_LT_K || tg == MDL_LT_V) && a->m->plan.layer[L].kv_src != L)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "adapter tensor '%s': layer %d reads another layer's K/V and has no %s",
                         ta->name, (int)L, TARGET_NAME[tg]);
    lora_mod *md = &a->mods[(size_t)L * MDL_LT_COUNT + (size_t)tg];
    float *buf = malloc(sizeof(float) * (size_t)r * (size_t)(in + out));
    if (!buf) return kiln_fail(err, KILN_E_NOMEM, "adapter: out of memory");
    float *A = buf, *Bt = buf + r * in;
    for (int64_t j = 0; j < r; j++)
        for (int64_t k = 0; k < in; k++)
            A[j * in + k] = elem(ta, fmt == MDL_LORA_PEFT ? j * in + k : k * r + j);
    for (int64_t j = 0; j < r; j++)
        for (int64_t o = 0; o < out; o++)
            Bt[j * out + o] = elem(tb, fmt == MDL_LORA_PEFT ? o * r + j : j * out + o);
    *md = (lora_mod){.r = (int32_t)r, .in = (int32_t)in, .out = (int32_t)out, .A = A, .Bt = Bt};
    return KILN_OK;
}

/* ---------------------------------------------------------------- config */

typedef struct {
    mdl_lora_format fmt;
    double alpha, mlx_scale;
    int rslora;
} lora_cfg;

static int truthy(const json_t *v)
{
    return v && json_is_true(v);
}

static int nonempty(const json_t *v)
{
    if (!v || json_is_null(v)) return 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    return 1;
}

static kiln_code read_config(mdl_lora *a, const char *dir, lora_cfg *c, kiln_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = NULL;
    size_t len = 0;
    kiln_code rc = plat_read_file(path, 1 << 20, &text, &len, err);
    if (rc == KILN_E_NOT_FOUND || rc == KILN_E_IO)
        return kiln_fail(err, KILN_E_NOT_FOUND, "adapter folder '%s' has no adapter_config.json",
                         dir);
    if (rc) return rc;
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return kiln_fail(err, KILN_E_INVALID, "%s: not a JSON object (%s)", path, je.text);
    }
    memset(c, 0, sizeof *c);
    const json_t *lp = json_object_get(j, "lora_parameters");
    const json_t *ft = json_object_get(j, "fine_tune_type");
    const json_t *pt = json_object_get(j, "peft_type");
    rc = KILN_OK;
    if (lp || ft || json_object_get(j, "num_layers") || json_object_get(j, "lora_layers")) {
        c->fmt = MDL_LORA_MLX;
        const char *ftn = json_is_string(ft) ? json_string_value(ft) : "lora";
        if (strcmp(ftn, "lora") != 0)
            rc = kiln_fail(err, KILN_E_UNSUPPORTED,
                           "%s: fine_tune_type '%s' is not supported (only 'lora'%s)", path, ftn,
                           strcmp(ftn, "dora") == 0 ? "; DoRA adapters cannot be served" : "");
        else if (!json_is_object(lp))
            rc = kiln_fail(err, KILN_E_INVALID, "%s: no lora_parameters object", path);
        else {
            const json_t *sc = json_object_get(lp, "scale");
            if (sc && !json_is_number(sc))
                rc = kiln_fail(err, KILN_E_INVALID, "%s: lora_parameters.scale is not a number",
                               path);
            c->mlx_scale = sc ? json_number_value(sc) : 20.0; /* mlx-lm's default */
        }
        if (!rc && truthy(json_object_get(j, "use_dora")))
            rc = kiln_fail(err, KILN_E_UNSUPPORTED, "%s: DoRA adapters are not supported", path);
    } else {
        c->fmt = MDL_LORA_PEFT;
        const json_t *r = json_object_get(j, "r"), *al = json_object_get(j, "lora_alpha");
        const char *ptn = json_is_string(pt) ? json_string_value(pt) : "LORA";
        const json_t *bm = json_object_get(j, "base_model_name_or_path");
        if (json_is_string(bm))
            snprintf(a->info.base_model, sizeof a->info.base_model, "%s", json_string_value(bm));
        if (strcmp(ptn, "LORA") != 0)
            rc = kiln_fail(err, KILN_E_UNSUPPORTED, "%s: peft_type '%s' is not supported (LORA)",
                           path, ptn);
        else if (!json_is_integer(r) || json_integer_value(r) < 1)
            rc = kiln_fail(err, KILN_E_INVALID, "%s: 'r' must be a positive integer", path);
        else if (al && !json_is_number(al))
            rc = kiln_fail(err, KILN_E_INVALID, "%s: 'lora_alpha' is not a number", path);
        else if (truthy(json_object_get(j, "use_dora")))
            rc = kiln_fail(err, KILN_E_UNSUPPORTED,
                           "%s: DoRA adapters (use_dora) are not supported", path);
        else if (nonempty(json_object_get(j, "modules_to_save")))
            rc = kiln_fail(err, KILN_E_UNSUPPORTED,
                           "%s: modules_to_save (full copies of whole modules) is not supported; "
                           "merge those modules into the base model",
                           path);
        else if (truthy(json_object_get(j, "fan_in_fan_out")))
            rc = kiln_fail(
                err, KILN_E_UNSUPPORTED,
                "%s: fan_in_fan_out is for Conv1D (GPT-2) bases, which kiln does not run", path);
        else if (nonempty(json_object_get(j, "alpha_pattern")))
            rc = kiln_fail(err, KILN_E_UNSUPPORTED, "%s: alpha_pattern is not supported", path);
        if (!rc) {
            c->alpha = al ? json_number_value(al) : 8.0; /* PEFT's default */
            c->rslora = truthy(json_object_get(j, "use_rslora"));
        }
    }
    json_decref(j);
    a->info.format = c->fmt;
    return rc;
}

/* ---------------------------------------------------------------- load */

kiln_code mdl_lora_load(const mdl_model *m, const char *dir, mdl_lora **out, kiln_err *err)
{
    *out = NULL;
    mdl_lora *a = calloc(1, sizeof *a);
    if (!a) return kiln_fail(err, KILN_E_NOMEM, "adapter: out of memory");
    atomic_init(&a->refs, 1);
    a->m = m;
    a->n_layers = m->plan.n_layers;
    a->mods = calloc((size_t)a->n_layers * MDL_LT_COUNT, sizeof *a->mods);
    wt_st *st = NULL;
    lora_cfg c;
    kiln_code rc = a->mods ? KILN_OK : kiln_fail(err, KILN_E_NOMEM, "adapter: out of memory");
    if (!rc) rc = read_config(a, dir, &c, err);
    if (!rc) {
        char path[4200];
        const char *file =
            c.fmt == MDL_LORA_PEFT ? "adapter_model.safetensors" : "adapters.safetensors";
        snprintf(path, sizeof path, "%s/%s", dir, file);
        rc = wt_st_open(path, &st, err);
        if (rc == KILN_E_NOT_FOUND || rc == KILN_E_IO) {
            snprintf(path, sizeof path, "%s/adapter_model.bin", dir);
            FILE *f = c.fmt == MDL_LORA_PEFT ? fopen(path, "rb") : NULL;
            if (f) fclose(f);
            rc = kiln_fail(err, KILN_E_NOT_FOUND, "adapter folder '%s' has no %s%s", dir, file,
                           f ? " (adapter_model.bin is a pickle, which kiln does not read: save "
                               "the adapter with safe_serialization=True)"
                             : "");
        }
    }
    /* pair each A with its B */
    int n = st ? wt_st_count(st) : 0;
    for (int i = 0; !rc && i < n; i++) {
        const wt_tensor *t = wt_st_at(st, i);
        int32_t L;
        int tg;
        lora_part part;
        if ((rc = parse_name(a, c.fmt, t->name, &L, &tg, &part, err))) break;
        if (part == PART_B) continue; /* taken with its A */
        char bname[512];
        size_t ln = strlen(t->name);
        if (ln >= sizeof bname) {
            rc = kiln_fail(err, KILN_E_INVALID, "adapter tensor name too long");
            break;
        }
        memcpy(bname, t->name, ln + 1);
        if (c.fmt == MDL_LORA_PEFT)
            bname[ln - strlen("A.weight")] = 'B';
        else
            bname[ln - 1] = 'b';
        const wt_tensor *tb = wt_st_find(st, bname);
        if (!tb) {
            rc = kiln_fail(err, KILN_E_CORRUPT, "adapter tensor '%s' has no '%s'", t->name, bname);
            break;
        }
        if (a->mods[(size_t)L * MDL_LT_COUNT + (size_t)tg].r) {
            rc = kiln_fail(err, KILN_E_CORRUPT, "adapter tensor '%s': layer %d's %s twice", t->name,
                           (int)L, TARGET_NAME[tg]);
            break;
        }
        rc = take_module(a, c.fmt, L, tg, t, tb, err);
    }
    for (int i = 0; !rc && i < n; i++) { /* every B has its A */
        const wt_tensor *t = wt_st_at(st, i);
        int32_t L;
        int tg;
        lora_part part;
        parse_name(a, c.fmt, t->name, &L, &tg, &part, err);
        if (part == PART_B && !a->mods[(size_t)L * MDL_LT_COUNT + (size_t)tg].r)
            rc = kiln_fail(err, KILN_E_CORRUPT, "adapter tensor '%s' has no A matrix", t->name);
    }
    wt_st_close(st);
    /* scales, summary, fingerprint */
    unsigned tmask = 0;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    for (int32_t L = 0; !rc && L < a->n_layers; L++) {
        int used = 0;
        for (int tg = 0; tg < MDL_LT_COUNT; tg++) {
            lora_mod *md = &a->mods[(size_t)L * MDL_LT_COUNT + (size_t)tg];
            if (!md->r) continue;
            md->scale = c.fmt == MDL_LORA_MLX ? (float)c.mlx_scale
                        : c.rslora            ? (float)(c.alpha / sqrt((double)md->r))
                                              : (float)(c.alpha / md->r);
            if (!a->info.n_modules) a->info.scale = md->scale;
            a->info.n_modules++;
            if (md->r > a->info.rank) a->info.rank = md->r;
            a->info.bytes += sizeof(float) * (uint64_t)md->r * (uint64_t)(md->in + md->out);
            tmask |= 1u << tg;
            used = 1;
            int32_t hdr[4] = {L, tg, md->r, 0};
            memcpy(&hdr[3], &md->scale, 4);
            XXH3_64bits_update(&hs, hdr, sizeof hdr);
            XXH3_64bits_update(&hs, md->A,
                               sizeof(float) * (size_t)md->r * (size_t)(md->in + md->out));
        }
        a->info.n_layers += used;
    }
    if (!rc && a->info.n_modules == 0)
        rc = kiln_fail(err, KILN_E_INVALID, "adapter folder '%s' holds no LoRA tensors", dir);
    if (rc) {
        mdl_lora_free(a);
        return rc;
    }
    a->fingerprint = XXH3_64bits_digest(&hs) ^ m->fingerprint;
    for (int tg = 0, o = 0; tg < MDL_LT_COUNT; tg++)
        if (tmask & (1u << tg))
            o += snprintf(a->info.targets + o, sizeof a->info.targets - (size_t)o, "%s%s",
                          o ? "," : "", TARGET_NAME[tg]);
    *out = a;
    return KILN_OK;
}

kiln_code mdl_lora_dir_bytes(const char *dir, uint64_t *bytes, kiln_err *err)
{
    static const char *const FILES[] = {"adapter_model.safetensors", "adapters.safetensors"};
    *bytes = 0;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
    if (access(cfg, R_OK) != 0) /* the same first complaint mdl_lora_load makes */
        return kiln_fail(err, KILN_E_NOT_FOUND, "adapter folder '%s' has no adapter_config.json",
                         dir);
    for (size_t f = 0; f < sizeof FILES / sizeof *FILES; f++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, FILES[f]);
        if (access(path, F_OK) != 0) continue;
        wt_st *st;
        kiln_code rc = wt_st_open(path, &st, err);
        if (rc) return rc;
        for (int i = 0; i < wt_st_count(st); i++)
            *bytes += sizeof(float) * (uint64_t)wt_st_at(st, i)->numel;
        wt_st_close(st);
        return KILN_OK;
    }
    return kiln_fail(err, KILN_E_NOT_FOUND, "adapter folder '%s' has no %s or %s", dir, FILES[0],
                     FILES[1]);
}

void mdl_lora_retain(const mdl_lora *a)
{
    /* the count is the one mutable field of a read-only adapter */
    if (a) atomic_fetch_add(&((mdl_lora *)a)->refs, 1);
}

void mdl_lora_free(mdl_lora *a)
{
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    if (a->mods)
        for (size_t i = 0; i < (size_t)a->n_layers * MDL_LT_COUNT; i++)
            free(a->mods[i].A);
    free(a->mods);
    free(a);
}

void mdl_lora_set_retain(const mdl_lora_set *set)
{
    for (int32_t i = 0; set && i < set->n; i++)
        mdl_lora_retain(set->a[i]);
}

void mdl_lora_set_release(const mdl_lora_set *set)
{
    for (int32_t i = 0; set && i < set->n; i++)
        mdl_lora_free((mdl_lora *)set->a[i]);
}

mdl_lora_info mdl_lora_get_info(const mdl_lora *a)
{
    return a->info;
}

uint64_t mdl_lora_fingerprint(const mdl_lora *a)
{
    return a->fingerprint;
}

uint64_t mdl_lora_set_ns(const mdl_lora_set *set, uint64_t ns)
{
    if (!set || set->n <= 0 || ns == 0) return ns;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    XXH3_64bits_update(&hs, &ns, sizeof ns);
    for (int32_t i = 0; i < set->n; i++) {
        uint64_t fp = set->a[i]->fingerprint;
        XXH3_64bits_update(&hs, &fp, sizeof fp);
        XXH3_64bits_update(&hs, &set->scale[i], sizeof(float));
    }
    uint64_t h = XXH3_64bits_digest(&hs);
    return h ? h : 1;
}

/* ---------------------------------------------------------------- the update */

/* Two sets are the same stack: the same adapters, in order, at the same scales. */
static int set_eq(const mdl_lora_set *x, const mdl_lora_set *y)
{
    if (x == y) return 1;
    if (x->n != y->n) return 0;
    for (int32_t i = 0; i < x->n; i++)
        if (x->a[i] != y->a[i] || memcmp(&x->scale[i], &y->scale[i], sizeof(float)))
            return 0;
    return 1;
}

static const mdl_lora_set *seq_set(const mdl_step *s, int32_t i)
{
    const mdl_lora_set *set = s->seqs[i].lora;
    return set && set->n > 0 ? set : NULL;
}

kiln_code mdl_lora_plan(mdl_step *s, arena *a, kiln_err *err)
{
    s->n_lora_tiles = 0;
    if (!s->any_lora) return KILN_OK;
    s->lora_rows = ARENA_ARRAY(a, int32_t, s->T);
    s->lora_tile0 = ARENA_ARRAY(a, int32_t, s->T + 1);
    if (!s->lora_rows || !s->lora_tile0)
        return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    int32_t n = 0, nt = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_lora_set *set = seq_set(s, i);
        if (!set) continue;
        int32_t seen = 0;
        for (int32_t k = 0; k < i && !seen; k++)
            seen = seq_set(s, k) && set_eq(seq_set(s, k), set);
        if (seen) continue; /* its rows joined the group of the first such sequence */
        int32_t g0 = n;
        for (int32_t k = i; k < s->n_seqs; k++)
            if (seq_set(s, k) && set_eq(seq_set(s, k), set))
                for (int32_t t = s->row0[k]; t < s->row0[k + 1]; t++)
                    s->lora_rows[n++] = t;
        for (int32_t t = g0; t < n; t += MDL_LORA_TILE)
            s->lora_tile0[nt++] = t;
    }
    s->lora_tile0[nt] = n;
    s->n_lora_tiles = nt;
    return KILN_OK;
}

typedef struct {
    mdl_step *s;
    int tg;
    const float *in;
    float *out;
    int64_t in_dim, out_dim;
} lora_job;

/* Tiles of up to MDL_LORA_TILE rows with one adapter stack: every row t gets
 * y_t += Σ_i scale_i · s_i · B_i (A_i x_t). Each A row and each Bt row is read
 * once for the tile (the rows share it from cache), but a row's own arithmetic
 * is the same fixed sequence whatever the tile holds: z_j is one dot over the
 * row, then y gets one axpy per j in order. So its bits depend on that row and
 * its adapters alone, not on which rows share its step or tile. */
static void lora_tiles(void *ctx, int64_t i0, int64_t i1, int tid)
{
    (void)tid;
    lora_job *j = ctx;
    mdl_step *s = j->s;
    float z[MDL_LORA_TILE][MDL_LORA_MAX_RANK];
    for (int64_t ti = i0; ti < i1; ti++) {
        const int32_t *rows = s->lora_rows + s->lora_tile0[ti];
        int32_t nr = s->lora_tile0[ti + 1] - s->lora_tile0[ti];
        const mdl_lora_set *set = s->seqs[s->tok_seq[rows[0]]].lora;
        for (int32_t i = 0; i < set->n; i++) {
            const lora_mod *md = &set->a[i]->mods[(size_t)s->layer * MDL_LT_COUNT + (size_t)j->tg];
            if (!md->r) continue;
            float sc = md->scale * set->scale[i];
            for (int32_t r = 0; r < md->r; r++) {
                const float *Ar = md->A + (int64_t)r * md->in;
                for (int32_t k = 0; k < nr; k++)
                    z[k][r] = sc * kn_dot(Ar, j->in + (int64_t)rows[k] * j->in_dim, md->in);
            }
            for (int32_t r = 0; r < md->r; r++) {
                const float *Br = md->Bt + (int64_t)r * md->out;
                for (int32_t k = 0; k < nr; k++)
                    kn_axpy(j->out + (int64_t)rows[k] * j->out_dim, z[k][r], Br, md->out);
            }
        }
    }
}

int mdl_lora_for_model(const mdl_lora *a, const mdl_model *m)
{
    return a && a->m == m;
}

void mdl_lora_apply(mdl_step *s, int tg, const float *in, int64_t in_dim, float *out,
                    int64_t out_dim)
{
    if (!s->n_lora_tiles) return;
    lora_job j = {.s = s, .tg = tg, .in = in, .out = out, .in_dim = in_dim, .out_dim = out_dim};
    kn_pool_for(s->pool, s->n_lora_tiles, 1, lora_tiles, &j);
}
