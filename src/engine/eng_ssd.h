/*
 * eng_ssd.h — the engine's side of the SSD tier: write-behind of published KV
 * blocks while the engine is idle, and flush passes asked for by
 * POST /admin/cache/flush.
 *
 *   eng_ssd *w;  eng_ssd_create(ssd, rt->kv, true, &w, &err);
 *   // engine thread, between steps:
 *   if (eng_ssd_wait_ms(w) == 0) eng_ssd_work(w, idle);
 *   // any thread:
 *   uint64_t t = eng_ssd_flush_request(w);  (wake the engine)  eng_ssd_flush_wait(w, t, 5000, &r);
 *
 * Write-behind never competes with a step: eng_ssd_work does a bounded slice
 * (a few block copies into the write queue) and the engine runs it only when
 * no sequence is running or waiting; the writer thread of kv_ssd does the I/O.
 * Threads: create/free/wait_ms/work on the engine thread; flush_* anywhere.
 */
#ifndef KILN_ENG_SSD_H
#define KILN_ENG_SSD_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_pool.h"
#include "kv/kv_ssd.h"

typedef struct eng_ssd eng_ssd;

typedef struct {
    bool durable;     /* everything published is on disk */
    uint64_t queued;  /* blocks the flush pass added to the queue */
    uint64_t flushed; /* entries written while waiting */
    uint64_t pending; /* still queued when the wait ended */
    int degraded;     /* the tier stopped persisting after a write error */
} eng_flush_result;

/* API */
/* ssd and kv are BORROWED. writebehind false: spill-on-evict only (flush passes
 * still work). *out is new: eng_ssd_free. */
kiln_code eng_ssd_create(kv_ssd *ssd, kv_pool *kv, bool writebehind, eng_ssd **out, kiln_err *err);
void eng_ssd_free(eng_ssd *w); /* NULL is a no-op */
/* Engine thread: 0 when eng_ssd_work has work now, > 0 milliseconds to wait
 * before asking again (the write queue is busy), -1 nothing to do. */
int eng_ssd_wait_ms(eng_ssd *w);
/* Engine thread, between steps: completes a requested flush pass (always) and
 * queues a bounded slice of write-behind (only when idle). */
/* Before a step: background writes hold off until the engine is idle again. */
void eng_ssd_step_begin(eng_ssd *w);
void eng_ssd_work(eng_ssd *w, bool idle);
/* Any thread: asks for a flush pass; returns its ticket. The caller wakes the engine. */
uint64_t eng_ssd_flush_request(eng_ssd *w);
/* Any thread: waits (up to timeout_ms in all) for the pass, then for the queue to drain. */
void eng_ssd_flush_wait(eng_ssd *w, uint64_t ticket, int timeout_ms, eng_flush_result *r);

#endif
