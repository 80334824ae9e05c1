/*
 * eng_ckpt.h — generation checkpoints: a running sequence's state persisted in
 * the SSD tier every N generated tokens, so that an identical retried request
 * resumes after a crash with the same output.
 *
 *   uint64_t id = eng_ckpt_identity(&params, rt->ns);          // at admission
 *   eng_ckpt ck;
 *   if (eng_ckpt_load(ssd, id, n_prompt, &ck) == KILN_OK) {     // resume
 *       ... restore ck.rng, replay ck.gen[0..ck.n_gen) ...; eng_ckpt_clear(&ck);
 *   }
 *   eng_ckpt_save(ssd, kv, id, seq, n_prompt, n_gen, &rng, &blocks_done);  // every N
 *   kv_ssd_remove(ssd, KV_SSD_CKPT, id);                        // request completed
 *
 * A checkpoint entry (kind KV_SSD_CKPT, key = identity) holds the generated
 * token ids and the PRNG state; the penalty history is the token history, so
 * it needs nothing more. The sequence's full KV blocks go to the tier as
 * ordinary block entries (its hash chain), so a resume finds them like any
 * prefix; a block that did not make it to disk is recomputed, which gives the
 * same values (batch-invariant kernels), so correctness never depends on them.
 * A hybrid model's sequence also puts its latest recurrent-state snapshot (a
 * block boundary, eng_seq.h) there, so the resume's prefix hit has a state to
 * start from.
 * The identity hashes everything that decides the tokens: the engine state
 * ABI version, the model + KV-format namespace, prompt ids, sampling
 * parameters, logit bias, stop strings and ids, max_tokens, the grammar's
 * fingerprint and triggers (a constrained request's parse state is rebuilt by
 * replaying the tokens through its grammar, eng_gstate_accept), and the seed
 * (or, for a request without one, only its choice index: the stored PRNG state
 * continues it). The SSD entry header adds model, tokenizer and KV identity.
 * Threads: engine thread.
 */
#ifndef KILN_ENG_CKPT_H
#define KILN_ENG_CKPT_H

#include <stdint.h>

#include "engine/eng_engine.h"
#include "engine/eng_sample.h"
#include "engine/eng_seq.h"
#include "kv/kv_ssd.h"

#define ENG_CKPT_ABI 2u /* bump when the engine's resumable state changes meaning (2: counter-based RNG) */

typedef struct {
    uint64_t id;
    int32_t n_prompt, n_gen;
    eng_rng rng;  /* state after sampling gen[n_gen - 1] */
    int32_t *gen; /* OWNED [n_gen] generated token ids */
} eng_ckpt;

/* API */
uint64_t eng_ckpt_identity(const eng_params *p, uint64_t ns);
/* Persists seq's state: its new full blocks (from *blocks_done) and the
 * checkpoint entry. seq holds n_prompt + n_gen tokens. Returns 1 when queued. */
int eng_ckpt_save(kv_ssd *ssd, kv_pool *kv, uint64_t id, const eng_seq *seq, int32_t n_prompt,
                  int32_t n_gen, const eng_rng *rng, int32_t *blocks_done);
/* Loads and checks the checkpoint `id` for a prompt of n_prompt tokens.
 * KILN_E_NOT_FOUND when there is none (or it does not fit); out->gen: eng_ckpt_clear. */
kiln_code eng_ckpt_load(kv_ssd *ssd, uint64_t id, int32_t n_prompt, eng_ckpt *out, kiln_err *err);
void eng_ckpt_clear(eng_ckpt *ck);
/* Encoding (pure; tests): *out is new (free()). */
kiln_code eng_ckpt_encode(const eng_ckpt *ck, uint8_t **out, size_t *n, kiln_err *err);
kiln_code eng_ckpt_decode(const uint8_t *buf, size_t n, eng_ckpt *out, kiln_err *err);

#endif
