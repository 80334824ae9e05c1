/*
 * kv_ssd.h — the SSD tier of the KV cache: content-addressed entries in one
 * directory that survive restarts, written behind by one writer thread.
 *
 *   kv_ssd_config c = kv_ssd_config_default();
 *   c.dir = "/var/cache/kiln"; c.id = (kv_ssd_ident){fp, fmt, tokfp, 0, 16};
 *   kv_ssd *s;  kv_ssd_open(&c, &s, &err);            // locks DIR, indexes it
 *   kv_ssd_put(s, KV_SSD_BLOCK, hash, bytes, n);      // copied into the write queue
 *   if (kv_ssd_get(s, KV_SSD_BLOCK, hash, dst, n, &err) == KILN_OK) ...   // verified
 *   kv_ssd_close(s, 5.0);                             // drains for up to 5 s
 *
 * An entry is one file DIR/<16 hex digits of the key>.kv (blocks) or
 * DIR/ck-<16 hex>.kv (generation checkpoints, KV_SSD_CKPT):
 *   header (KV_SSD_HEADER_BYTES, little-endian, see kv_ssd.c) | payload | XXH3-64
 * where the header holds the full key (model fingerprint, KV format, tokenizer
 * identity, adapter namespace, the key hash, block_tokens) and the payload
 * length, and the trailing XXH3-64 covers header and payload. Entries are
 * written atomically (temp file, fsync, rename, directory fsync). An entry that
 * fails any check (magic, version, header checksum, another model or
 * tokenizer, length, payload checksum) is moved to DIR/quarantine/ and
 * counted, never served. A sound entry of the same model and tokenizer under
 * another setting (KV format, adapter set, block size) is skipped: not
 * indexed, not moved, counted (skipped), so a server restarted with that
 * setting finds it again.
 *
 *
 * Only regular files of this user are ever opened, never through a symlink
 * and never blocking (a FIFO, device, socket, symlink or directory named like
 * an entry is skipped and counted in `strange`, kv_ssd_file.c). A failed write
 * (a full disk, under the free-space reserve, EIO) pauses writing for
 * retry_s: puts are refused, entries on disk are still served, and the first
 * write that succeeds afterwards resumes it (degraded goes back to 0).
 * Checkpoint entries expire (kv_ssd_set_ckpt_max_age, kv_ssd_expire_in) on
 * the writer thread, so a long-running server removes them without a restart.
 *
 * Threads: every function may be called from any thread (one mutex inside);
 * the writer thread does the file I/O of puts. kv_ssd_get reads the file on
 * the calling thread.
 */
#ifndef KILN_KV_SSD_H
#define KILN_KV_SSD_H

#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

#define KV_SSD_VERSION 1u
#define KV_SSD_HEADER_BYTES 96u
#define KV_SSD_TRAILER_BYTES 8u
#define KV_SSD_MAX_PAYLOAD ((uint64_t)1 << 34) /* 16 GiB: anything larger is corrupt */

typedef enum { KV_SSD_BLOCK = 0, KV_SSD_CKPT = 1 } kv_ssd_kind;

/* What makes an entry's bytes meaningful; every field is part of the key. */
typedef struct {
    uint64_t model_fp;     /* model identity: config + tensor headers */
    uint64_t kv_format;    /* KV layout/quantization id */
    uint64_t tok_fp;       /* tokenizer identity */
    uint64_t adapter_ns;   /* adapter set; 0 = none */
    uint32_t block_tokens; /* tokens per KV block */
} kv_ssd_ident;

/* A parsed entry header. */
typedef struct {
    uint32_t version;
    kv_ssd_kind kind;
    kv_ssd_ident id;
    uint64_t key;         /* the block's hash-chain value, or the checkpoint id */
    uint64_t payload_len; /* bytes */
} kv_ssd_header;

typedef struct {
    const char *dir; /* BORROWED during kv_ssd_open; created if missing */
    kv_ssd_ident id;
    uint64_t max_bytes;   /* size cap on entries (bytes); 0 = none */
    uint64_t queue_bytes; /* write-queue cap (bytes; KILN_SSD_SPILL_QUEUE_GB) */
    int ckpt_reserve;     /* 1: half the queue is kept for checkpoints */
    uint64_t min_free_bytes; /* keep this much of the file system free; 0 = 2% of it, <= 1 GiB */
    double retry_s;          /* after a failed write, puts are refused this long (default 5) */
    int64_t fail_after;      /* test hook: writes after this many fail like ENOSPC; < 0 off */
    const char *fail_file;   /* test hook: while this file exists, writes fail like ENOSPC
                                (BORROWED during kv_ssd_open); NULL off */
    /* The start-up scan's progress, on the thread calling kv_ssd_open: done of
     * total names that look like entries (total counted by a readdir pass
     * first, so it is known from the first call; done never passes it), every
     * KV_SSD_SCAN_PROGRESS_EVERY names and once at the end with done == total.
     * NULL: none. The caller decides whether it is worth showing. */
    void (*scan_progress)(void *user, uint64_t done, uint64_t total);
    void *scan_progress_user;
} kv_ssd_config;

#define KV_SSD_SCAN_PROGRESS_EVERY 256

typedef struct {
    uint64_t entries, bytes;           /* on disk (both kinds) */
    uint64_t ckpt_entries;             /* of which checkpoints */
    uint64_t hits, misses;             /* kv_ssd_get of blocks */
    uint64_t pending, pending_bytes;   /* queued, not yet durable */
    uint64_t queue_cap;                /* the write queue's cap (config queue_bytes) */
    uint64_t written, dropped, failed; /* writes done / queue overflow / write errors */
    uint64_t quarantined, evicted;     /* bad entries moved aside / cap evictions */
    uint64_t skipped, skipped_bytes;   /* start-up: sound entries of this model under another
                                          setting (KV format, adapters, block size), left
                                          on disk untouched, not counted in entries/bytes */
    uint64_t strange;                  /* names of entries that are no regular file of ours
                                          (FIFO, device, symlink, ...): never opened, left */
    uint64_t expired;                  /* checkpoints removed by age or kv_ssd_expire_in */
    uint64_t resumed;                  /* times writing resumed after failures */
    int degraded;                      /* 1 from a write failure until a write succeeds */
    double scan_s;                     /* the start-up index scan */
} kv_ssd_stats;

typedef struct kv_ssd kv_ssd;

/* API */
kv_ssd_config kv_ssd_config_default(void); /* queue 2 GiB, no cap, retry 5 s, no fault */
/* Locks DIR (DIR/lock: a second process gets KILN_E_BUSY naming the holder),
 * removes stale temp files, indexes entries from their headers (bad ones are
 * quarantined, other settings' skipped), enforces the cap and starts the writer. *out is new:
 * kv_ssd_close. */
kiln_code kv_ssd_open(const kv_ssd_config *cfg, kv_ssd **out, kiln_err *err);
/* Writes what is queued for at most drain_s seconds, stops the writer, drops
 * the rest, unlocks and frees. NULL is a no-op. */
void kv_ssd_close(kv_ssd *s, double drain_s);
/* 1 when the key is on disk or queued. */
int kv_ssd_has(kv_ssd *s, kv_ssd_kind kind, uint64_t key);
/* Copies bytes into the write queue. Returns 1 when queued, 0 when already
 * there, -1 when refused (larger than the queue, out of memory), -2 when
 * refused because writes are paused after a failure (kv_ssd_paused_for). A
 * full queue drops its oldest items not being written (counted in dropped). */
int kv_ssd_put(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const void *data, size_t bytes);
/* kv_ssd_put for write-behind: the writer takes such an item only while the
 * engine is not busy (kv_ssd_set_busy), so persistence never competes with a
 * step for the CPU; evictions, checkpoints and flushes use kv_ssd_put. */
int kv_ssd_put_background(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const void *data,
                          size_t bytes);
/* The engine says whether steps are running (1) or it is idle (0). */
void kv_ssd_set_busy(kv_ssd *s, int busy);
/* Every queued background item becomes a normal one (a flush wants them now). */
void kv_ssd_promote(kv_ssd *s);
/* Reads and verifies an entry into dst (exactly `bytes` long). KILN_E_NOT_FOUND
 * on a miss; a corrupt entry is quarantined and reported as KILN_E_NOT_FOUND
 * too (err says why). Queued entries are served from memory. Block gets count
 * hits/misses. */
kiln_code kv_ssd_get(kv_ssd *s, kv_ssd_kind kind, uint64_t key, void *dst, size_t bytes,
                     kiln_err *err);
/* Like kv_ssd_get for an entry of unknown size: *out is new (free()). */
kiln_code kv_ssd_get_alloc(kv_ssd *s, kv_ssd_kind kind, uint64_t key, void **out, size_t *bytes,
                           kiln_err *err);
/* Removes an entry (queued or on disk). */
void kv_ssd_remove(kv_ssd *s, kv_ssd_kind kind, uint64_t key);
/* Waits up to timeout_ms for the queue to drain. Returns the number still
 * pending (0: all durable). *written_out (may be NULL): entries written while waiting. */
uint64_t kv_ssd_flush(kv_ssd *s, int timeout_ms, uint64_t *written_out);
kv_ssd_stats kv_ssd_get_stats(kv_ssd *s);
uint64_t kv_ssd_queue_cap(const kv_ssd *s); /* bytes */
/* Entries of `kind` older than max_age_s (since written or last used) are removed now;
 * returns how many. */
int kv_ssd_expire(kv_ssd *s, kv_ssd_kind kind, double max_age_s);
/* Checkpoints older than max_age_s are removed now and, from then on, by the
 * writer thread about every minute (0 = never). Returns how many went now. */
int kv_ssd_set_ckpt_max_age(kv_ssd *s, double max_age_s);
/* The entry (queued or on disk) is removed in_s seconds from now (<= 0: now)
 * unless a newer version is put before. Not kept across a restart (the max age is). */
void kv_ssd_expire_in(kv_ssd *s, kv_ssd_kind kind, uint64_t key, double in_s);
/* Seconds until puts are accepted again after a failed write; 0 = now. */
double kv_ssd_paused_for(kv_ssd *s);
/* Makes s the second tier of pool (kv_ssd_tier.c): spill-on-evict and RAM-miss
 * loads. s must outlive the pool's use; NULL detaches. */
struct kv_pool;
void kv_ssd_attach(kv_ssd *s, struct kv_pool *pool);
/* Test hook: 1 holds the writer (queued items stay queued), 0 lets it go. */
void kv_ssd_pause_writer(kv_ssd *s, int paused);

/* Entry format (pure functions; the fuzz target drives kv_ssd_header_parse). */
/* Parses and checks the fixed-size header at buf (n >= KV_SSD_HEADER_BYTES):
 * magic, version, header checksum, kind, payload bound. KILN_E_CORRUPT otherwise. */
kiln_code kv_ssd_header_parse(const uint8_t *buf, size_t n, kv_ssd_header *out, kiln_err *err);
/* Writes the header of an entry into buf[KV_SSD_HEADER_BYTES]. */
void kv_ssd_header_write(uint8_t *buf, const kv_ssd_header *h);
/* Checks a whole entry (header, identity, key, length, trailing checksum).
 * On success *payload points into buf. */
kiln_code kv_ssd_entry_check(const uint8_t *buf, size_t n, const kv_ssd_ident *id, kv_ssd_kind kind,
                             uint64_t key, const uint8_t **payload, size_t *payload_len,
                             kiln_err *err);

#endif
