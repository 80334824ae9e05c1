/*
 * eng_seq.c — sequences over the paged KV pool (one block table per KV group,
 * and for hybrid models a working state block and its snapshots), and the
 * batched step.
 * State invariants (pools with state blocks; eng_seq.h):
 *   (1) n_cached > 0  =>  state >= 0, and state holds the state after n_cached tokens
 *   (2) snap >= 0  =>  snap_block * bt <= n_cached and snap holds the state after
 *       snap_block * bt tokens; snap_hash, when not 0, is that boundary's chain hash
 *   (3) n_dstate > 0 only between eng_seq_draft_states and the eng_seq_truncate
 *       (or free / drop_kv) that follows the drafts' step; dstate[j] then holds
 *       the state after dstate_pos + 1 + j tokens once that step ran
 * Threads: engine thread only.
 */
#include "engine/eng_seq.h"
#include "util/kiln_assert.h"

#include <stdlib.h>
#include <string.h>

kiln_code eng_seq_create(const int32_t *prompt, int32_t n, eng_seq **out, kiln_err *err)
{
    *out = NULL;
    if (n < 1) return kiln_fail(err, KILN_E_INVALID, "a sequence needs at least one token");
    eng_seq *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "sequence: out of memory");
    s->cap = n + 64;
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->cap);
    if (!s->tokens) {
        free(s);
        return kiln_fail(err, KILN_E_NOMEM, "sequence: out of memory");
    }
    memcpy(s->tokens, prompt, sizeof(int32_t) * (size_t)n);
    s->n_tokens = n;
    s->n_prompt = n;
    s->state = s->snap = -1;
    *out = s;
    return KILN_OK;
}

/* ---------------------------------------------------------------- recurrent state */

/* Gives up the latest snapshot; with `publish`, published first when its
 * boundary is known (a later sequence with this prefix resumes there), so it
 * stays CACHED; else it goes FREE unless published already. */
static void snap_release(eng_seq *s, kv_pool *kv, int publish)
{
    if (s->snap < 0) return;
    if (publish && s->snap_hash) kv_pool_publish(kv, s->snap, s->snap_hash);
    kv_pool_release(kv, s->snap);
    s->snap = -1;
    s->snap_block = 0;
    s->snap_hash = 0;
}

/* Gives back the per-position states of a drafts' step (never published). */
static void dstate_release(eng_seq *s, kv_pool *kv)
{
    for (int32_t j = 0; j < s->n_dstate; j++)
        if (s->dstate[j] >= 0) kv_pool_release(kv, s->dstate[j]);
    s->n_dstate = 0;
}

/* Forgets the recurrent state (the working one goes FREE, never published). */
static void state_release(eng_seq *s, kv_pool *kv)
{
    dstate_release(s, kv);
    if (s->state >= 0) kv_pool_release(kv, s->state);
    s->state = -1;
    snap_release(s, kv, 1);
    s->branch_block = 0;
}

/* Working state = copy of state block src. */
static void state_copy(kv_pool *kv, kv_block_id dst, kv_block_id src)
{
    size_t n;
    memcpy(kv_pool_block_data_mut(kv, dst, &n), kv_pool_block_data(kv, src, NULL),
           kv_pool_state_bytes(kv));
}

void eng_seq_free(eng_seq *s, kv_pool *kv)
{
    if (!s) return;
    state_release(s, kv);
    for (int g = 0; g < s->n_groups; g++) {
        for (int32_t i = s->n_dropped[g]; i < s->n_blocks; i++)
            kv_pool_release(kv, s->blocks[g][i]);
    }
    for (int g = 0; g < KV_MAX_GROUPS; g++)
        free(s->blocks[g]);
    free(s->hashes);
    free(s->tokens);
    free(s);
}

kiln_code eng_seq_append(eng_seq *s, int32_t tok, kiln_err *err)
{
    if (s->n_tokens == s->cap) {
        int32_t nc = s->cap * 2;
        int32_t *t = realloc(s->tokens, sizeof(int32_t) * (size_t)nc);
        if (!t) return kiln_fail(err, KILN_E_NOMEM, "sequence: out of memory");
        s->tokens = t;
        s->cap = nc;
    }
    s->tokens[s->n_tokens++] = tok;
    return KILN_OK;
}

/* Room for `need` entries in every group's table (and the hash chain). */
static kiln_code grow_blocks(eng_seq *s, const kv_pool *kv, int32_t need, kiln_err *err)
{
    if (s->n_groups == 0) s->n_groups = kv_pool_n_groups(kv);
    if (need <= s->cap_blocks) return KILN_OK;
    int32_t nc = s->cap_blocks ? s->cap_blocks : 8;
    while (nc < need)
        nc *= 2;
    for (int g = 0; g < s->n_groups; g++) {
        kv_block_id *b = realloc(s->blocks[g], sizeof *b * (size_t)nc);
        if (!b) return kiln_fail(err, KILN_E_NOMEM, "sequence: out of memory");
        s->blocks[g] = b;
    }
    uint64_t *h = realloc(s->hashes, sizeof *h * (size_t)nc);
    if (!h) return kiln_fail(err, KILN_E_NOMEM, "sequence: out of memory");
    s->hashes = h;
    s->cap_blocks = nc;
    return KILN_OK;
}

/* The first block group g still needs when the next query sits at `pos`. */
static int32_t first_needed(const kv_pool *kv, int g, int64_t pos)
{
    return kv_window_first_block(kv_pool_group_window(kv, g), kv_pool_cfg(kv)->block_tokens, pos);
}

/* Prefix hit with a window in some group: the hit ending at block e needs, in
 * each group g, blocks [first_needed(g, e), e). The hash chain is computed for
 * every full block (block j's hash covers all tokens before it); the longest e
 * whose needed blocks are all present (RAM or tier, probed without taking
 * anything) is taken. A block that fails to load after the probe (evicted
 * meanwhile, a bad SSD entry) ends the hit before it: what was taken goes back
 * and the search repeats below it. */
static int32_t attach_windowed(eng_seq *s, kv_pool *kv, uint64_t ns, int32_t max_full)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens, G = s->n_groups;
    int state = kv_pool_has_state(kv);
    uint64_t parent = 0;
    for (int32_t i = 0; i < max_full; i++)
        parent = s->hashes[i] = kv_hash_block(parent, ns, s->tokens + (size_t)i * bt, bt);
    for (int32_t limit = max_full; limit > 0;) {
        int32_t e = 0, e_kv = 0,
                run[KV_MAX_GROUPS] = {0}; /* run: present blocks in a row ending at i */
        for (int32_t i = 0; i < limit; i++) {
            int ok = 1;
            for (int g = 0; g < G; g++) {
                run[g] = kv_pool_find(kv, g, s->hashes[i]) ? run[g] + 1 : 0;
                ok &= run[g] > 0 && i + 1 - run[g] <= first_needed(kv, g, (int64_t)(i + 1) * bt);
            }
            if (ok) e_kv = i + 1;
            /* recurrent layers: the boundary also needs a snapshot of the state there */
            if (ok && state) ok = kv_pool_find(kv, KV_STATE_GROUP, s->hashes[i]) != 0;
            if (ok) e = i + 1;
        }
        /* KV reaches past the deepest state: that boundary is shared, snapshot it */
        if (state && e_kv > e) s->branch_block = e_kv;
        if (e == 0) break;
        int32_t bad = e; /* the lowest index that failed to load */
        int g = 0;
        for (; g < G; g++) {
            int32_t j0 = first_needed(kv, g, (int64_t)e * bt), j = j0;
            for (; j < e; j++) {
                kv_block_id b = kv_pool_lookup(kv, g, s->hashes[j]);
                if (b < 0) b = kv_pool_lookup_tier(kv, g, s->hashes[j], j);
                if (b < 0) break;
                s->blocks[g][j] = b;
            }
            if (j < e) { /* give back what group g took, then the groups before it */
                bad = j;
                while (j > j0)
                    kv_pool_release(kv, s->blocks[g][--j]);
                break;
            }
        }
        kv_block_id snap = -1, work = -1;
        if (g == G && state) { /* the snapshot at e, copied into a working state */
            snap = kv_pool_lookup(kv, KV_STATE_GROUP, s->hashes[e - 1]);
            if (snap < 0) snap = kv_pool_lookup_tier(kv, KV_STATE_GROUP, s->hashes[e - 1], e - 1);
            if (snap >= 0 && kv_pool_state_alloc(kv, &work, NULL) != KILN_OK) {
                kv_pool_release(kv, snap);
                snap = -1;
            }
            if (snap < 0) {
                bad = e - 1; /* a hit must end before e */
                g = G - 1;   /* give back every group's blocks below */
                while (g >= 0) {
                    for (int32_t j = first_needed(kv, g, (int64_t)e * bt); j < e; j++)
                        kv_pool_release(kv, s->blocks[g][j]);
                    g--;
                }
                limit = bad;
                continue;
            }
            state_copy(kv, work, snap);
            s->state = work;
            s->snap = snap;
            s->snap_block = e;
            s->snap_hash = s->hashes[e - 1];
            if (s->branch_block <= e) s->branch_block = 0;
        }
        if (g == G) {
            for (g = 0; g < G; g++) {
                int32_t j0 = first_needed(kv, g, (int64_t)e * bt);
                for (int32_t k = 0; k < j0; k++)
                    s->blocks[g][k] = -1;
                s->n_dropped[g] = j0;
            }
            s->n_blocks = s->n_published = e;
            s->n_cached = e * bt;
            s->n_prefix_hit = s->n_cached;
            return s->n_cached;
        }
        while (g-- > 0)
            for (int32_t j = first_needed(kv, g, (int64_t)e * bt); j < e; j++)
                kv_pool_release(kv, s->blocks[g][j]);
        limit = bad; /* block `bad` is missing: a hit must end before it */
    }
    return 0;
}

int32_t eng_seq_attach_prefix(eng_seq *s, kv_pool *kv, uint64_t ns)
{
    if (ns == 0 || s->n_cached != 0 || s->n_blocks != 0) return 0; /* 0: cache off */
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    int32_t max_full = (s->n_tokens - 1) / bt; /* keep >= 1 token pending */
    if (grow_blocks(s, kv, max_full, NULL) != KILN_OK) return 0;
    if (kv_pool_has_state(kv)) return attach_windowed(s, kv, ns, max_full);
    for (int g = 0; g < s->n_groups; g++)
        if (kv_pool_group_window(kv, g) > 0) return attach_windowed(s, kv, ns, max_full);
    /* every group keeps every block: walk the chain until a group misses */
    uint64_t parent = 0;
    for (int32_t i = 0; i < max_full; i++) {
        uint64_t h = kv_hash_block(parent, ns, s->tokens + (size_t)i * bt, bt);
        int g = 0;
        for (; g < s->n_groups; g++) {
            kv_block_id b = kv_pool_lookup(kv, g, h);
            if (b < 0) b = kv_pool_lookup_tier(kv, g, h, i); /* RAM miss: the SSD tier, if any */
            if (b < 0) break;
            s->blocks[g][i] = b;
        }
        if (g < s->n_groups) {
            while (g-- > 0)
                kv_pool_release(kv, s->blocks[g][i]);
            break;
        }
        s->hashes[i] = h;
        s->n_blocks = s->n_published = i + 1;
        parent = h;
    }
    s->n_cached = s->n_blocks * bt;
    s->n_prefix_hit = s->n_cached;
    return s->n_cached;
}

kiln_code eng_seq_reserve(eng_seq *s, kv_pool *kv, int32_t n_positions, kiln_err *err)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    int32_t need = (n_positions + bt - 1) / bt;
    kiln_code rc = grow_blocks(s, kv, need, err);
    if (rc) return rc;
    if (kv_pool_has_state(kv) && s->state < 0) { /* (1): only a sequence at its start lacks one */
        KILN_ASSERT(s->n_cached == 0);
        if ((rc = kv_pool_state_alloc(kv, &s->state, err))) return rc;
    }
    while (s->n_blocks < need) {
        int g = 0;
        for (; g < s->n_groups; g++)
            if ((rc = kv_pool_alloc_at(kv, g, s->n_blocks, &s->blocks[g][s->n_blocks], err))) break;
        if (rc) { /* the row stays whole: give back what the other groups got */
            while (g-- > 0)
                kv_pool_release(kv, s->blocks[g][s->n_blocks]);
            return rc;
        }
        s->n_blocks++;
    }
    return KILN_OK;
}

void eng_seq_drop_kv(eng_seq *s, kv_pool *kv)
{
    state_release(s, kv);
    for (int g = 0; g < s->n_groups; g++) {
        for (int32_t i = s->n_dropped[g]; i < s->n_blocks; i++)
            kv_pool_release(kv, s->blocks[g][i]);
        s->n_dropped[g] = 0;
    }
    s->n_blocks = 0;
    s->n_cached = 0;
    s->n_published = 0;
}

/* Forgets the last block-table entry of every group (releasing it unless given back). */
static void forget_last(eng_seq *s, kv_pool *kv)
{
    s->n_blocks--;
    for (int g = 0; g < s->n_groups; g++) {
        if (s->n_blocks >= s->n_dropped[g])
            kv_pool_release(kv, s->blocks[g][s->n_blocks]);
        else
            s->n_dropped[g] = s->n_blocks;
    }
}

/* Rollback of the recurrent state to the deepest snapshot at or before
 * position n: the sequence's latest, else a published one (RAM or the tier).
 * Returns the position the state is now at (a block boundary, 0 = from
 * scratch); the working state holds it. */
static int32_t state_rollback(eng_seq *s, kv_pool *kv, int32_t n)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    if (s->snap >= 0 && (int64_t)s->snap_block * bt > n) snap_release(s, kv, 0);
    if (s->snap < 0) {
        int32_t j = n / bt < s->n_published ? n / bt : s->n_published;
        for (; j > 0; j--) {
            kv_block_id b = kv_pool_lookup(kv, KV_STATE_GROUP, s->hashes[j - 1]);
            if (b < 0) b = kv_pool_lookup_tier(kv, KV_STATE_GROUP, s->hashes[j - 1], j - 1);
            if (b < 0) continue;
            s->snap = b;
            s->snap_block = j;
            s->snap_hash = s->hashes[j - 1];
            break;
        }
    }
    if (s->branch_block * bt > n) s->branch_block = 0;
    if (s->snap < 0 || s->state < 0) return 0;
    state_copy(kv, s->state, s->snap);
    return s->snap_block * bt;
}

static void truncate_cache(eng_seq *s, kv_pool *kv, int32_t n);

int32_t eng_seq_draft_states(eng_seq *s, kv_pool *kv, int32_t d)
{
    if (!kv_pool_has_state(kv) || d < 1) return d;
    dstate_release(s, kv); /* (3): a drafts' step that never got verified */
    if (d > ENG_SEQ_MAX_DRAFT) d = ENG_SEQ_MAX_DRAFT;
    int32_t bt = kv_pool_cfg(kv)->block_tokens, pos0 = s->n_cached;
    /* states after pos0 + 1 .. pos0 + d tokens, and after pos0 + 1 + d when that
     * is a block boundary (the sequence's next latest snapshot if all hold) */
    while (s->n_dstate < d + 1 &&
           (s->n_dstate < d || (pos0 + 1 + d) % bt == 0) &&
           kv_pool_state_alloc(kv, &s->dstate[s->n_dstate], NULL) == KILN_OK)
        s->n_dstate++;
    /* fewer blocks than asked: fewer drafts, and the end-of-step boundary needs its own */
    int32_t got = s->n_dstate;
    while (d > 0 && got < d + ((pos0 + 1 + d) % bt == 0)) d--;
    int32_t keep = d + (d > 0 && (pos0 + 1 + d) % bt == 0);
    while (s->n_dstate > keep) kv_pool_release(kv, s->dstate[--s->n_dstate]);
    s->dstate_pos = pos0;
    return d;
}

/* After a drafts' step (3): the working state becomes the state after the n
 * tokens kept — already there when every draft held, else the kept copy — and
 * the deepest block boundary the kept run crossed becomes the latest snapshot,
 * as snaps_done would have made it. The other per-position states go. Returns
 * 0 when n is not a position the step kept a state for (the caller rolls back
 * from a snapshot then). */
static int draft_states_resolve(eng_seq *s, kv_pool *kv, int32_t n)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens, pos0 = s->dstate_pos, m = n - pos0 - 1;
    int ok = m >= 0 && n <= s->n_cached && (n == s->n_cached || m < s->n_dstate) &&
             s->state >= 0;
    if (ok) {
        if (n < s->n_cached) state_copy(kv, s->state, s->dstate[m]);
        int32_t jb = n / bt, at = jb * bt - pos0 - 1;
        if (jb * bt > pos0 && at < s->n_dstate && s->dstate[at] >= 0) {
            snap_release(s, kv, s->snap_block == (s->n_prompt - 1) / bt);
            s->snap = s->dstate[at];
            s->dstate[at] = -1;
            s->snap_block = jb;
            /* known once the block is published (eng_seq_publish fills it in) */
            s->snap_hash = jb <= s->n_published ? s->hashes[jb - 1] : 0;
        }
    }
    dstate_release(s, kv);
    return ok;
}

void eng_seq_truncate(eng_seq *s, kv_pool *kv, int32_t n)
{
    if (n < 0) n = 0;
    int resolved = s->n_dstate > 0 && draft_states_resolve(s, kv, n);
    if (n >= s->n_tokens) return;
    s->n_tokens = n;
    if (n >= s->n_cached) return;
    /* the state cannot be trimmed: back to a snapshot, replay the rest */
    if (kv_pool_has_state(kv) && !resolved) n = state_rollback(s, kv, n);
    truncate_cache(s, kv, n);
}

/* Forgets K/V past position n (< n_cached); tokens stay. */
static void truncate_cache(eng_seq *s, kv_pool *kv, int32_t n)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    s->n_cached = n;
    int32_t keep = (n + bt - 1) / bt;
    while (s->n_blocks > keep) forget_last(s, kv);
    if (n % bt != 0 && keep - 1 < s->n_published) {
        /* the kept partial block is published (maybe shared): never rewrite it;
         * give it up and recompute from its start */
        forget_last(s, kv);
        s->n_cached = (keep - 1) * bt;
    }
    if (s->n_published > s->n_cached / bt) s->n_published = s->n_cached / bt;
    /* sliding groups: the window of the new end may reach blocks given back;
     * take them back from the cache (their hashes are known), else recompute */
    int lost = 0;
    for (int g = 0; g < s->n_groups && !lost; g++) {
        int32_t need = first_needed(kv, g, s->n_cached);
        while (s->n_dropped[g] > need && s->n_dropped[g] - 1 < s->n_published) {
            int32_t j = s->n_dropped[g] - 1;
            kv_block_id b = kv_pool_lookup(kv, g, s->hashes[j]);
            if (b < 0) b = kv_pool_lookup_tier(kv, g, s->hashes[j], j);
            if (b < 0) break;
            s->blocks[g][j] = b;
            s->n_dropped[g] = j;
        }
        lost = s->n_dropped[g] > need;
    }
    if (lost) eng_seq_drop_kv(s, kv);
}

static kiln_code step_items(mdl_ctx *cx, kv_pool *kv, eng_step_item *items, int32_t n_items,
                            uint64_t ns, float *logits, int32_t logit_rows, mdl_seq *seqs,
                            int32_t *snap_pos, kv_block_id *snap_b, int32_t *snap_n, kiln_err *err);

void eng_seq_publish(eng_seq *s, kv_pool *kv, uint64_t ns, int32_t upto)
{
    if (ns == 0) return; /* prefix cache off */
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    if (upto > s->n_cached) upto = s->n_cached;
    while (s->n_published < upto / bt) {
        int32_t i = s->n_published;
        uint64_t parent = i ? s->hashes[i - 1] : 0;
        uint64_t h = kv_hash_block(parent, ns, s->tokens + (size_t)i * bt, bt);
        s->hashes[i] = h;
        for (int g = 0; g < s->n_groups; g++)
            if (i >= s->n_dropped[g]) kv_pool_publish(kv, s->blocks[g][i], h);
        s->n_published++;
        /* a snapshot a drafts' step took at this boundary (draft_states_resolve) */
        if (s->snap >= 0 && s->snap_block == i + 1 && !s->snap_hash) s->snap_hash = h;
    }
}

/* Publishes the sequence's newly full blocks; drafts may be rolled back: never published. */
static void publish_full(eng_seq *s, kv_pool *kv, uint64_t ns)
{
    eng_seq_publish(s, kv, ns, s->n_tokens - s->n_draft);
}

/* Sliding groups: gives back the blocks the next query (at n_cached) cannot
 * read. They are full and already published (publish_full ran), so they stay
 * CACHED for prefix hits and the SSD tier; with the cache off they go FREE. */
static void drop_old(eng_seq *s, kv_pool *kv)
{
    int32_t next = s->n_tokens - s->n_draft; /* the first draft may be rejected: the next */
    if (next > s->n_cached) next = s->n_cached; /* query may sit there */
    for (int g = 0; g < s->n_groups; g++) {
        int32_t first = first_needed(kv, g, next);
        if (first > s->n_blocks) first = s->n_blocks;
        while (s->n_dropped[g] < first) {
            kv_pool_release(kv, s->blocks[g][s->n_dropped[g]]);
            s->blocks[g][s->n_dropped[g]++] = -1;
        }
    }
}

/* 1 when boundary j is on the snapshot cadence: inside the prompt (generated
 * tokens are covered by the latest snapshot, published when the sequence
 * ends: the next turn of a chat resumes there) and every state_every-th. */
static int on_cadence(const eng_seq *s, const kv_pool *kv, uint64_t ns, int32_t j)
{
    int32_t every = kv_pool_cfg(kv)->state_every;
    return ns && every > 0 && j % every == 0 && j * kv_pool_cfg(kv)->block_tokens <= s->n_prompt;
}

/* Snapshot boundaries due in a step that runs positions [p0, p1) of s: block
 * boundaries j (the state after j*bt tokens), p0 < j*bt <= p1, that are on
 * the cadence, the branch boundary attach found, or the last one (the
 * sequence's new latest snapshot). Fills pos[], ascending; returns how many
 * (at most (p1 - p0) / bt + 1). */
static int32_t snaps_due(const eng_seq *s, const kv_pool *kv, uint64_t ns, int32_t p0, int32_t p1,
                         int32_t *pos)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens, n = 0;
    int32_t last = p1 / bt;
    for (int32_t j = p0 / bt + 1; j <= last; j++)
        if (j == last || j == s->branch_block || on_cadence(s, kv, ns, j)) pos[n++] = j * bt;
    return n;
}

/* After the step: the snapshots it wrote are published under the chain (on
 * the cadence or at the branch; ns on) and given back to the cache, except
 * the last, which becomes the sequence's latest (the one it replaces is
 * published only when it is the prompt's last boundary, where a repeat of
 * the prompt resumes). */
static void snaps_done(eng_seq *s, kv_pool *kv, uint64_t ns, const int32_t *pos,
                       const kv_block_id *b, int32_t n)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    for (int32_t k = 0; k < n; k++) {
        int32_t j = pos[k] / bt;
        uint64_t h = ns && j <= s->n_published ? s->hashes[j - 1] : 0;
        if (h && (on_cadence(s, kv, ns, j) || j == s->branch_block)) kv_pool_publish(kv, b[k], h);
        if (j == s->branch_block) s->branch_block = 0;
        if (k < n - 1) {
            kv_pool_release(kv, b[k]);
            continue;
        }
        snap_release(s, kv, s->snap_block == (s->n_prompt - 1) / bt);
        s->snap = b[k];
        s->snap_block = j;
        s->snap_hash = h;
    }
}

kiln_code eng_step_run(mdl_ctx *cx, kv_pool *kv, eng_step_item *items, int32_t n_items,
                       uint64_t ns, float *logits, int32_t logit_rows, kiln_err *err)
{
    enum { MAX_ITEMS = 256 };
    mdl_seq seqs[MAX_ITEMS];
    if (n_items < 1 || n_items > MAX_ITEMS)
        return kiln_fail(err, KILN_E_INVALID, "step: %d sequences (1..%d)", (int)n_items, MAX_ITEMS);
    /* recurrent state: each item's due snapshots, in one array */
    int state = kv_pool_has_state(kv);
    int32_t bt = kv_pool_cfg(kv)->block_tokens, n_snap_max = 0;
    if (state)
        for (int32_t i = 0; i < n_items; i++)
            n_snap_max += items[i].max_tokens / bt + 2;
    int32_t *snap_pos = NULL, snap_n[MAX_ITEMS] = {0};
    kv_block_id *snap_b = NULL;
    if (n_snap_max) {
        snap_pos = malloc(sizeof *snap_pos * (size_t)n_snap_max);
        snap_b = malloc(sizeof *snap_b * (size_t)n_snap_max);
        if (!snap_pos || !snap_b) {
            free(snap_pos);
            free(snap_b);
            return kiln_fail(err, KILN_E_NOMEM, "step: out of memory");
        }
    }
    kiln_code rc = step_items(cx, kv, items, n_items, ns, logits, logit_rows, seqs, snap_pos,
                              snap_b, snap_n, err);
    free(snap_pos);
    free(snap_b);
    return rc;
}

static kiln_code step_items(mdl_ctx *cx, kv_pool *kv, eng_step_item *items, int32_t n_items,
                            uint64_t ns, float *logits, int32_t logit_rows, mdl_seq *seqs,
                            int32_t *snap_pos, kv_block_id *snap_b, int32_t *snap_n, kiln_err *err)
{
    int state = kv_pool_has_state(kv);
    int32_t used = 0; /* entries of snap_pos / snap_b taken */
    for (int32_t i = 0; i < n_items; i++) {
        eng_step_item *it = &items[i];
        eng_seq *s = it->seq;
        int32_t pend = eng_seq_pending(s);
        if (pend < 1 || it->max_tokens < 1)
            return kiln_fail(err, KILN_E_INTERNAL, "step: sequence %d has nothing to run", (int)i);
        int32_t n = pend < it->max_tokens ? pend : it->max_tokens;
        kiln_code rc = eng_seq_reserve(s, kv, s->n_cached + n, err);
        if (rc) return rc;
        it->n_run = n;
        it->n_logits = it->all_logits ? n : (n == pend ? 1 : 0);
        seqs[i] = (mdl_seq){
            .tokens = s->tokens + s->n_cached,
            .n_tokens = n,
            .pos0 = s->n_cached,
            .n_logits = it->n_logits,
            /* every known token: chunking never changes RoPE; drafts are not known
             * tokens (plain decoding would not have them yet) */
            .rope_len = s->n_tokens - s->n_draft,
            .lora = it->lora,
        };
        for (int g = 0; g < s->n_groups; g++)
            seqs[i].blocks[g] = s->blocks[g];
        seqs[i].state = state ? s->state : -1;
    }
    /* snapshots, once every item has its blocks and working state: they are
     * optional, one that finds no free state block is skipped */
    for (int32_t i = 0; i < n_items && state; i++) {
        eng_seq *s = items[i].seq;
        int32_t n = items[i].n_run;
        if (s->n_dstate > 0) { /* drafts: the state after every position (3), no boundary
                                  snapshot until verification says which positions hold */
            int32_t k = 0;
            for (; k < s->n_dstate && 1 + k <= n; k++)
                s->dstate_at[k] = s->n_cached + 1 + k;
            s->dstate_pos = s->n_cached;
            snap_n[i] = 0;
            seqs[i].n_snaps = k;
            seqs[i].snap_pos = s->dstate_at;
            seqs[i].snap_blocks = s->dstate;
        } else {
            int32_t *pos = snap_pos + used, k = 0;
            int32_t nd = snaps_due(s, kv, ns, s->n_cached, s->n_cached + n, pos);
            for (int32_t d = 0; d < nd; d++)
                if (kv_pool_state_alloc(kv, &snap_b[used + k], NULL) == KILN_OK) pos[k++] = pos[d];
            snap_n[i] = k;
            seqs[i].n_snaps = k;
            seqs[i].snap_pos = pos;
            seqs[i].snap_blocks = snap_b + used;
            used += k;
        }
    }
    int32_t rows = 0;
    for (int32_t i = 0; i < n_items; i++) rows += items[i].n_logits;
    kiln_code rc = rows > logit_rows
                       ? kiln_fail(err, KILN_E_INVALID, "step: %d logit rows for a %d-row buffer",
                                   (int)rows, (int)logit_rows)
                       : mdl_forward(cx, kv, seqs, n_items, logits, err);
    if (rc) {
        for (int32_t k = 0; k < used; k++)
            kv_pool_release(kv, snap_b[k]);
        return rc;
    }
    used = 0;
    for (int32_t i = 0; i < n_items; i++) {
        eng_seq *s = items[i].seq;
        uint64_t lns = mdl_lora_set_ns(items[i].lora, ns); /* adapters: their own namespace */
        s->n_cached += items[i].n_run;
        publish_full(s, kv, lns);
        if (state) snaps_done(s, kv, lns, snap_pos + used, snap_b + used, snap_n[i]);
        used += state ? snap_n[i] : 0;
        drop_old(s, kv);
    }
    return KILN_OK;
}
