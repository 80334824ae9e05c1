/*
 * eng_ckpt.c — generation checkpoints (see eng_ckpt.h).
 *
 * Payload of a KV_SSD_CKPT entry (little-endian; the entry framing of kv_ssd
 * adds the checksum and identity):
 *    0  magic "KCKP"        4
 *    4  ENG_CKPT_ABI        u32
 *    8  identity            u64
 *   16  n_prompt            i32
 *   20  n_gen               i32
 *   24  rng state           4 x u64
 *   56  generated ids       n_gen x i32
 */
#include "engine/eng_ckpt.h"
#include "engine/eng_engine.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "util/kiln_le.h"

#define HDR 56

static void upd(XXH3_state_t *st, const void *p, size_t n)
{
    XXH3_64bits_update(st, p, n);
}

uint64_t eng_ckpt_identity(const eng_params *p, uint64_t ns)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint32_t abi = ENG_CKPT_ABI;
    upd(&st, &abi, sizeof abi);
    upd(&st, &ns, sizeof ns);
    upd(&st, &p->n_prompt, sizeof p->n_prompt);
    upd(&st, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    const eng_sampling *sp = &p->sp;
    float f[7] = {
        sp->temperature,       sp->top_p, sp->min_p, sp->repetition_penalty, sp->presence_penalty,
        sp->frequency_penalty, 0};
    int32_t i[4] = {sp->top_k, sp->penalty_window, sp->n_bias, p->max_tokens};
    upd(&st, f, sizeof f);
    upd(&st, i, sizeof i);
    if (sp->n_bias > 0) upd(&st, sp->logit_bias, sizeof(eng_bias) * (size_t)sp->n_bias);
    uint64_t seed = p->seed_random ? 0 : sp->seed; /* unseeded: the stored PRNG continues */
    uint8_t flags[3] = {p->seed_random, p->ignore_eos, p->skip_special};
    upd(&st, &seed, sizeof seed);
    upd(&st, flags, sizeof flags);
    upd(&st, &p->choice, sizeof p->choice);
    for (int k = 0; k < p->n_stop; k++)
        upd(&st, p->stop[k], strlen(p->stop[k]) + 1);
    if (p->n_stop_ids > 0) upd(&st, p->stop_ids, sizeof(int32_t) * (size_t)p->n_stop_ids);
    if (p->grammar) { /* another schema never resumes this one's output */
        uint64_t fp = gr_grammar_fingerprint(p->grammar);
        upd(&st, &fp, sizeof fp);
        upd(&st, &p->n_grammar_triggers, sizeof p->n_grammar_triggers);
        if (p->n_grammar_triggers > 0)
            upd(&st, p->grammar_triggers, sizeof(int32_t) * (size_t)p->n_grammar_triggers);
    }
    uint64_t h = XXH3_64bits_digest(&st);
    return h ? h : 1;
}

kiln_code eng_ckpt_encode(const eng_ckpt *ck, uint8_t **out, size_t *n, kiln_err *err)
{
    size_t len = HDR + sizeof(int32_t) * (size_t)ck->n_gen;
    uint8_t *b = malloc(len);
    if (!b) return kiln_fail(err, KILN_E_NOMEM, "checkpoint: out of memory");
    memcpy(b, "KCKP", 4);
    kiln_put_le32(b + 4, ENG_CKPT_ABI);
    kiln_put_le64(b + 8, ck->id);
    kiln_put_le32(b + 16, (uint32_t)ck->n_prompt);
    kiln_put_le32(b + 20, (uint32_t)ck->n_gen);
    for (int i = 0; i < 4; i++)
        kiln_put_le64(b + 24 + 8 * i, ck->rng.s[i]);
    for (int32_t i = 0; i < ck->n_gen; i++)
        kiln_put_le32(b + HDR + 4 * (size_t)i, (uint32_t)ck->gen[i]);
    *out = b;
    *n = len;
    return KILN_OK;
}

kiln_code eng_ckpt_decode(const uint8_t *b, size_t n, eng_ckpt *ck, kiln_err *err)
{
    memset(ck, 0, sizeof *ck);
    if (n < HDR || memcmp(b, "KCKP", 4) != 0)
        return kiln_fail(err, KILN_E_CORRUPT, "checkpoint: bad magic or size");
    if (kiln_get_le32(b + 4) != ENG_CKPT_ABI)
        return kiln_fail(err, KILN_E_CORRUPT, "checkpoint: engine state ABI %u, expected %u",
                         kiln_get_le32(b + 4), ENG_CKPT_ABI);
    ck->id = kiln_get_le64(b + 8);
    ck->n_prompt = (int32_t)kiln_get_le32(b + 16);
    ck->n_gen = (int32_t)kiln_get_le32(b + 20);
    if (ck->n_prompt < 1 || ck->n_gen < 1 || (n - HDR) / 4 != (size_t)ck->n_gen || (n - HDR) % 4)
        return kiln_fail(err, KILN_E_CORRUPT, "checkpoint: bad token counts");
    for (int i = 0; i < 4; i++)
        ck->rng.s[i] = kiln_get_le64(b + 24 + 8 * i);
    ck->gen = malloc(sizeof(int32_t) * (size_t)ck->n_gen);
    if (!ck->gen) return kiln_fail(err, KILN_E_NOMEM, "checkpoint: out of memory");
    for (int32_t i = 0; i < ck->n_gen; i++)
        ck->gen[i] = (int32_t)kiln_get_le32(b + HDR + 4 * (size_t)i);
    return KILN_OK;
}

void eng_ckpt_clear(eng_ckpt *ck)
{
    free(ck->gen);
    ck->gen = NULL;
}

int eng_ckpt_save(kv_ssd *ssd, kv_pool *kv, uint64_t id, const eng_seq *seq, int32_t n_prompt,
                  int32_t n_gen, const eng_rng *rng, int32_t *blocks_done)
{
    /* the full blocks first (the queue is FIFO): usually already there */
    for (int32_t i = *blocks_done; i < seq->n_published; i++) {
        for (int g = 0; g < seq->n_groups; g++) {
            /* given back (out of the window): still CACHED unless evicted, and an
             * evicted published block was spilled to the tier already */
            kv_block_id b =
                i >= seq->n_dropped[g] ? seq->blocks[g][i] : kv_pool_peek(kv, g, seq->hashes[i]);
            if (b < 0) continue;
            size_t n;
            const void *d = kv_pool_block_data(kv, b, &n);
            kv_ssd_put(ssd, KV_SSD_BLOCK, kv_pool_key(g, seq->hashes[i]), d, n);
        }
    }
    *blocks_done = seq->n_published;
    /* recurrent state (hybrid models): the latest boundary snapshot, where a
     * resume's prefix hit restarts the state (docs/hybrid.md) */
    if (seq->snap >= 0 && seq->snap_hash) {
        size_t n;
        const void *d = kv_pool_block_data(kv, seq->snap, &n);
        kv_ssd_put(ssd, KV_SSD_BLOCK, kv_pool_key(KV_STATE_GROUP, seq->snap_hash), d, n);
    }
    eng_ckpt ck = {
        .id = id, .n_prompt = n_prompt, .n_gen = n_gen, .rng = *rng, .gen = seq->tokens + n_prompt};
    uint8_t *buf;
    size_t len;
    if (eng_ckpt_encode(&ck, &buf, &len, NULL) != KILN_OK) return 0;
    int r = kv_ssd_put(ssd, KV_SSD_CKPT, id, buf, len);
    free(buf);
    return r == 1;
}

kiln_code eng_ckpt_load(kv_ssd *ssd, uint64_t id, int32_t n_prompt, eng_ckpt *out, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    void *buf = NULL;
    size_t n = 0;
    kiln_code rc = kv_ssd_get_alloc(ssd, KV_SSD_CKPT, id, &buf, &n, err);
    if (rc) return rc;
    rc = eng_ckpt_decode(buf, n, out, err);
    free(buf);
    if (!rc && (out->id != id || out->n_prompt != n_prompt)) {
        eng_ckpt_clear(out);
        rc = kiln_fail(err, KILN_E_CORRUPT, "checkpoint: written for another request");
    }
    if (rc) {
        kv_ssd_remove(ssd, KV_SSD_CKPT, id); /* unusable: never try it again */
        return kiln_fail(err, KILN_E_NOT_FOUND, "%s", err ? err->msg : "checkpoint unusable");
    }
    return KILN_OK;
}
