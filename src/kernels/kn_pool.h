/*
 * kn_pool.h — persistent compute threads with one shape: parallel-for over
 * output rows.
 *
 *   kn_pool *pool; kn_pool_create(2, &pool, &err);
 *   kn_pool_for(pool, n_rows, 16, my_rows_fn, &ctx);   // returns when all are done
 *   kn_pool_destroy(pool);
 *
 * Work is split over output rows, never over a reduction axis, so each output
 * element is reduced by one thread in one fixed order (batch invariance).
 * The calling thread takes part (tid 0). Workers spin briefly, then sleep.
 * Threads: one caller at a time (the engine thread); fn must not lock,
 * allocate or log.
 */
#ifndef KILN_KN_POOL_H
#define KILN_KN_POOL_H

#include <stdint.h>

#include "util/kiln_err.h"

typedef struct kn_pool kn_pool;
typedef void (*kn_range_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* API */
/* n_threads >= 1 (the caller counts as one). *out is new: kn_pool_destroy frees it. */
kiln_code kn_pool_create(int n_threads, kn_pool **out, kiln_err *err);
void kn_pool_destroy(kn_pool *pool); /* NULL is a no-op */
int kn_pool_threads(const kn_pool *pool);
/* kn_pool_for calls so far that were split over more than one thread (each is
 * one barrier); read on the calling thread. NULL: 0. */
uint64_t kn_pool_jobs(const kn_pool *pool);
/* Runs fn over [0, n) in contiguous chunks of at least `grain` items. A NULL pool
 * runs everything on the caller with tid 0. */
void kn_pool_for(kn_pool *pool, int64_t n, int64_t grain, kn_range_fn fn, void *ctx);

#endif
