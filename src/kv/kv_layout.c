/*
 * kv_layout.c — a model's K/V geometry per layer and its pool groups
 * (contract: kv_layout.h).
 */
#include "kv/kv_layout.h"

#include <string.h>

void kv_layout_uniform(kv_layout *l, int32_t n_layers, int32_t n_kv_heads, int32_t head_dim,
                       int32_t window)
{
    memset(l, 0, sizeof *l);
    if (n_layers > KV_FMT_MAX_LAYERS) n_layers = KV_FMT_MAX_LAYERS;
    l->n_layers = n_layers;
    l->n_groups = 1;
    l->window[0] = window;
    for (int32_t i = 0; i < n_layers; i++) {
        l->group[i] = 0;
        l->n_kv_heads[i] = n_kv_heads;
        l->head_dim[i] = head_dim;
    }
}

int kv_layout_valid(const kv_layout *l)
{
    /* no KV group at all only for a model whose every layer is recurrent */
    int min_groups = kv_layout_state_bytes(l) > 0 ? 0 : 1;
    if (l->n_layers < 1 || l->n_layers > KV_FMT_MAX_LAYERS || l->n_groups < min_groups ||
        l->n_groups > KV_MAX_GROUPS)
        return 0;
    int32_t per[KV_MAX_GROUPS] = {0};
    for (int32_t i = 0; i < l->n_layers; i++) {
        if (l->group[i] < -1 || l->group[i] >= l->n_groups || l->head_dim[i] < 1 ||
            l->head_dim[i] > 65536)
            return 0;
        if (l->group[i] >= 0) {
            if (l->n_kv_heads[i] < 1 || l->state_floats[i]) return 0;
            per[l->group[i]]++;
        }
    }
    for (int g = 0; g < l->n_groups; g++)
        if (per[g] == 0 || l->window[g] < 0) return 0;
    return 1;
}

uint64_t kv_layout_bytes_per_token(const kv_layout *l, const kv_format *f, int g, int cls)
{
    uint64_t b = 0;
    for (int32_t i = 0; i < l->n_layers && i < f->n_layers; i++)
        if (l->group[i] >= 0 && (g < 0 || l->group[i] == g))
            b += 2 * (uint64_t)l->n_kv_heads[i] *
                 kn_kv_rec_bytes(kv_format_at(f, cls, i), l->head_dim[i]);
    return b;
}

int32_t kv_layout_layers(const kv_layout *l, int g)
{
    int32_t n = 0;
    for (int32_t i = 0; i < l->n_layers; i++)
        n += l->group[i] >= 0 && (g < 0 || l->group[i] == g);
    return n;
}

void kv_layout_keep_all(kv_layout *l)
{
    for (int g = 0; g < KV_MAX_GROUPS; g++)
        l->window[g] = 0;
}

uint64_t kv_layout_state_bytes(const kv_layout *l)
{
    uint64_t b = 0;
    for (int32_t i = 0; i < l->n_layers; i++)
        b += (uint64_t)l->state_floats[i] * 4;
    return b;
}

uint64_t kv_layout_state_offset(const kv_layout *l, int32_t layer)
{
    uint64_t b = 0;
    for (int32_t i = 0; i < layer && i < l->n_layers; i++)
        b += (uint64_t)l->state_floats[i] * 4;
    return b;
}
