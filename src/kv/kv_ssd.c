/*
 * kv_ssd.c — the SSD tier: an index of entries on disk, a bounded write queue
 * and the writer thread that makes queued entries durable. API in kv_ssd.h;
 * an entry's bytes and names in kv_ssd_format.c; every file operation in
 * kv_ssd_file.c (no symlink followed, no blocking open, regular files only).
 *
 * Index entry states, and the function that moves each one:
 *   (none)  -> QUEUED   kv_ssd_put()        bytes copied into the queue
 *   QUEUED  -> ONDISK   writer_main()       temp file, fsync, rename, dir fsync
 *   QUEUED  -> (none)   queue_make_room()   queue over its cap: oldest not-in-flight dropped
 *   QUEUED  -> (none)   pause_writes()      a write failed: writes pause, queue dropped
 *   ONDISK  -> (none)   evict_over_cap()    size cap, least recently used first
 *   ONDISK  -> (none)   quarantine_file()   a load found the entry corrupt
 *   ONDISK  -> (none)   expire_sweep()      a checkpoint past its age or its expire_at
 * The start-up scan (scan_dir) indexes only entries of this identity; a sound
 * entry of the same model and tokenizer under another setting (KV format,
 * adapters, block size) is never indexed and never touched (st.skipped), so
 * switching settings back finds it; a name that is not a regular file of
 * ours (FIFO, device, socket, symlink, directory) is never opened, indexed or
 * moved (st.strange, one WARN line per scan); anything else that fails a
 * check is quarantined.
 * Write states (the tier as a whole):
 *   WRITING -> PAUSED   pause_writes()      a write failed (ENOSPC, EIO, under min_free):
 *                                           one WARN line, queue dropped, puts refused
 *   PAUSED  -> PROBING  (time)              cfg.retry_s after the failure: puts accepted again
 *   PROBING -> WRITING  writer_main()       a write succeeded: one WARN line (st.resumed)
 *   PROBING -> PAUSED   pause_writes()      it failed again (no new WARN line)
 *   st.degraded is 1 in PAUSED and PROBING.
 * Invariants:
 *   (1) an entry is in the map iff it is QUEUED (item != NULL) or ONDISK
 *   (2) ONDISK entries are on the LRU list exactly once; QUEUED ones are not
 *   (3) bytes == Σ file sizes of ONDISK entries; pending_bytes == Σ queued items
 * Threads: mu guards everything below; file reads in kv_ssd_get run unlocked
 * (an entry evicted meanwhile reads as a miss). The writer thread sleeps on cv,
 * and wakes on its own for checkpoint expiry (expire_sweep).
 */
#include "kv/kv_ssd.h"
#include "kv/kv_ssd_int.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "util/kiln_le.h"

#define SWEEP_EVERY_S 60.0      /* checkpoint max-age sweep period (seconds; or max age / 2) */
#define QUARANTINE_KEEP 256     /* files kept in DIR/quarantine/; later bad ones are deleted */
#define TRIM_AFTER_BYTES ((uint64_t)16 << 20) /* queue bytes written before the heap is trimmed */
#define MIN_FREE_CAP ((uint64_t)1 << 30) /* default reserve: 2% of the file system, <= 1 GiB */

/* ---------------------------------------------------------------- types */

typedef struct item item;
struct item {
    item *prev, *next; /* queue order: head = oldest */
    int32_t entry;     /* index into s->ent */
    int in_flight;     /* the writer has it (unlocked) */
    int background;    /* write-behind: written only while the engine is idle */
    size_t bytes;      /* payload bytes */
    uint8_t *buf;      /* OWNED header + payload + trailer */
};

enum { ST_FREE = 0, ST_QUEUED, ST_ONDISK, ST_NEW }; /* ST_NEW: made, state not set yet */

typedef struct {
    uint64_t key;
    uint8_t kind, state;
    uint64_t file_bytes;        /* ONDISK */
    double mtime;               /* wall-clock seconds of the last write or use */
    double expire_at;           /* wall-clock seconds; 0 = only the max age (kv_ssd_expire_in) */
    int32_t lru_prev, lru_next; /* ONDISK */
    item *q;                    /* QUEUED */
    item *next;                 /* QUEUED and in flight: a newer version (checkpoints), OWNED */
    uint8_t doomed;             /* removed while in flight: unlink once written */
    uint64_t shadow_bytes;      /* QUEUED checkpoint: an older version's file of this size is
                                   still under the name (the rename will replace it); 0 = none */
    double shadow_mtime;        /* ... and its mtime */
    int32_t free_next;
} entry;

struct kv_ssd {
    kv_ssd_config cfg;
    char *dir; /* OWNED */
    int dfd;   /* OWNED the directory: every entry is opened relative to it */
    int qdfd;  /* OWNED DIR/quarantine/; -1: bad entries are deleted instead */
    int lock_fd;
    uint64_t min_free; /* bytes the file system keeps free (kvf_write_atomic) */
    pthread_mutex_t mu;
    pthread_cond_t cv, drained; /* cv: work for the writer; drained: an item finished */
    pthread_t thread;
    int thread_started, stopping;
    int paused; /* test hook: kv_ssd_pause_writer */
    int busy;   /* kv_ssd_set_busy: the engine is stepping; background items wait */
    entry *ent; /* OWNED [n_ent_cap] */
    int32_t n_ent_cap, free_head;
    int32_t *map; /* OWNED [map_cap] open addressing: -1 empty, -2 tombstone */
    int32_t map_cap, map_used;
    int32_t lru_head, lru_tail; /* head = least recently used */
    item *q_head, *q_tail;
    int64_t writes_ok;              /* test hook: cfg.fail_after */
    char *fail_file;                /* OWNED test hook: cfg.fail_file */
    double retry_at;                /* PAUSED until this plat_now() time */
    double outage_t0;               /* plat_now() of the failure that paused writes */
    uint64_t outage_failed;         /* failed writes since then */
    double ckpt_max_age;            /* kv_ssd_set_ckpt_max_age; 0 = none */
    double next_sweep;              /* wall clock of the next expire_sweep; 0 = none due */
    int q_files;                    /* files in DIR/quarantine/ */
    uint64_t freed_since_trim;      /* bytes of written items freed since plat_trim_heap */
    kv_ssd_stats st;
};

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- index */

static uint64_t map_hash(uint64_t key, int kind)
{
    uint64_t h = (key ^ (uint64_t)kind * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
    return h ^ (h >> 29);
}

static int32_t map_find(const kv_ssd *s, int kind, uint64_t key)
{
    uint32_t mask = (uint32_t)s->map_cap - 1;
    for (uint32_t i = (uint32_t)map_hash(key, kind) & mask, n = 0; n < (uint32_t)s->map_cap;
         i = (i + 1) & mask, n++) {
        int32_t e = s->map[i];
        if (e == -1) return -1;
        if (e >= 0 && s->ent[e].key == key && s->ent[e].kind == kind) return e;
    }
    return -1;
}

static void map_put_raw(kv_ssd *s, int32_t e)
{
    uint32_t mask = (uint32_t)s->map_cap - 1;
    for (uint32_t i = (uint32_t)map_hash(s->ent[e].key, s->ent[e].kind) & mask;; i = (i + 1) & mask)
        if (s->map[i] < 0) {
            s->map[i] = e;
            return;
        }
}

static void map_del(kv_ssd *s, int32_t e)
{
    uint32_t mask = (uint32_t)s->map_cap - 1;
    for (uint32_t i = (uint32_t)map_hash(s->ent[e].key, s->ent[e].kind) & mask, n = 0;
         n < (uint32_t)s->map_cap; i = (i + 1) & mask, n++) {
        if (s->map[i] == -1) return;
        if (s->map[i] == e) {
            s->map[i] = -2;
            return;
        }
    }
}

/* Grows the entry table and rebuilds the map (dropping tombstones) when needed. */
static int index_reserve(kv_ssd *s)
{
    if (s->free_head < 0) {
        int32_t nc = s->n_ent_cap ? s->n_ent_cap * 2 : 1024;
        entry *ne = realloc(s->ent, sizeof *ne * (size_t)nc);
        if (!ne) return -1;
        memset(ne + s->n_ent_cap, 0, sizeof *ne * (size_t)(nc - s->n_ent_cap));
        for (int32_t i = s->n_ent_cap; i < nc; i++)
            ne[i].free_next = i + 1 < nc ? i + 1 : -1;
        s->free_head = s->n_ent_cap;
        s->ent = ne;
        s->n_ent_cap = nc;
    }
    if ((s->map_used + 1) * 2 > s->map_cap) {
        int32_t nc = s->map_cap;
        while (nc < 4 * s->n_ent_cap)
            nc *= 2;
        int32_t *nm = malloc(sizeof *nm * (size_t)nc);
        if (!nm) return -1;
        for (int32_t i = 0; i < nc; i++)
            nm[i] = -1;
        free(s->map);
        s->map = nm;
        s->map_cap = nc;
        s->map_used = 0;
        for (int32_t e = 0; e < s->n_ent_cap; e++)
            if (s->ent[e].state != ST_FREE) {
                map_put_raw(s, e);
                s->map_used++;
            }
    }
    return 0;
}

static int32_t entry_new(kv_ssd *s, int kind, uint64_t key)
{
    if (index_reserve(s)) return -1;
    int32_t e = s->free_head;
    s->free_head = s->ent[e].free_next;
    memset(&s->ent[e], 0, sizeof s->ent[e]);
    s->ent[e].key = key;
    s->ent[e].kind = (uint8_t)kind;
    s->ent[e].state = ST_NEW; /* in the map from now on: a rebuild keeps it */
    s->ent[e].lru_prev = s->ent[e].lru_next = -1;
    s->ent[e].free_next = -1;
    map_put_raw(s, e);
    s->map_used++;
    return e;
}

static void entry_free(kv_ssd *s, int32_t e)
{
    if (s->ent[e].next) { /* a newer version that never got queued */
        s->st.pending--;
        s->st.pending_bytes -= s->ent[e].next->bytes;
        free(s->ent[e].next->buf);
        free(s->ent[e].next);
        s->ent[e].next = NULL;
    }
    map_del(s, e);
    s->ent[e].state = ST_FREE;
    s->ent[e].free_next = s->free_head;
    s->free_head = e;
}

static void lru_unlink(kv_ssd *s, int32_t e)
{
    entry *m = &s->ent[e];
    if (m->lru_prev >= 0)
        s->ent[m->lru_prev].lru_next = m->lru_next;
    else
        s->lru_head = m->lru_next;
    if (m->lru_next >= 0)
        s->ent[m->lru_next].lru_prev = m->lru_prev;
    else
        s->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = -1;
}

static void lru_push_tail(kv_ssd *s, int32_t e)
{
    entry *m = &s->ent[e];
    m->lru_prev = s->lru_tail;
    m->lru_next = -1;
    if (s->lru_tail >= 0)
        s->ent[s->lru_tail].lru_next = e;
    else
        s->lru_head = e;
    s->lru_tail = e;
}

/* Adds an entry that is on disk (scan or writer). */
static void ondisk_add(kv_ssd *s, int32_t e, uint64_t file_bytes, double mtime)
{
    entry *m = &s->ent[e];
    m->state = ST_ONDISK;
    m->file_bytes = file_bytes;
    m->mtime = mtime;
    lru_push_tail(s, e);
    s->st.entries++;
    s->st.bytes += file_bytes;
    if (m->kind == KV_SSD_CKPT) s->st.ckpt_entries++;
}

/* Forgets an ONDISK entry and removes its file (under mu). */
static void ondisk_remove(kv_ssd *s, int32_t e, int unlink_file)
{
    entry *m = &s->ent[e];
    if (unlink_file) {
        char name[KV_SSD_NAME_MAX];
        kvs_entry_name(name, sizeof name, (kv_ssd_kind)m->kind, m->key);
        (void)unlinkat(s->dfd, name, 0);
    }
    lru_unlink(s, e);
    s->st.entries--;
    s->st.bytes -= m->file_bytes;
    if (m->kind == KV_SSD_CKPT) s->st.ckpt_entries--;
    entry_free(s, e);
}

static void evict_over_cap(kv_ssd *s)
{
    if (!s->cfg.max_bytes) return;
    while (s->st.bytes > s->cfg.max_bytes && s->lru_head >= 0) {
        ondisk_remove(s, s->lru_head, 1);
        s->st.evicted++;
    }
}

/* Moves a bad file to DIR/quarantine/ (deletes it when that holds
 * QUARANTINE_KEEP files already, or cannot be used). Logs the first few. */
static void quarantine_file(kv_ssd *s, const char *name, const char *why)
{
    int moved = kvf_quarantine(s->dfd, s->q_files < QUARANTINE_KEEP ? s->qdfd : -1, name);
    s->q_files += moved;
    s->st.quarantined++;
    if (s->st.quarantined <= 8)
        KLOG_WARN("ssd", "quarantined entry=%s %s reason=\"%s\"%s", name,
                  moved ? "moved_to=quarantine/" : "deleted=1", why,
                  s->st.quarantined == 8 ? " (further ones are only counted in /stats)" : "");
}

/* ---------------------------------------------------------------- queue */

static void queue_unlink(kv_ssd *s, item *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        s->q_head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        s->q_tail = it->prev;
    s->st.pending--;
    s->st.pending_bytes -= it->bytes;
}

/* Drops a queued item (under mu, not in flight). Its index entry goes too,
 * unless an older version's file is still under the name (a replaced
 * checkpoint, shadow_bytes): then that version is indexed again (forget == 0:
 * a full queue, a failed write) or its file removed (forget == 1: kv_ssd_remove,
 * expiry). */
static void queue_drop(kv_ssd *s, item *it, int forget)
{
    int32_t e = it->entry;
    entry *m = &s->ent[e];
    queue_unlink(s, it);
    free(it->buf);
    free(it);
    m->q = NULL;
    uint64_t shadow = m->shadow_bytes;
    m->shadow_bytes = 0;
    if (shadow && !forget) {
        ondisk_add(s, e, shadow, m->shadow_mtime);
        return;
    }
    if (shadow) {
        char name[KV_SSD_NAME_MAX];
        kvs_entry_name(name, sizeof name, (kv_ssd_kind)m->kind, m->key);
        (void)unlinkat(s->dfd, name, 0);
    }
    entry_free(s, e);
}

/* Bytes of the queue that items of `kind` may use. */
static uint64_t queue_cap_for(const kv_ssd *s, int kind)
{
    if (!s->cfg.ckpt_reserve || kind == KV_SSD_CKPT) return s->cfg.queue_bytes;
    return s->cfg.queue_bytes / 2; /* the other half stays free for checkpoints */
}

/* Drops the oldest not-in-flight items (blocks first when checkpoints have a
 * reserve) until `need` more bytes fit. Returns 0 when they fit. */
static int queue_make_room(kv_ssd *s, int kind, uint64_t need)
{
    uint64_t cap = queue_cap_for(s, kind);
    if (need > cap) return -1;
    for (int pass = 0; pass < 2 && s->st.pending_bytes + need > cap; pass++) {
        for (item *it = s->q_head, *nx; it && s->st.pending_bytes + need > cap; it = nx) {
            nx = it->next;
            if (it->in_flight) continue;
            /* pass 0: only blocks go (checkpoints are worth more) */
            if (pass == 0 && s->ent[it->entry].kind == KV_SSD_CKPT && kind != KV_SSD_CKPT) continue;
            queue_drop(s, it, 0);
            s->st.dropped++;
        }
    }
    return s->st.pending_bytes + need > cap ? -1 : 0;
}

/* ---------------------------------------------------------------- writer */

/* Under mu: a write failed with errno e. Writes pause for cfg.retry_s (puts
 * are refused, what is queued is dropped: it would only fail too); the first
 * failure of an outage logs one WARN line, later ones are counted. */
static void pause_writes(kv_ssd *s, int e)
{
    double now = plat_now();
    s->st.failed++;
    s->outage_failed++;
    if (!s->st.degraded) {
        s->st.degraded = 1;
        s->outage_t0 = now;
        s->outage_failed = 1;
        KLOG_WARN("ssd",
                  "write failed (%s): the SSD cache stops writing and retries every %.1f s; "
                  "entries on disk are still served",
                  e == ENOSPC ? "no space left, or under the free-space reserve" : strerror(e),
                  s->cfg.retry_s);
    }
    s->retry_at = now + s->cfg.retry_s;
    for (item *it = s->q_head, *nx; it; it = nx) {
        nx = it->next;
        if (!it->in_flight) {
            queue_drop(s, it, 0);
            s->st.dropped++;
        }
    }
}

/* Under mu: a write succeeded; ends an outage. */
static void writes_ok(kv_ssd *s)
{
    s->writes_ok++;
    s->st.written++;
    if (s->st.degraded) {
        s->st.degraded = 0;
        s->st.resumed++;
        /* at the level of the failure's line, so that whoever saw one sees the other */
        KLOG_WARN("ssd", "writes resumed after=%.1fs failed_writes=%" PRIu64,
                  plat_now() - s->outage_t0, s->outage_failed);
    }
}

/* Under mu: 1 while puts are refused (PAUSED). */
static int writes_paused(const kv_ssd *s)
{
    return s->st.degraded && plat_now() < s->retry_at;
}

/* Under mu: removes checkpoints past their expire_at or older than
 * ckpt_max_age, and plans the next sweep (next_sweep). */
static void expire_sweep(kv_ssd *s, double now)
{
    double every = s->ckpt_max_age / 2 < SWEEP_EVERY_S ? s->ckpt_max_age / 2 : SWEEP_EVERY_S;
    double next = s->ckpt_max_age > 0 ? now + every : 0;
    for (int32_t e = 0; e < s->n_ent_cap; e++) {
        entry *m = &s->ent[e];
        if (m->kind != KV_SSD_CKPT || (m->state != ST_ONDISK && m->state != ST_QUEUED)) continue;
        int due = (m->expire_at > 0 && now >= m->expire_at) ||
                  (s->ckpt_max_age > 0 && m->state == ST_ONDISK && now - m->mtime > s->ckpt_max_age);
        if (!due) {
            if (m->expire_at > 0 && (next == 0 || m->expire_at < next)) next = m->expire_at;
            continue;
        }
        if (m->state == ST_ONDISK)
            ondisk_remove(s, e, 1);
        else if (!m->q->in_flight)
            queue_drop(s, m->q, 1);
        else {
            m->doomed = 1; /* the writer unlinks it once written */
            continue;
        }
        s->st.expired++;
    }
    s->next_sweep = next;
}

/* Under mu: sleeps until there is work, or until the next sweep is due. */
static void writer_wait(kv_ssd *s)
{
    if (s->next_sweep <= 0) {
        pthread_cond_wait(&s->cv, &s->mu);
        return;
    }
    double in = s->next_sweep - wall_now();
    if (in <= 0) return;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    time_t whole = (time_t)in;
    long frac = (long)((in - (double)whole) * 1e9);
    dl.tv_sec += whole;
    dl.tv_nsec += frac;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &dl);
}

/* Under mu: the test hooks (cfg.fail_after, cfg.fail_file): 1 when this write fails. */
static int hook_fails(const kv_ssd *s)
{
    if (s->fail_file && access(s->fail_file, F_OK) == 0) return 1;
    return s->cfg.fail_after >= 0 && s->writes_ok >= s->cfg.fail_after;
}

/* Under mu: the bookkeeping after item `it` was written (e == 0) or not. */
static void write_done(kv_ssd *s, item *it, int e, size_t file_bytes)
{
    queue_unlink(s, it);
    entry *m = &s->ent[it->entry];
    if (e) {
        uint64_t shadow = m->shadow_bytes; /* the older checkpoint is still under the name */
        m->shadow_bytes = 0;
        m->q = NULL;
        if (shadow && !m->doomed && !m->next) {
            ondisk_add(s, it->entry, shadow, m->shadow_mtime);
        } else {
            if (shadow && m->doomed) { /* removed meanwhile: the older file goes too */
                char name[KV_SSD_NAME_MAX];
                kvs_entry_name(name, sizeof name, (kv_ssd_kind)m->kind, m->key);
                (void)unlinkat(s->dfd, name, 0);
            }
            entry_free(s, it->entry);
        }
        pause_writes(s, e);
        return;
    }
    m->shadow_bytes = 0; /* the rename replaced it */
    writes_ok(s);
    if (m->doomed) { /* kv_ssd_remove or expiry came while it was written */
        char name[KV_SSD_NAME_MAX];
        kvs_entry_name(name, sizeof name, (kv_ssd_kind)m->kind, m->key);
        (void)unlinkat(s->dfd, name, 0);
        entry_free(s, it->entry);
    } else if (m->next) { /* a newer version came while this one was written: queue it */
        item *nx = m->next;
        m->next = NULL;
        m->q = nx;
        m->shadow_bytes = file_bytes; /* what was just written is under the name until then */
        m->shadow_mtime = wall_now();
        nx->prev = s->q_tail;
        if (s->q_tail)
            s->q_tail->next = nx;
        else
            s->q_head = nx;
        s->q_tail = nx;
    } else {
        ondisk_add(s, it->entry, file_bytes, wall_now());
        m->q = NULL;
        evict_over_cap(s);
    }
}

static void *writer_main(void *arg)
{
    kv_ssd *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->next_sweep > 0 && wall_now() >= s->next_sweep) expire_sweep(s, wall_now());
        item *it = s->paused ? NULL : s->q_head;
        while (it && (it->in_flight || (it->background && s->busy)))
            it = it->next;
        if (!it) {
            if (s->stopping) break;
            if (s->freed_since_trim >= TRIM_AFTER_BYTES && !s->q_head) {
                /* a burst of queued copies (8 KiB-ish each, interleaved with
                 * long-lived allocations) has drained: without this the heap
                 * keeps its pages and RSS stays at the burst's peak
                 * (tests/soak: 27 -> 88 MB after the queue emptied) */
                s->freed_since_trim = 0;
                pthread_mutex_unlock(&s->mu);
                plat_trim_heap();
                pthread_mutex_lock(&s->mu);
                continue;
            }
            writer_wait(s);
            continue;
        }
        it->in_flight = 1;
        entry *m = &s->ent[it->entry];
        kv_ssd_kind kind = (kv_ssd_kind)m->kind;
        uint64_t key = m->key;
        int fail = hook_fails(s);
        uint64_t min_free = s->min_free;
        pthread_mutex_unlock(&s->mu);
        /* the checksum and the I/O run unlocked: the item is ours while in flight */
        kv_ssd_header h = {.version = KV_SSD_VERSION,
                           .kind = kind,
                           .id = s->cfg.id,
                           .key = key,
                           .payload_len = it->bytes};
        kv_ssd_header_write(it->buf, &h);
        size_t body = KV_SSD_HEADER_BYTES + it->bytes;
        kiln_put_le64(it->buf + body, XXH3_64bits(it->buf, body));
        char name[KV_SSD_NAME_MAX];
        kvs_entry_name(name, sizeof name, kind, key);
        int e = fail ? ENOSPC
                     : kvf_write_atomic(s->dfd, name, it->buf, body + KV_SSD_TRAILER_BYTES,
                                        min_free);
        pthread_mutex_lock(&s->mu);
        write_done(s, it, e, body + KV_SSD_TRAILER_BYTES);
        s->freed_since_trim += body + KV_SSD_TRAILER_BYTES;
        free(it->buf);
        free(it);
        pthread_cond_broadcast(&s->drained);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- open / scan */

kv_ssd_config kv_ssd_config_default(void)
{
    kv_ssd_config c = {.queue_bytes = (uint64_t)2 << 30, .fail_after = -1, .retry_s = 5.0};
    return c;
}

typedef struct {
    int32_t e;
    double mtime;
} scan_row;

static int by_mtime(const void *a, const void *b)
{
    double x = ((const scan_row *)a)->mtime, y = ((const scan_row *)b)->mtime;
    return x < y ? -1 : x > y;
}

/* Checks one regular file's header and length; KILN_OK when it may be indexed.
 * *other is set to 1 (with KILN_E_NOT_FOUND) for a sound entry of this model
 * written under another setting: it is skipped, neither indexed nor moved.
 * *strange is set to 1 (KILN_E_UNSUPPORTED) when the name turned out not to be
 * a regular file of ours once opened (swapped since kvf_classify). */
static kiln_code scan_one(kv_ssd *s, const char *name, kv_ssd_kind kind, uint64_t key,
                          uint64_t *size, double *mtime, int *other, int *strange, kiln_err *err)
{
    *other = *strange = 0;
    struct stat sb;
    kvf_kind k;
    int fd = kvf_open_read(s->dfd, name, &sb, &k);
    if (fd < 0) {
        *strange = k != KVF_MISSING;
        return kiln_fail(err, k == KVF_MISSING ? KILN_E_NOT_FOUND : KILN_E_UNSUPPORTED,
                         "not a regular file of ours");
    }
    uint8_t hb[KV_SSD_HEADER_BYTES];
    ssize_t r = pread(fd, hb, sizeof hb, 0);
    close(fd);
    kv_ssd_header h;
    kiln_code rc = kv_ssd_header_parse(hb, r < 0 ? 0 : (size_t)r, &h, err);
    if (rc) return rc;
    /* framing first, against the entry's own identity: a truncated or
     * misnamed entry is corrupt whatever setting wrote it */
    if ((rc = kvs_header_check(&h, &h.id, kind, key, (uint64_t)sb.st_size, err))) return rc;
    if (kvs_ident_other_setting(&h.id, &s->cfg.id)) {
        *other = 1;
        *size = (uint64_t)sb.st_size;
        return kiln_fail(err, KILN_E_NOT_FOUND,
                         "ssd entry: another KV format, adapter or block size");
    }
    if ((rc = kvs_header_check(&h, &s->cfg.id, kind, key, (uint64_t)sb.st_size, err))) return rc;
    *size = (uint64_t)sb.st_size;
    *mtime = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
    return KILN_OK;
}

/* A name of the entry pattern that is no regular file of ours: counted,
 * never opened again, never moved; the scan logs the first one. */
static void strange_entry(kv_ssd *s, const char *name, char *first, size_t first_n)
{
    if (!s->st.strange++) snprintf(first, first_n, "%s", name);
}

/* One name of the directory: indexed (row added), skipped, or quarantined. */
static kiln_code scan_name(kv_ssd *s, const char *nm, int d_type, scan_row **rows, size_t *n,
                           size_t *cap, char *first_strange, size_t fs_n, kiln_err *err)
{
    if (!strncmp(nm, ".tmp-", 5)) { /* a write a crash interrupted: never renamed */
        (void)unlinkat(s->dfd, nm, 0);
        return KILN_OK;
    }
    kv_ssd_kind kind;
    uint64_t key, size = 0;
    double mtime = 0;
    if (kvs_parse_name(nm, &kind, &key) != 0) return KILN_OK; /* lock, quarantine/, others */
    /* FIFOs, devices, sockets, links: never opened (readdir's type when the
     * file system gives one, saving a syscall per entry; else fstatat) */
    struct stat sb;
    kvf_kind k = d_type == DT_REG ? KVF_REGULAR
                 : d_type != DT_UNKNOWN ? KVF_STRANGE
                                        : kvf_classify(s->dfd, nm, &sb);
    if (k == KVF_MISSING) return KILN_OK;
    if (k != KVF_REGULAR) {
        strange_entry(s, nm, first_strange, fs_n);
        return KILN_OK;
    }
    kiln_err why;
    int other, strange;
    if (scan_one(s, nm, kind, key, &size, &mtime, &other, &strange, &why) != KILN_OK) {
        if (other) { /* this model under another setting: not ours to serve or move */
            s->st.skipped++;
            s->st.skipped_bytes += size;
        } else if (strange) {
            strange_entry(s, nm, first_strange, fs_n);
        } else if (why.code != KILN_E_NOT_FOUND) {
            quarantine_file(s, nm, why.msg);
        }
        return KILN_OK;
    }
    if (map_find(s, kind, key) >= 0) return KILN_OK;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        scan_row *nr = realloc(*rows, nc * sizeof *nr);
        if (!nr) return kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory indexing %s", s->dir);
        *rows = nr;
        *cap = nc;
    }
    int32_t e = entry_new(s, kind, key);
    if (e < 0) return kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory indexing %s", s->dir);
    s->ent[e].file_bytes = size;
    (*rows)[(*n)++] = (scan_row){e, mtime};
    return KILN_OK;
}

static DIR *open_scan(kv_ssd *s)
{
    int dup_fd = fcntl(s->dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d && dup_fd >= 0) close(dup_fd);
    if (d) rewinddir(d); /* a dup shares the offset: an earlier pass left it at the end */
    return d;
}

/* Names that look like entries: readdir only, no open or stat (the
 * progress's total; a folder of 100,000 entries lists in ~50 ms). */
static uint64_t count_entry_names(kv_ssd *s)
{
    DIR *d = open_scan(s);
    if (!d) return 0;
    uint64_t n = 0;
    struct dirent *de;
    kv_ssd_kind kind;
    uint64_t key;
    while ((de = readdir(d)))
        if (kvs_parse_name(de->d_name, &kind, &key) == 0) n++;
    closedir(d);
    return n;
}

static kiln_code scan_dir(kv_ssd *s, kiln_err *err)
{
    uint64_t total = s->cfg.scan_progress ? count_entry_names(s) : 0, done = 0;
    if (s->cfg.scan_progress) s->cfg.scan_progress(s->cfg.scan_progress_user, 0, total);
    DIR *d = open_scan(s);
    if (!d) return kiln_fail(err, KILN_E_IO, "--ssd-cache %s: %s", s->dir, strerror(errno));
    scan_row *rows = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    kiln_code rc = KILN_OK;
    char first_strange[256] = "";
    kv_ssd_kind kind;
    uint64_t key;
    while (!rc && (de = readdir(d))) {
        rc = scan_name(s, de->d_name, de->d_type, &rows, &n, &cap, first_strange,
                       sizeof first_strange, err);
        if (s->cfg.scan_progress && kvs_parse_name(de->d_name, &kind, &key) == 0) {
            if (++done > total) total = done; /* a name that appeared since the count */
            if (done % KV_SSD_SCAN_PROGRESS_EVERY == 0)
                s->cfg.scan_progress(s->cfg.scan_progress_user, done, total);
        }
    }
    closedir(d);
    /* the end: done == total (names that vanished since the count are done too) */
    if (s->cfg.scan_progress && rc == KILN_OK)
        s->cfg.scan_progress(s->cfg.scan_progress_user, total, total);
    if (s->st.strange)
        KLOG_WARN("ssd",
                  "skipped %" PRIu64 " name(s) that are no regular file of ours (FIFO, device, "
                  "socket, symlink, directory or another user's), e.g. %s/%s: never opened, "
                  "never served, left in place",
                  s->st.strange, s->dir, first_strange);
    if (rc == KILN_OK) {
        if (n) qsort(rows, n, sizeof *rows, by_mtime); /* least recently used first */
        for (size_t i = 0; i < n; i++)
            ondisk_add(s, rows[i].e, s->ent[rows[i].e].file_bytes, rows[i].mtime);
        evict_over_cap(s);
    }
    free(rows);
    return rc;
}

static kiln_code take_lock(kv_ssd *s, kiln_err *err)
{
    s->lock_fd = openat(s->dfd, "lock", O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                        0600);
    struct stat sb;
    if (s->lock_fd < 0 || fstat(s->lock_fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = s->lock_fd < 0 ? errno : 0;
        if (s->lock_fd >= 0) close(s->lock_fd);
        s->lock_fd = -1;
        return kiln_fail(err, KILN_E_IO, "--ssd-cache %s/lock: %s", s->dir,
                         e ? strerror(e) : "not a regular file");
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "?";
        ssize_t r = pread(s->lock_fd, pid, sizeof pid - 1, 0);
        if (r > 0) pid[r] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(s->lock_fd);
        s->lock_fd = -1;
        return kiln_fail(err, KILN_E_BUSY,
                         "--ssd-cache %s is in use by another kiln process (pid %s); give each "
                         "server its own directory",
                         s->dir, pid);
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(s->lock_fd, 0) != 0 || pwrite(s->lock_fd, buf, (size_t)n, 0) != n) {
        /* the pid is only for the message above; the lock itself holds */
    }
    return KILN_OK;
}

/* DIR/quarantine/: a real directory of ours, or none (bad entries are then deleted). */
static void open_quarantine(kv_ssd *s)
{
    if (mkdirat(s->dfd, "quarantine", 0700) != 0 && errno != EEXIST) return;
    s->qdfd = openat(s->dfd, "quarantine", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->qdfd < 0) {
        KLOG_WARN("ssd", "%s/quarantine is not a directory of ours: bad entries will be deleted",
                  s->dir);
        return;
    }
    int dup_fd = fcntl(s->qdfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0) close(dup_fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') s->q_files++;
    closedir(d);
}

/* The directory: created if missing, opened once; everything else is relative to it. */
static kiln_code open_dir(kv_ssd *s, kiln_err *err)
{
    if (mkdir(s->dir, 0700) != 0 && errno != EEXIST)
        return kiln_fail(err, KILN_E_IO, "--ssd-cache %s: cannot create it: %s", s->dir,
                         strerror(errno));
    s->dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dfd < 0)
        return kiln_fail(err, KILN_E_IO, "--ssd-cache %s: not a directory we can use: %s", s->dir,
                         strerror(errno));
    /* the reserve: 2% of the file system, at most 1 GiB, unless configured */
    uint64_t fs = kvf_fs_size(s->dfd);
    s->min_free = s->cfg.min_free_bytes ? s->cfg.min_free_bytes
                  : fs / 50 < MIN_FREE_CAP ? fs / 50
                                           : MIN_FREE_CAP;
    return KILN_OK;
}

kiln_code kv_ssd_open(const kv_ssd_config *cfg, kv_ssd **out, kiln_err *err)
{
    *out = NULL;
    if (!cfg->dir || !cfg->dir[0])
        return kiln_fail(err, KILN_E_INVALID, "--ssd-cache needs a directory");
    kv_ssd *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory");
    s->cfg = *cfg;
    if (!(s->cfg.retry_s > 0)) s->cfg.retry_s = 5.0;
    s->dfd = s->qdfd = s->lock_fd = -1;
    s->lru_head = s->lru_tail = -1;
    s->free_head = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->drained, NULL);
    size_t dl = strlen(cfg->dir);
    s->dir = strdup(cfg->dir);
    s->fail_file = cfg->fail_file ? strdup(cfg->fail_file) : NULL;
    s->cfg.fail_file = NULL; /* the copy above is what counts */
    s->map_cap = 1024;
    s->map = malloc(sizeof *s->map * (size_t)s->map_cap);
    kiln_code rc;
    if (!s->dir || !s->map || (cfg->fail_file && !s->fail_file)) {
        rc = kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < s->map_cap; i++)
        s->map[i] = -1;
    while (dl > 1 && s->dir[dl - 1] == '/')
        s->dir[--dl] = 0;
    if ((rc = open_dir(s, err))) goto fail;
    if ((rc = take_lock(s, err))) goto fail;
    open_quarantine(s);
    double t0 = plat_now();
    if ((rc = scan_dir(s, err))) goto fail;
    s->st.scan_s = plat_now() - t0;
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        rc = kiln_fail(err, KILN_E_NOMEM, "ssd cache: cannot start the writer thread");
        goto fail;
    }
    s->thread_started = 1;
    KLOG_INFO("ssd",
              "opened dir=%s entries=%" PRIu64 " bytes=%" PRIu64 " quarantined=%" PRIu64
              " skipped=%" PRIu64 " strange=%" PRIu64 " scan_ms=%.1f cap_bytes=%" PRIu64
              " min_free_bytes=%" PRIu64,
              s->dir, s->st.entries, s->st.bytes, s->st.quarantined, s->st.skipped,
              s->st.strange, s->st.scan_s * 1e3, cfg->max_bytes, s->min_free);
    *out = s;
    return KILN_OK;
fail:
    kv_ssd_close(s, 0);
    return rc;
}

void kv_ssd_close(kv_ssd *s, double drain_s)
{
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->paused = 0;
        pthread_mutex_unlock(&s->mu);
        if (drain_s > 0) kv_ssd_flush(s, (int)(drain_s * 1000), NULL);
        pthread_mutex_lock(&s->mu);
        for (item *it = s->q_head, *nx; it; it = nx) { /* what did not make it in time */
            nx = it->next;
            if (!it->in_flight) queue_drop(s, it, 0);
        }
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int32_t e = 0; e < s->n_ent_cap; e++) /* newer checkpoint versions never queued */
        if (s->ent[e].state != ST_FREE && s->ent[e].next) {
            free(s->ent[e].next->buf);
            free(s->ent[e].next);
        }
    if (s->lock_fd >= 0) close(s->lock_fd); /* releases the flock */
    if (s->qdfd >= 0) close(s->qdfd);
    if (s->dfd >= 0) close(s->dfd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->drained);
    free(s->ent);
    free(s->map);
    free(s->dir);
    free(s->fail_file);
    free(s);
}

/* ---------------------------------------------------------------- API */

int kv_ssd_has(kv_ssd *s, kv_ssd_kind kind, uint64_t key)
{
    pthread_mutex_lock(&s->mu);
    int32_t e = map_find(s, kind, key);
    int r = e >= 0 && !s->ent[e].doomed;
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Under mu: keeps data as the version to write after the in-flight one of e. */
static int stash_newer(kv_ssd *s, int32_t e, const void *data, size_t bytes)
{
    if (writes_paused(s)) return -2;
    item *it = calloc(1, sizeof *it);
    uint8_t *buf = malloc(KV_SSD_HEADER_BYTES + bytes + KV_SSD_TRAILER_BYTES);
    if (!it || !buf) {
        free(it);
        free(buf);
        s->st.dropped++;
        return -1;
    }
    memcpy(buf + KV_SSD_HEADER_BYTES, data, bytes);
    it->buf = buf;
    it->bytes = bytes;
    it->entry = e;
    s->ent[e].doomed = 0;    /* a newer version outlives a removal */
    s->ent[e].expire_at = 0; /* and an expiry set on the old one */
    item *old = s->ent[e].next;
    if (old) { /* replaced before it was ever queued */
        s->st.pending_bytes -= old->bytes;
        free(old->buf);
        free(old);
    } else {
        s->st.pending++;
    }
    s->st.pending_bytes += bytes;
    s->ent[e].next = it;
    return 1;
}

static int put(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const void *data, size_t bytes,
               int background);

int kv_ssd_put(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const void *data, size_t bytes)
{
    return put(s, kind, key, data, bytes, 0);
}

int kv_ssd_put_background(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const void *data, size_t bytes)
{
    return put(s, kind, key, data, bytes, 1);
}

void kv_ssd_set_busy(kv_ssd *s, int busy)
{
    pthread_mutex_lock(&s->mu);
    if (s->busy != busy) {
        s->busy = busy;
        if (!busy) pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

void kv_ssd_promote(kv_ssd *s)
{
    pthread_mutex_lock(&s->mu);
    for (item *it = s->q_head; it; it = it->next)
        it->background = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int put(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const void *data, size_t bytes,
               int background)
{
    pthread_mutex_lock(&s->mu);
    int r = 0;
    int32_t old = map_find(s, kind, key);
    uint64_t shadow = 0; /* bytes of an older checkpoint file under the name */
    double shadow_mtime = 0;
    if (old >= 0 && kind == KV_SSD_CKPT) { /* a newer checkpoint replaces the old one */
        item *q = s->ent[old].state == ST_QUEUED ? s->ent[old].q : NULL;
        if (q && !q->in_flight && !s->st.degraded &&
            s->st.pending_bytes - q->bytes + bytes <= queue_cap_for(s, kind)) {
            /* in place, keeping the queued version's turn: re-queued at the tail
             * at every save, a checkpoint would never be written while a fast
             * decode keeps queueing blocks ahead of it */
            uint8_t *buf = malloc(KV_SSD_HEADER_BYTES + bytes + KV_SSD_TRAILER_BYTES);
            if (!buf) { /* the queued version stays */
                s->st.dropped++;
                r = -1;
                goto out;
            }
            memcpy(buf + KV_SSD_HEADER_BYTES, data, bytes);
            free(q->buf);
            s->st.pending_bytes = s->st.pending_bytes - q->bytes + bytes;
            q->buf = buf;
            q->bytes = bytes;
            r = 1;
            goto out;
        }
        if (q && !q->in_flight) {
            queue_drop(s, q, 0); /* an older file, if any, is indexed again... */
            old = map_find(s, kind, key);
        }
        if (old >= 0 && s->ent[old].state == ST_ONDISK) {
            /* ...and stays until the rename replaces it: a crash meanwhile keeps it */
            shadow = s->ent[old].file_bytes;
            shadow_mtime = s->ent[old].mtime;
            ondisk_remove(s, old, 0);
        } else if (old >= 0) { /* being written right now: the newer version waits beside it */
            r = stash_newer(s, old, data, bytes);
            goto out;
        }
        old = -1;
    }
    if (old >= 0) goto out;
    r = -2;
    if (writes_paused(s)) goto out; /* after a failed write: until cfg.retry_s has passed */
    r = -1;
    item *it = NULL;
    uint8_t *buf = NULL;
    int32_t e = -1;
    if (queue_make_room(s, kind, bytes) == 0) {
        it = calloc(1, sizeof *it);
        buf = malloc(KV_SSD_HEADER_BYTES + bytes + KV_SSD_TRAILER_BYTES);
        e = it && buf ? entry_new(s, kind, key) : -1;
    }
    if (e < 0) {
        free(it);
        free(buf);
        s->st.dropped++;
        if (shadow) { /* the older checkpoint stays what is on disk */
            int32_t back = entry_new(s, kind, key);
            if (back >= 0) ondisk_add(s, back, shadow, shadow_mtime);
        }
        goto out;
    }
    s->ent[e].shadow_bytes = shadow;
    s->ent[e].shadow_mtime = shadow_mtime;
    memcpy(buf + KV_SSD_HEADER_BYTES, data, bytes);
    it->buf = buf;
    it->bytes = bytes;
    it->entry = e;
    it->background = background;
    s->ent[e].state = ST_QUEUED;
    s->ent[e].q = it;
    it->prev = s->q_tail;
    if (s->q_tail)
        s->q_tail->next = it;
    else
        s->q_head = it;
    s->q_tail = it;
    s->st.pending++;
    s->st.pending_bytes += bytes;
    pthread_cond_signal(&s->cv);
    r = 1;
out:
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* The shared body of the gets: want == SIZE_MAX means "any size, allocate". */
static kiln_code get_impl(kv_ssd *s, kv_ssd_kind kind, uint64_t key, void *dst, size_t want,
                          void **out, size_t *out_n, kiln_err *err)
{
    pthread_mutex_lock(&s->mu);
    int32_t e = map_find(s, kind, key);
    if (e < 0) {
        if (kind == KV_SSD_BLOCK) s->st.misses++;
        pthread_mutex_unlock(&s->mu);
        return kiln_fail(err, KILN_E_NOT_FOUND, "not in the ssd cache");
    }
    if (s->ent[e].state == ST_QUEUED && s->ent[e].doomed) {
        if (kind == KV_SSD_BLOCK) s->st.misses++;
        pthread_mutex_unlock(&s->mu);
        return kiln_fail(err, KILN_E_NOT_FOUND, "not in the ssd cache");
    }
    if (s->ent[e].state == ST_QUEUED) { /* not written yet: serve the queued copy */
        item *it = s->ent[e].next ? s->ent[e].next : s->ent[e].q; /* the newest version */
        kiln_code rc = KILN_OK;
        if (want != SIZE_MAX && it->bytes != want) {
            rc = kiln_fail(err, KILN_E_NOT_FOUND, "ssd entry of %zu bytes, want %zu", it->bytes,
                           want);
        } else if (want == SIZE_MAX) {
            *out = malloc(it->bytes ? it->bytes : 1);
            if (*out)
                memcpy(*out, it->buf + KV_SSD_HEADER_BYTES, it->bytes), *out_n = it->bytes;
            else
                rc = kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory");
        } else {
            memcpy(dst, it->buf + KV_SSD_HEADER_BYTES, want);
        }
        if (kind == KV_SSD_BLOCK) rc ? s->st.misses++ : s->st.hits++;
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    lru_unlink(s, e); /* a use: most recently used now */
    lru_push_tail(s, e);
    s->ent[e].mtime = wall_now();
    char name[KV_SSD_NAME_MAX];
    kvs_entry_name(name, sizeof name, kind, key);
    pthread_mutex_unlock(&s->mu);

    uint8_t *buf = NULL;
    size_t n = 0;
    const uint8_t *payload = NULL;
    size_t plen = 0;
    kiln_code rc = kvf_read_entry(s->dfd, name, &buf, &n, err);
    if (!rc) rc = kv_ssd_entry_check(buf, n, &s->cfg.id, kind, key, &payload, &plen, err);
    if (!rc && want != SIZE_MAX && plen != want)
        rc = kiln_fail(err, KILN_E_INVALID, "ssd entry: %zu payload bytes, the pool wants %zu",
                       plen, want);
    if (!rc) {
        if (want == SIZE_MAX) {
            memmove(buf, payload, plen); /* hand the buffer over, payload first */
            *out = buf;
            *out_n = plen;
            buf = NULL;
        } else {
            memcpy(dst, payload, plen);
        }
        kvf_touch(s->dfd, name); /* last use survives a restart (LRU order) */
    }
    free(buf);
    pthread_mutex_lock(&s->mu);
    if (rc == KILN_E_CORRUPT || rc == KILN_E_NOT_FOUND || rc == KILN_E_UNSUPPORTED ||
        rc == KILN_E_IO) {
        int32_t e2 = map_find(s, kind, key);
        if (e2 >= 0 && s->ent[e2].state == ST_ONDISK) {
            /* forgotten in every case; only a corrupt file is moved aside: a
             * strange one (no regular file of ours) or an unreadable one stays */
            ondisk_remove(s, e2, 0);
            if (rc == KILN_E_CORRUPT) quarantine_file(s, name, err ? err->msg : "corrupt");
            if (rc == KILN_E_UNSUPPORTED) s->st.strange++;
        }
        rc = KILN_E_NOT_FOUND;
    }
    if (rc == KILN_E_INVALID) rc = KILN_E_NOT_FOUND; /* another block size: not ours, not corrupt */
    if (kind == KV_SSD_BLOCK) rc ? s->st.misses++ : s->st.hits++;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

kiln_code kv_ssd_get(kv_ssd *s, kv_ssd_kind kind, uint64_t key, void *dst, size_t bytes,
                     kiln_err *err)
{
    kiln_err local;
    return get_impl(s, kind, key, dst, bytes, NULL, NULL, err ? err : &local);
}

kiln_code kv_ssd_get_alloc(kv_ssd *s, kv_ssd_kind kind, uint64_t key, void **out, size_t *bytes,
                           kiln_err *err)
{
    kiln_err local;
    *out = NULL;
    *bytes = 0;
    return get_impl(s, kind, key, NULL, SIZE_MAX, out, bytes, err ? err : &local);
}

void kv_ssd_remove(kv_ssd *s, kv_ssd_kind kind, uint64_t key)
{
    pthread_mutex_lock(&s->mu);
    int32_t e = map_find(s, kind, key);
    if (e >= 0) {
        if (s->ent[e].state == ST_ONDISK)
            ondisk_remove(s, e, 1);
        else if (!s->ent[e].q->in_flight)
            queue_drop(s, s->ent[e].q, 1); /* and the older version on disk (its shadow) */
        else
            s->ent[e].doomed = 1; /* in flight: the writer unlinks it once written */
    }
    pthread_mutex_unlock(&s->mu);
}

uint64_t kv_ssd_flush(kv_ssd *s, int timeout_ms, uint64_t *written_out)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->mu);
    uint64_t w0 = s->st.written;
    while (s->st.pending > 0 && !writes_paused(s))
        if (pthread_cond_timedwait(&s->drained, &s->mu, &dl) == ETIMEDOUT) break;
    uint64_t left = s->st.pending;
    if (written_out) *written_out = s->st.written - w0;
    pthread_mutex_unlock(&s->mu);
    return left;
}

kv_ssd_stats kv_ssd_get_stats(kv_ssd *s)
{
    pthread_mutex_lock(&s->mu);
    kv_ssd_stats st = s->st;
    pthread_mutex_unlock(&s->mu);
    st.queue_cap = s->cfg.queue_bytes;
    return st;
}

int kv_ssd_expire(kv_ssd *s, kv_ssd_kind kind, double max_age_s)
{
    double now = wall_now();
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int32_t e = s->lru_head, nx; e >= 0; e = nx) {
        nx = s->ent[e].lru_next;
        if (s->ent[e].kind == kind && now - s->ent[e].mtime > max_age_s) {
            ondisk_remove(s, e, 1);
            n++;
        }
    }
    s->st.expired += (uint64_t)n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int kv_ssd_set_ckpt_max_age(kv_ssd *s, double max_age_s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t before = s->st.expired;
    s->ckpt_max_age = max_age_s > 0 ? max_age_s : 0;
    expire_sweep(s, wall_now());
    int n = (int)(s->st.expired - before);
    pthread_cond_broadcast(&s->cv); /* the writer plans its next sweep */
    pthread_mutex_unlock(&s->mu);
    return n;
}

void kv_ssd_expire_in(kv_ssd *s, kv_ssd_kind kind, uint64_t key, double in_s)
{
    pthread_mutex_lock(&s->mu);
    int32_t e = map_find(s, kind, key);
    if (e >= 0) {
        double at = wall_now() + (in_s > 0 ? in_s : 0);
        s->ent[e].expire_at = at;
        if (s->next_sweep <= 0 || at < s->next_sweep) s->next_sweep = at;
        if (in_s <= 0) expire_sweep(s, wall_now());
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

double kv_ssd_paused_for(kv_ssd *s)
{
    pthread_mutex_lock(&s->mu);
    double left = writes_paused(s) ? s->retry_at - plat_now() : 0;
    pthread_mutex_unlock(&s->mu);
    return left > 0 ? left : 0;
}

void kv_ssd_pause_writer(kv_ssd *s, int paused)
{
    pthread_mutex_lock(&s->mu);
    s->paused = paused;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

uint64_t kv_ssd_queue_cap(const kv_ssd *s)
{
    return s->cfg.queue_bytes;
}
