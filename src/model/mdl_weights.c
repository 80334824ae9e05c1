/*
 * mdl_weights.c — what a model's weights cost, from the plan and the tensor
 * headers alone (no model loaded): parameters in total, per token (a MoE
 * layer runs top_k of its experts), and what one decoded token streams;
 * the bytes the language model maps (a multimodal checkpoint's vision/audio
 * towers and KV-shared layers' unused k/v tensors are never read, so they
 * cost no resident memory); and the plan as text for `kiln info`.
 * The decode figures feed `kiln fit` / `kiln bench`'s bytes per token.
 */
#include "model/mdl_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void mdl_plan_params(const mdl_plan *p, int tied, mdl_params *out)
{
    memset(out, 0, sizeof *out);
    uint64_t H = (uint64_t)p->hidden, V = (uint64_t)p->vocab;
    uint64_t tot = V * H * (tied ? 1 : 2), act = tot, gathered = tied ? 0 : V * H;
    if (p->pli_dim > 0) {
        uint64_t lp = (uint64_t)p->n_layers * (uint64_t)p->pli_dim;
        tot += (uint64_t)p->pli_vocab * lp + lp * H;
        act += (uint64_t)p->pli_vocab * lp + lp * H;
        gathered += (uint64_t)p->pli_vocab * lp;
    }
    for (int32_t L = 0; L < p->n_layers; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        uint64_t q = (uint64_t)l->n_heads * (uint64_t)l->head_dim,
                 kv = (uint64_t)l->n_kv_heads * (uint64_t)l->head_dim;
        uint64_t n = 2 * q * H;
        if (mdl_plan_stores_kv(p, L)) n += (l->k_eq_v ? 1 : 2) * kv * H;
        if (l->ffn == MDL_FFN_DENSE || l->moe.dense_branch) n += 3 * (uint64_t)l->ffn_dim * H;
        if (l->pli) n += 2 * (uint64_t)p->pli_dim * H;
        tot += n;
        act += n;
        if (l->ffn == MDL_FFN_MOE) {
            uint64_t e = 3 * (uint64_t)l->moe.ffn_dim * H;
            tot += (uint64_t)l->moe.n_experts * (e + H);
            act += (uint64_t)l->moe.n_experts * H + (uint64_t)l->moe.top_k * e;
        }
    }
    out->total = tot;
    out->active = act;
    out->decode = act - gathered;
}

/* The language model's tensor prefix from the names alone (mdl_load's rule). */
static const char *lm_prefix(const wt_set *ws)
{
    static const char *const cand[] = {"model.", "model.language_model.", "language_model.model."};
    char n[160];
    for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
        snprintf(n, sizeof n, "%sembed_tokens.weight", cand[i]);
        if (wt_set_find(ws, n)) return cand[i];
    }
    return NULL;
}

/* 1 when `name` (after the prefix) is a tensor the plan never reads. */
static int unused(const mdl_plan *p, const char *rest)
{
    int L;
    int used = 0;
    if (sscanf(rest, "layers.%d.%n", &L, &used) != 1 || L < 0 || L >= p->n_layers) return 0;
    const char *t = rest + used;
    if (p->layer[L].mixer == MDL_MIX_ATTN && p->layer[L].kv_src != L)
        return strncmp(t, "self_attn.k_proj.", 17) == 0 || strncmp(t, "self_attn.v_proj.", 17) == 0 ||
               strncmp(t, "self_attn.k_norm.", 17) == 0;
    return 0;
}

uint64_t mdl_weights_used_bytes(const wt_config *c, const wt_set *ws)
{
    const char *pre = lm_prefix(ws);
    mdl_plan p;
    if (!pre || mdl_plan_build(c, &p, NULL) != KILN_OK) return wt_set_bytes(ws);
    size_t pl = strlen(pre);
    uint64_t b = 0;
    for (int i = 0; i < wt_set_count(ws); i++) {
        const wt_tensor *t = wt_set_at(ws, i);
        if (strncmp(t->name, pre, pl) == 0) {
            if (!unused(&p, t->name + pl)) b += t->nbytes;
        } else if (strstr(t->name, "lm_head.")) {
            b += t->nbytes;
        }
    }
    mdl_plan_free(&p);
    return b;
}

/* ---------------------------------------------------------------- kiln info */

#define EMIT(...)                                                                                  \
    do {                                                                                           \
        if (o < n) o += (size_t)snprintf(buf + o, n - o, __VA_ARGS__);                             \
    } while (0)

/* "0-2,4" style list of the layers for which keep(L) holds. */
static size_t layer_list(const mdl_plan *p, int (*keep)(const mdl_plan *, int32_t, const void *),
                         const void *arg, char *buf, size_t n)
{
    size_t o = 0;
    int first = 1;
    for (int32_t L = 0; L < p->n_layers; L++) {
        if (!keep(p, L, arg)) continue;
        int32_t e = L;
        while (e + 1 < p->n_layers && keep(p, e + 1, arg))
            e++;
        if (e > L)
            EMIT("%s%d-%d", first ? "" : ",", (int)L, (int)e);
        else
            EMIT("%s%d", first ? "" : ",", (int)L);
        first = 0;
        L = e;
    }
    if (first) EMIT("none");
    return o;
}

typedef struct {
    int32_t window, head_dim, n_kv;
} attn_kind;

static int same_kind(const mdl_plan *p, int32_t L, const void *arg)
{
    const attn_kind *k = arg;
    const mdl_layer_plan *l = &p->layer[L];
    return l->mixer == MDL_MIX_ATTN && l->window == k->window && l->head_dim == k->head_dim &&
           l->n_kv_heads == k->n_kv;
}

static int shares_from(const mdl_plan *p, int32_t L, const void *arg)
{
    return p->layer[L].kv_src != L && p->layer[L].kv_src == *(const int32_t *)arg;
}

size_t mdl_describe_plan(const mdl_model *m, char *buf, size_t n)
{
    const mdl_plan *p = &m->plan;
    size_t o = 0;
    char list[256];
    attn_kind seen[16];
    int n_seen = 0;
    for (int32_t L = 0; L < p->n_layers && n_seen < 16; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        attn_kind k = {l->window, l->head_dim, l->n_kv_heads};
        int dup = 0;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = seen[i].window == k.window && seen[i].head_dim == k.head_dim &&
                  seen[i].n_kv == k.n_kv;
        if (dup || l->mixer != MDL_MIX_ATTN) continue;
        seen[n_seen++] = k;
        layer_list(p, same_kind, &k, list, sizeof list);
        if (k.window > 0)
            EMIT("  layers %s: sliding window %d, %d query / %d KV heads x %d%s\n", list,
                 (int)k.window, (int)l->n_heads, (int)k.n_kv, (int)k.head_dim,
                 l->k_eq_v ? ", V = K projection" : "");
        else
            EMIT("  layers %s: full attention, %d query / %d KV heads x %d%s\n", list,
                 (int)l->n_heads, (int)k.n_kv, (int)k.head_dim, l->k_eq_v ? ", V = K projection" : "");
    }
    for (int32_t d = 0; d < p->n_layers; d++) {
        if (!mdl_plan_stores_kv(p, d)) continue;
        int32_t any = 0;
        for (int32_t L = 0; L < p->n_layers; L++)
            any |= shares_from(p, L, &d);
        if (!any) continue;
        layer_list(p, shares_from, &d, list, sizeof list);
        EMIT("  KV-shared layers %s read layer %d's K/V (store none)\n", list, (int)d);
    }
    int32_t nmoe = mdl_plan_count_moe(p);
    for (int32_t L = 0; L < p->n_layers && nmoe; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        if (l->ffn != MDL_FFN_MOE) continue;
        EMIT("  experts: %d of %d layers route each token to %d of %d experts (width %" PRId64
             ")%s\n",
             (int)nmoe, (int)p->n_layers, (int)l->moe.top_k, (int)l->moe.n_experts,
             l->moe.ffn_dim, l->moe.dense_branch ? " beside a dense MLP" : "");
        break;
    }
    if (p->pli_dim > 0)
        EMIT("  per-layer inputs: %" PRId64 " per layer (a %" PRId64 " x %" PRId64
             " table, gathered)\n",
             p->pli_dim, p->pli_vocab, p->pli_dim * p->n_layers);
    mdl_params pp;
    mdl_plan_params(p, m->cfg.tie_word_embeddings, &pp);
    double u = pp.total >= 1000000000 ? 1e9 : 1e6;
    const char *un = u == 1e9 ? "B" : "M";
    EMIT("  parameters per token: %.3f %s active of %.3f %s (%.3f %s streamed per decoded "
         "token)\n",
         (double)pp.active / u, un, (double)pp.total / u, un, (double)pp.decode / u, un);
    if (o >= n && n > 0) o = n - 1;
    return o;
}
