/*
 * eng_runtime.c — opening a model for execution; single-sequence prefill and
 * generation through the batched step (the scheduler batches many).
 */
#include "engine/eng_runtime.h"
#include "engine/eng_fit.h"
#include "kernels/kn_cpu.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <stdlib.h>
#include <string.h>

eng_runtime_opts eng_runtime_opts_default(void)
{
    eng_runtime_opts o = {
        .n_threads = 0,
        .ctx = 0,
        .block_tokens = 16,
        .max_seqs = 8,
        .max_step_tokens = 512,
        .n_blocks = 0,
        .isa = NULL,
        .kv_quant = KV_QUANT_OFF,
    };
    return o;
}

kiln_code eng_runtime_kv_format(const char *dir, const wt_config *c, const eng_runtime_opts *o,
                                kv_format *out, kiln_err *err)
{
    if (o->kv_fmt) {
        *out = *o->kv_fmt;
        return KILN_OK;
    }
    kv_layout l; /* each layer's records at its own head_dim */
    kiln_code rc = eng_fit_kv_layout(c, 0, &l, err);
    if (rc) return rc;
    if (o->kv_quant == KV_QUANT_CONFIG) {
        if (!dir) return kiln_fail(err, KILN_E_INVALID, "--kv-quant config needs the model folder");
        return kv_format_load_config_dims(dir, o->kv_group, o->kv_quant_start, l.n_layers,
                                          l.head_dim, out, err);
    }
    return kv_format_init_dims(out, o->kv_quant, o->kv_group, o->kv_quant_start, l.n_layers,
                               l.head_dim, err);
}

void eng_runtime_close(eng_runtime *rt)
{
    if (!rt) return;
    mdl_ctx_free(rt->cx);
    kv_pool_destroy(rt->kv);
    if (rt->pool != rt->o.pool) kn_pool_destroy(rt->pool);
    mdl_free(rt->model);
    free(rt->logits);
    free(rt->sample_scratch);
    free(rt);
}

kiln_code eng_runtime_open(const char *dir, const eng_runtime_opts *o, eng_runtime **out,
                           kiln_err *err)
{
    *out = NULL;
    /* no mode asked for: the default (int8 for 4-bit; docs/kernels.md, the
     * accuracy table that chose it) */
    kiln_code rc =
        kn_init_mode(o->isa, o->matmul && *o->matmul ? o->matmul : KN_MATMUL_DEFAULT, err);
    if (rc) return rc;
    eng_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return kiln_fail(err, KILN_E_NOMEM, "runtime: out of memory");
    rt->o = *o;
    if (o->pool) rt->o.n_threads = kn_pool_threads(o->pool);
    double t0 = plat_now();
    if ((rc = mdl_load(dir, &rt->model, err))) goto fail;
    const wt_config *c = mdl_config(rt->model);
    if ((rc = eng_runtime_kv_format(dir, c, &rt->o, &rt->kv_fmt, err))) goto fail;
    rt->o.kv_fmt = &rt->kv_fmt;
    kv_format_describe(&rt->kv_fmt, rt->kv_desc, sizeof rt->kv_desc);
    rt->o = eng_runtime_resolve(c, &rt->o); /* the same sizing `kiln fit` predicts */
    if (rt->o.pool)
        rt->pool = rt->o.pool;
    else if ((rc = kn_pool_create(rt->o.n_threads, &rt->pool, err)))
        goto fail;
    kv_layout layout; /* sliding groups give old blocks back unless kv_window_off */
    if ((rc = mdl_kv_layout(mdl_get_plan(rt->model), rt->o.kv_window_off, &layout, err))) goto fail;
    kv_pool_config kc = {.n_blocks = rt->o.n_blocks,
                         .block_tokens = rt->o.block_tokens,
                         .fmt = &rt->kv_fmt,
                         .n_blocks_full = rt->o.n_blocks_full,
                         .max_chunk = rt->o.max_step_tokens,
                         .layout = &layout,
                         .state_blocks = rt->o.state_blocks,
                         .state_every = rt->o.state_every > 0 ? rt->o.state_every : 0};
    for (int g = 1; g < KV_MAX_GROUPS; g++) {
        kc.group_blocks[g] = rt->o.group_blocks[g];
        kc.group_blocks_full[g] = rt->o.group_blocks_full[g];
    }
    if ((rc = kv_pool_create(&kc, &rt->kv, err))) goto fail;
    if ((rc = mdl_ctx_create(rt->model, rt->pool, rt->o.max_step_tokens, rt->o.max_seqs,
                             rt->o.ctx, &rt->cx, err)))
        goto fail;
    mdl_ctx_set_fused(rt->cx, !rt->o.unfused);
    int64_t vocab = mdl_vocab(rt->model);
    rt->logit_rows = rt->o.logit_rows;
    rt->logits = malloc(sizeof(float) * (size_t)vocab * (size_t)rt->logit_rows);
    rt->sample_scratch = malloc(eng_sample_scratch_bytes(vocab));
    if (!rt->logits || !rt->sample_scratch) {
        rc = kiln_fail(err, KILN_E_NOMEM, "runtime: cannot allocate logits");
        goto fail;
    }
    /* blocks of different formats must never be shared: the format is part of
     * the namespace the hash chains live in; so is the matmul mode, whose K/V
     * values differ in the last digits (the SSD tier keys on ns too) */
    rt->ns = mdl_fingerprint(rt->model) ^ kv_format_hash(&rt->kv_fmt);
    if (strcmp(kn_matmul_mode(), "exact") != 0) rt->ns ^= 0x9e3779b97f4a7c15ull; /* int8 */
    if (rt->ns == 0) rt->ns = 1; /* 0 means "prefix cache off" */
    rt->load_s = plat_now() - t0;
    KLOG_INFO("engine", "loaded model=%s arch=%s threads=%d isa=%s matmul=%s ctx=%d kv_blocks=%d kv=%s", dir,
              c->architecture, rt->o.n_threads, kn_isa_name(), kn_matmul_mode(), (int)rt->o.ctx, (int)rt->o.n_blocks,
              rt->kv_desc);
    *out = rt;
    return KILN_OK;
fail:
    eng_runtime_close(rt);
    return rc;
}

kiln_code eng_prefill(eng_runtime *rt, eng_seq *s, int all_logits, float *out_rows,
                      kiln_err *err)
{
    int64_t vocab = mdl_vocab(rt->model);
    while (eng_seq_pending(s) > 0) {
        eng_step_item it = {.seq = s,
                            .max_tokens = all_logits ? rt->logit_rows : rt->o.max_step_tokens,
                            .all_logits = all_logits};
        kiln_code rc = eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, err);
        if (rc) return rc;
        if (all_logits) {
            memcpy(out_rows, rt->logits, sizeof(float) * (size_t)vocab * (size_t)it.n_logits);
            out_rows += (size_t)vocab * (size_t)it.n_logits;
        }
    }
    return KILN_OK;
}

static int is_eos(const wt_config *c, int32_t tok)
{
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == tok) return 1;
    return 0;
}

kiln_code eng_generate(eng_runtime *rt, const int32_t *prompt, int32_t n_prompt,
                       const eng_sampling *sp, int32_t max_tokens, int ignore_eos,
                       eng_token_fn on_token, void *user, eng_gen_result *res, kiln_err *err)
{
    memset(res, 0, sizeof *res);
    int64_t vocab = mdl_vocab(rt->model);
    kiln_code rc = eng_sampling_validate(sp, vocab, err);
    if (rc) return rc;
    if (n_prompt + max_tokens > rt->o.ctx)
        return kiln_fail(err, KILN_E_INVALID,
                         "prompt (%d tokens) + max_tokens (%d) exceeds the context (%d)",
                         (int)n_prompt, (int)max_tokens, (int)rt->o.ctx);
    eng_seq *s;
    if ((rc = eng_seq_create(prompt, n_prompt, &s, err))) return rc;
    res->n_prompt = n_prompt;
    res->n_prefix_hit = eng_seq_attach_prefix(s, rt->kv, rt->ns);
    eng_rng rng;
    eng_rng_seed(&rng, sp->seed);
    double t0 = plat_now();
    rc = eng_prefill(rt, s, 0, NULL, err);
    res->prefill_s = plat_now() - t0;
    t0 = plat_now();
    while (!rc && res->n_generated < max_tokens) {
        eng_sample_out so;
        eng_rng_at(&rng, s->n_tokens);
        int32_t tok = eng_sample_row(sp, rt->logits, vocab, s->tokens, s->n_tokens, &rng,
                                     rt->sample_scratch, &so);
        if (tok < 0) { /* no finite logit (eng_sample.h): nothing to draw */
            rc = kiln_fail(err, KILN_E_CORRUPT, "the model produced no finite logit");
            break;
        }
        res->n_generated++;
        int stop = on_token ? on_token(user, tok, &so) : 0;
        if (!ignore_eos && is_eos(mdl_config(rt->model), tok)) {
            res->stopped_eos = 1;
            break;
        }
        if (stop || res->n_generated >= max_tokens) break;
        if ((rc = eng_seq_append(s, tok, err))) break;
        eng_step_item it = {.seq = s, .max_tokens = 1};
        rc = eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, err);
    }
    res->decode_s = plat_now() - t0;
    eng_seq_free(s, rt->kv);
    return rc;
}
