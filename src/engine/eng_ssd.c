/*
 * eng_ssd.c — write-behind and flush passes over the KV pool's published
 * blocks (see eng_ssd.h).
 *
 * A pass walks every published block (kv_pool_next_published) and queues the
 * ones the tier does not hold yet. Write-behind passes run in slices of
 * SLICE_BLOCKS while the engine is idle; a pass that ends with the pool's
 * publish generation unchanged since it began marks the pool clean, and no
 * work is reported until something new is published. A flush pass runs to the
 * end in one go (between two steps) and then answers its ticket.
 * Threads: the engine thread owns cursor/pass state; mu/cv guard flush_done.
 */
#include "engine/eng_ssd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define SLICE_BLOCKS 8

struct eng_ssd {
    kv_ssd *ssd; /* BORROWED */
    kv_pool *kv; /* BORROWED */
    bool writebehind;
    /* engine thread */
    int32_t cursor;
    uint64_t pass_gen, clean_gen;
    int in_pass;
    int pass_refused; /* a put of this pass was refused (writes paused): not clean */
    /* flush tickets */
    _Atomic uint64_t flush_req;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t flush_done, flush_queued; /* under mu */
};

kiln_code eng_ssd_create(kv_ssd *ssd, kv_pool *kv, bool writebehind, eng_ssd **out, kiln_err *err)
{
    *out = NULL;
    eng_ssd *w = calloc(1, sizeof *w);
    if (!w) return kiln_fail(err, KILN_E_NOMEM, "ssd write-behind: out of memory");
    w->ssd = ssd;
    w->kv = kv;
    w->writebehind = writebehind;
    w->clean_gen = (uint64_t)-1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    return KILN_OK;
}

void eng_ssd_free(eng_ssd *w)
{
    if (!w) return;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* Queues published blocks not yet in the tier, from the cursor, at most max
 * (< 0: all). Returns blocks queued; *ended set when the walk reached the end. */
static uint64_t walk(eng_ssd *w, int max, int *ended, int background)
{
    uint64_t queued = 0;
    int seen = 0;
    *ended = 0;
    for (;;) {
        if (max >= 0 && seen >= max) return queued;
        uint64_t h;
        kv_block_id b = kv_pool_next_published(w->kv, &w->cursor, &h);
        if (b < 0) {
            *ended = 1;
            return queued;
        }
        seen++;
        if (kv_ssd_has(w->ssd, KV_SSD_BLOCK, h)) continue;
        size_t n;
        const void *d = kv_pool_block_data(w->kv, b, &n);
        int r = background ? kv_ssd_put_background(w->ssd, KV_SSD_BLOCK, h, d, n)
                           : kv_ssd_put(w->ssd, KV_SSD_BLOCK, h, d, n);
        if (r == 1) queued++;
        if (r == -2) w->pass_refused = 1; /* a full disk: this block waits for the next pass */
    }
}

int eng_ssd_wait_ms(eng_ssd *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t done = w->flush_done;
    pthread_mutex_unlock(&w->mu);
    if (atomic_load(&w->flush_req) > done) return 0;
    if (!w->writebehind) return -1;
    if (!w->in_pass && kv_pool_publish_gen(w->kv) == w->clean_gen) return -1;
    /* writes paused after a failure (a full disk): ask again when they resume */
    double paused = kv_ssd_paused_for(w->ssd);
    if (paused > 0) return paused < 1.0 ? (int)(paused * 1000) + 1 : 1000;
    kv_ssd_stats st = kv_ssd_get_stats(w->ssd);
    /* the queue is for evictions and checkpoints too: write-behind uses a quarter */
    size_t bb;
    (void)kv_pool_block_data(w->kv, 0, &bb);
    if (st.pending_bytes + bb > kv_ssd_queue_cap(w->ssd) / 4) return 10;
    return 0;
}

void eng_ssd_work(eng_ssd *w, bool idle)
{
    kv_ssd_set_busy(w->ssd, !idle); /* background writes wait while steps run */
    uint64_t req = atomic_load(&w->flush_req);
    pthread_mutex_lock(&w->mu);
    uint64_t done = w->flush_done;
    pthread_mutex_unlock(&w->mu);
    if (req > done) { /* a flush pass: everything, now */
        int ended;
        w->cursor = 0;
        w->in_pass = 0;
        kv_ssd_promote(w->ssd); /* write-behind already queued goes now too */
        uint64_t q = walk(w, -1, &ended, 0);
        w->cursor = 0;
        pthread_mutex_lock(&w->mu);
        w->flush_done = req;
        w->flush_queued = q;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    if (!idle || eng_ssd_wait_ms(w) != 0) return;
    if (!w->in_pass) {
        w->in_pass = 1;
        w->pass_refused = 0;
        w->cursor = 0;
        w->pass_gen = kv_pool_publish_gen(w->kv);
    }
    int ended;
    walk(w, SLICE_BLOCKS, &ended, 1);
    if (ended) {
        w->in_pass = 0;
        w->cursor = 0;
        if (kv_pool_publish_gen(w->kv) == w->pass_gen && !w->pass_refused)
            w->clean_gen = w->pass_gen;
    }
}

void eng_ssd_step_begin(eng_ssd *w)
{
    kv_ssd_set_busy(w->ssd, 1);
}

uint64_t eng_ssd_flush_request(eng_ssd *w)
{
    return atomic_fetch_add(&w->flush_req, 1) + 1;
}

void eng_ssd_flush_wait(eng_ssd *w, uint64_t ticket, int timeout_ms, eng_flush_result *r)
{
    struct timespec t0, dl;
    clock_gettime(CLOCK_REALTIME, &t0);
    dl = t0;
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    *r = (eng_flush_result){0};
    pthread_mutex_lock(&w->mu);
    while (w->flush_done < ticket)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT) break;
    int passed = w->flush_done >= ticket;
    r->queued = w->flush_queued;
    pthread_mutex_unlock(&w->mu);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long left = (long)(dl.tv_sec - now.tv_sec) * 1000 + (dl.tv_nsec - now.tv_nsec) / 1000000L;
    r->pending = kv_ssd_flush(w->ssd, left > 0 ? (int)left : 0, &r->flushed);
    kv_ssd_stats st = kv_ssd_get_stats(w->ssd);
    r->degraded = st.degraded;
    if (!passed) r->pending += 1; /* the pass itself has not run: nothing is known durable */
    r->durable = passed && r->pending == 0 && !st.degraded;
}
