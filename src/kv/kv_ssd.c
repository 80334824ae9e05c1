/*
 * kv_ssd.c — the SSD tier: an index of entries on disk, a bounded write queue
 * and the writer thread that makes queued entries durable. API in kv_ssd.h.
 *
 * Entry file layout (all integers little-endian):
 *    0  magic "KILNKVS\0"          8
 *    8  version (KV_SSD_VERSION)   u32
 *   12  kind (kv_ssd_kind)         u32
 *   16  model_fp                   u64
 *   24  kv_format                  u64
 *   32  tok_fp                     u64
 *   40  adapter_ns                 u64
 *   48  key                        u64
 *   56  block_tokens               u32
 *   60  reserved (0)               u32
 *   64  payload_len                u64
 *   72  XXH3-64 of bytes [0, 72)   u64   (a flipped header byte is caught by the scan)
 *   80  reserved (0)               16
 *   96  payload                    payload_len bytes
 *    .  XXH3-64 of header+payload  u64   (verified on every load)
 *
 * Index entry states, and the function that moves each one:
 *   (none)  -> QUEUED   kv_ssd_put()        bytes copied into the queue
 *   QUEUED  -> ONDISK   writer_main()       temp file, fsync, rename, dir fsync
 *   QUEUED  -> (none)   queue_make_room()   queue over its cap: oldest not-in-flight dropped
 *   QUEUED  -> (none)   writer_main()       a write failed: tier degraded, queue dropped
 *   ONDISK  -> (none)   evict_over_cap()    size cap, least recently used first
 *   ONDISK  -> (none)   quarantine()        a load found the entry corrupt
 * The start-up scan (scan_dir) indexes only entries of this identity; a sound
 * entry of the same model and tokenizer under another setting (KV format,
 * adapters, block size) is never indexed and never touched (st.skipped), so
 * switching settings back finds it; anything else that fails is quarantined.
 * Invariants:
 *   (1) an entry is in the map iff it is QUEUED (item != NULL) or ONDISK
 *   (2) ONDISK entries are on the LRU list exactly once; QUEUED ones are not
 *   (3) bytes == Σ file sizes of ONDISK entries; pending_bytes == Σ queued items
 * Threads: mu guards everything below; file reads in kv_ssd_get run unlocked
 * (an entry evicted meanwhile reads as a miss). The writer thread sleeps on cv.
 */
#include "kv/kv_ssd.h"
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

static const uint8_t MAGIC[8] = {'K', 'I', 'L', 'N', 'K', 'V', 'S', 0};

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
    int32_t lru_prev, lru_next; /* ONDISK */
    item *q;                    /* QUEUED */
    item *next;                 /* QUEUED and in flight: a newer version (checkpoints), OWNED */
    uint8_t doomed;             /* removed while in flight: unlink once written */
    int32_t free_next;
} entry;

struct kv_ssd {
    kv_ssd_config cfg;
    char *dir, *qdir; /* OWNED */
    int lock_fd;
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
    int64_t writes_ok;
    int warned;
    kv_ssd_stats st;
};

/* ---------------------------------------------------------------- format */

void kv_ssd_header_write(uint8_t *b, const kv_ssd_header *h)
{
    memset(b, 0, KV_SSD_HEADER_BYTES);
    memcpy(b, MAGIC, 8);
    kiln_put_le32(b + 8, h->version);
    kiln_put_le32(b + 12, (uint32_t)h->kind);
    kiln_put_le64(b + 16, h->id.model_fp);
    kiln_put_le64(b + 24, h->id.kv_format);
    kiln_put_le64(b + 32, h->id.tok_fp);
    kiln_put_le64(b + 40, h->id.adapter_ns);
    kiln_put_le64(b + 48, h->key);
    kiln_put_le32(b + 56, h->id.block_tokens);
    kiln_put_le64(b + 64, h->payload_len);
    kiln_put_le64(b + 72, XXH3_64bits(b, 72));
}

kiln_code kv_ssd_header_parse(const uint8_t *b, size_t n, kv_ssd_header *h, kiln_err *err)
{
    memset(h, 0, sizeof *h);
    if (n < KV_SSD_HEADER_BYTES)
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: %zu bytes is shorter than a header", n);
    if (memcmp(b, MAGIC, 8) != 0) return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: bad magic");
    if (kiln_get_le64(b + 72) != XXH3_64bits(b, 72))
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: header checksum mismatch");
    h->version = kiln_get_le32(b + 8);
    if (h->version != KV_SSD_VERSION)
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: format version %u, expected %u",
                         h->version, KV_SSD_VERSION);
    uint32_t kind = kiln_get_le32(b + 12);
    if (kind > KV_SSD_CKPT) return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: kind %u", kind);
    h->kind = (kv_ssd_kind)kind;
    h->id.model_fp = kiln_get_le64(b + 16);
    h->id.kv_format = kiln_get_le64(b + 24);
    h->id.tok_fp = kiln_get_le64(b + 32);
    h->id.adapter_ns = kiln_get_le64(b + 40);
    h->key = kiln_get_le64(b + 48);
    h->id.block_tokens = kiln_get_le32(b + 56);
    h->payload_len = kiln_get_le64(b + 64);
    if (h->payload_len > KV_SSD_MAX_PAYLOAD)
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: payload of %" PRIu64 " bytes",
                         h->payload_len);
    return KILN_OK;
}

static int ident_eq(const kv_ssd_ident *a, const kv_ssd_ident *b)
{
    return a->model_fp == b->model_fp && a->kv_format == b->kv_format && a->tok_fp == b->tok_fp &&
           a->adapter_ns == b->adapter_ns && a->block_tokens == b->block_tokens;
}

/* 1 when an entry was written by this model and tokenizer under another
 * setting (KV format, adapter set, block size): valid for a server started
 * with that setting, so the scan leaves it alone instead of quarantining it
 * (switching --kv-quant back and forth must not cost the cache). */
static int ident_other_setting(const kv_ssd_ident *a, const kv_ssd_ident *b)
{
    return a->model_fp == b->model_fp && a->tok_fp == b->tok_fp && !ident_eq(a, b);
}

/* Header checks that need no payload: identity, kind, key, file length. */
static kiln_code header_check(const kv_ssd_header *h, const kv_ssd_ident *id, kv_ssd_kind kind,
                              uint64_t key, uint64_t file_len, kiln_err *err)
{
    if (!ident_eq(&h->id, id))
        return kiln_fail(err, KILN_E_CORRUPT,
                         "ssd entry: written for another model, tokenizer, adapter or KV format");
    if (h->kind != kind || h->key != key)
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: its key does not match its name");
    if (file_len != KV_SSD_HEADER_BYTES + h->payload_len + KV_SSD_TRAILER_BYTES)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "ssd entry: %" PRIu64 " bytes, header says %" PRIu64 " + framing",
                         file_len, h->payload_len);
    return KILN_OK;
}

kiln_code kv_ssd_entry_check(const uint8_t *buf, size_t n, const kv_ssd_ident *id, kv_ssd_kind kind,
                             uint64_t key, const uint8_t **payload, size_t *payload_len,
                             kiln_err *err)
{
    kv_ssd_header h;
    kiln_code rc = kv_ssd_header_parse(buf, n, &h, err);
    if (rc) return rc;
    if ((rc = header_check(&h, id, kind, key, n, err))) return rc;
    size_t body = KV_SSD_HEADER_BYTES + (size_t)h.payload_len;
    if (kiln_get_le64(buf + body) != XXH3_64bits(buf, body))
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: payload checksum mismatch");
    *payload = buf + KV_SSD_HEADER_BYTES;
    *payload_len = (size_t)h.payload_len;
    return KILN_OK;
}

/* ---------------------------------------------------------------- paths */

static void entry_name(char *out, size_t n, kv_ssd_kind kind, uint64_t key)
{
    snprintf(out, n, "%s%016" PRIx64 ".kv", kind == KV_SSD_CKPT ? "ck-" : "", key);
}

/* Parses "<16 hex>.kv" or "ck-<16 hex>.kv" (the prefix is not a hex digit, so
 * the two never mix). Returns 0 on a match. */
static int parse_name(const char *name, kv_ssd_kind *kind, uint64_t *key)
{
    const char *p = name;
    *kind = KV_SSD_BLOCK;
    if (!strncmp(p, "ck-", 3)) {
        *kind = KV_SSD_CKPT;
        p += 3;
    }
    uint64_t v = 0;
    for (int i = 0; i < 16; i++, p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint64_t)d;
    }
    if (strcmp(p, ".kv") != 0) return -1;
    *key = v;
    return 0;
}

static void path_of(const kv_ssd *s, char *out, size_t n, kv_ssd_kind kind, uint64_t key)
{
    char name[40];
    entry_name(name, sizeof name, kind, key);
    snprintf(out, n, "%s/%s", s->dir, name);
}

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
        char path[4200];
        path_of(s, path, sizeof path, (kv_ssd_kind)m->kind, m->key);
        unlink(path);
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

/* Moves a bad file to DIR/quarantine/ (or deletes it when that fails). */
static void quarantine_file(kv_ssd *s, const char *name, const char *why)
{
    char from[4200], to[4400];
    snprintf(from, sizeof from, "%s/%s", s->dir, name);
    snprintf(to, sizeof to, "%s/%s", s->qdir, name);
    if (rename(from, to) != 0) unlink(from);
    s->st.quarantined++;
    KLOG_WARN("ssd", "quarantined entry=%s reason=\"%s\"", name, why);
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

/* Drops a queued item and its index entry (under mu, not in flight). */
static void queue_drop(kv_ssd *s, item *it)
{
    queue_unlink(s, it);
    entry_free(s, it->entry);
    free(it->buf);
    free(it);
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
            queue_drop(s, it);
            s->st.dropped++;
        }
    }
    return s->st.pending_bytes + need > cap ? -1 : 0;
}

/* ---------------------------------------------------------------- writer */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Writes one entry atomically. Returns 0, or an errno. */
static int write_entry(kv_ssd *s, kv_ssd_kind kind, uint64_t key, const uint8_t *buf, size_t n)
{
    char name[40], tmp[4200], path[4200];
    entry_name(name, sizeof name, kind, key);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s", s->dir, name);
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return errno ? errno : EIO;
    int e = 0;
    if (write_all(fd, buf, n) != 0 || fsync(fd) != 0) e = errno ? errno : EIO;
    if (close(fd) != 0 && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path) != 0) e = errno ? errno : EIO;
    if (e) {
        unlink(tmp);
        return e;
    }
    if (fsync_dir(s->dir) != 0) return errno ? errno : EIO;
    return 0;
}

static void degrade(kv_ssd *s, int e)
{
    s->st.failed++;
    s->st.degraded = 1;
    if (!s->warned) {
        s->warned = 1;
        KLOG_WARN("ssd",
                  "write failed (%s): the SSD cache stops persisting; entries already "
                  "on disk are still served",
                  strerror(e));
    }
    for (item *it = s->q_head, *nx; it; it = nx) {
        nx = it->next;
        if (!it->in_flight) {
            queue_drop(s, it);
            s->st.dropped++;
        }
    }
}

static void *writer_main(void *arg)
{
    kv_ssd *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        item *it = s->paused ? NULL : s->q_head;
        while (it && (it->in_flight || (it->background && s->busy)))
            it = it->next;
        if (!it) {
            if (s->stopping) break;
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        it->in_flight = 1;
        entry *m = &s->ent[it->entry];
        kv_ssd_kind kind = (kv_ssd_kind)m->kind;
        uint64_t key = m->key;
        int fail = s->cfg.fail_after >= 0 && s->writes_ok >= s->cfg.fail_after;
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
        int e = fail ? ENOSPC : write_entry(s, kind, key, it->buf, body + KV_SSD_TRAILER_BYTES);
        pthread_mutex_lock(&s->mu);
        queue_unlink(s, it);
        if (e) {
            entry_free(s, it->entry);
            degrade(s, e);
        } else {
            s->writes_ok++;
            s->st.written++;
            entry *m2 = &s->ent[it->entry];
            if (m2->doomed) { /* kv_ssd_remove came while it was written */
                char path[4200];
                path_of(s, path, sizeof path, (kv_ssd_kind)m2->kind, m2->key);
                unlink(path);
                entry_free(s, it->entry);
            } else if (m2->next) { /* a newer version came while this one was written: queue it */
                item *nx = m2->next;
                m2->next = NULL;
                m2->q = nx;
                nx->prev = s->q_tail;
                if (s->q_tail)
                    s->q_tail->next = nx;
                else
                    s->q_head = nx;
                s->q_tail = nx;
            } else {
                ondisk_add(s, it->entry, body + KV_SSD_TRAILER_BYTES, wall_now());
                m2->q = NULL;
                evict_over_cap(s);
            }
        }
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
    kv_ssd_config c = {.queue_bytes = (uint64_t)2 << 30, .fail_after = -1};
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

/* Checks one file's header and length; KILN_OK when it may be indexed.
 * *other is set to 1 (with KILN_E_NOT_FOUND) for a sound entry of this model
 * written under another setting: it is skipped, neither indexed nor moved. */
static kiln_code scan_one(kv_ssd *s, const char *name, kv_ssd_kind kind, uint64_t key,
                          uint64_t *size, double *mtime, int *other, kiln_err *err)
{
    *other = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln_fail(err, KILN_E_IO, "cannot open: %s", strerror(errno));
    uint8_t hb[KV_SSD_HEADER_BYTES];
    struct stat sb;
    ssize_t r = pread(fd, hb, sizeof hb, 0);
    int st_ok = fstat(fd, &sb) == 0;
    close(fd);
    if (!st_ok) return kiln_fail(err, KILN_E_IO, "cannot stat");
    kv_ssd_header h;
    kiln_code rc = kv_ssd_header_parse(hb, r < 0 ? 0 : (size_t)r, &h, err);
    if (rc) return rc;
    /* framing first, against the entry's own identity: a truncated or
     * misnamed entry is corrupt whatever setting wrote it */
    if ((rc = header_check(&h, &h.id, kind, key, (uint64_t)sb.st_size, err))) return rc;
    if (ident_other_setting(&h.id, &s->cfg.id)) {
        *other = 1;
        *size = (uint64_t)sb.st_size;
        return kiln_fail(err, KILN_E_NOT_FOUND,
                         "ssd entry: another KV format, adapter or block size");
    }
    if ((rc = header_check(&h, &s->cfg.id, kind, key, (uint64_t)sb.st_size, err))) return rc;
    *size = (uint64_t)sb.st_size;
    *mtime = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
    return KILN_OK;
}

static kiln_code scan_dir(kv_ssd *s, kiln_err *err)
{
    DIR *d = opendir(s->dir);
    if (!d) return kiln_fail(err, KILN_E_IO, "--ssd-cache %s: %s", s->dir, strerror(errno));
    scan_row *rows = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    kiln_code rc = KILN_OK;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (!strncmp(nm, ".tmp-", 5)) { /* a write a crash interrupted: never renamed */
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", s->dir, nm);
            unlink(p);
            continue;
        }
        kv_ssd_kind kind;
        uint64_t key, size = 0;
        double mtime = 0;
        if (parse_name(nm, &kind, &key) != 0) continue; /* lock, quarantine/, foreign files */
        kiln_err why;
        int other;
        if (scan_one(s, nm, kind, key, &size, &mtime, &other, &why) != KILN_OK) {
            if (other) { /* this model under another setting: not ours to serve or move */
                s->st.skipped++;
                s->st.skipped_bytes += size;
            } else {
                quarantine_file(s, nm, why.msg);
            }
            continue;
        }
        if (map_find(s, kind, key) >= 0) continue;
        int32_t e = entry_new(s, kind, key);
        if (e < 0 ||
            (n == cap && !(rows = realloc(rows, (cap = cap ? cap * 2 : 1024) * sizeof *rows)))) {
            rc = kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory indexing %s", s->dir);
            break;
        }
        s->ent[e].file_bytes = size;
        rows[n++] = (scan_row){e, mtime};
    }
    closedir(d);
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
    char path[4200];
    snprintf(path, sizeof path, "%s/lock", s->dir);
    s->lock_fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (s->lock_fd < 0)
        return kiln_fail(err, KILN_E_IO, "--ssd-cache %s: %s", path, strerror(errno));
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

kiln_code kv_ssd_open(const kv_ssd_config *cfg, kv_ssd **out, kiln_err *err)
{
    *out = NULL;
    if (!cfg->dir || !cfg->dir[0])
        return kiln_fail(err, KILN_E_INVALID, "--ssd-cache needs a directory");
    kv_ssd *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory");
    s->cfg = *cfg;
    s->lock_fd = -1;
    s->lru_head = s->lru_tail = -1;
    s->free_head = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->drained, NULL);
    size_t dl = strlen(cfg->dir);
    s->dir = strdup(cfg->dir);
    s->qdir = malloc(dl + 16);
    s->map_cap = 1024;
    s->map = malloc(sizeof *s->map * (size_t)s->map_cap);
    kiln_code rc;
    if (!s->dir || !s->qdir || !s->map) {
        rc = kiln_fail(err, KILN_E_NOMEM, "ssd cache: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < s->map_cap; i++)
        s->map[i] = -1;
    while (dl > 1 && s->dir[dl - 1] == '/')
        s->dir[--dl] = 0;
    snprintf(s->qdir, dl + 16, "%s/quarantine", s->dir);
    if ((mkdir(s->dir, 0700) != 0 && errno != EEXIST) || !plat_is_dir(s->dir)) {
        rc = kiln_fail(err, KILN_E_IO, "--ssd-cache %s: not a directory we can create", s->dir);
        goto fail;
    }
    if ((rc = take_lock(s, err))) goto fail;
    if (mkdir(s->qdir, 0700) != 0 && errno != EEXIST) {
        rc = kiln_fail(err, KILN_E_IO, "--ssd-cache %s: %s", s->qdir, strerror(errno));
        goto fail;
    }
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
              " skipped=%" PRIu64 " scan_ms=%.1f cap_bytes=%" PRIu64,
              s->dir, s->st.entries, s->st.bytes, s->st.quarantined, s->st.skipped,
              s->st.scan_s * 1e3, cfg->max_bytes);
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
            if (!it->in_flight) queue_drop(s, it);
        }
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->lock_fd >= 0) close(s->lock_fd); /* releases the flock */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->drained);
    free(s->ent);
    free(s->map);
    free(s->dir);
    free(s->qdir);
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
    if (s->st.degraded) return -1;
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
    s->ent[e].doomed = 0; /* a newer version outlives a removal */
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
        if (q && !q->in_flight)
            queue_drop(s, q);
        else if (s->ent[old].state == ST_ONDISK)
            ondisk_remove(s, old, 0); /* rename overwrites */
        else { /* being written right now: the newer version waits beside it */
            r = stash_newer(s, old, data, bytes);
            goto out;
        }
        old = -1;
    }
    if (old >= 0) goto out;
    r = -1;
    if (s->st.degraded) goto out;
    if (queue_make_room(s, kind, bytes) != 0) {
        s->st.dropped++;
        goto out;
    }
    item *it = calloc(1, sizeof *it);
    uint8_t *buf = malloc(KV_SSD_HEADER_BYTES + bytes + KV_SSD_TRAILER_BYTES);
    int32_t e = it && buf ? entry_new(s, kind, key) : -1;
    if (e < 0) {
        free(it);
        free(buf);
        s->st.dropped++;
        goto out;
    }
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

/* Reads a whole file; *out is new. */
static kiln_code read_whole(const char *path, uint8_t **out, size_t *n, kiln_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln_fail(err, KILN_E_NOT_FOUND, "ssd entry gone");
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 ||
        (uint64_t)sb.st_size > KV_SSD_MAX_PAYLOAD + KV_SSD_HEADER_BYTES + KV_SSD_TRAILER_BYTES) {
        close(fd);
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: unreadable size");
    }
    size_t len = (size_t)sb.st_size, got = 0;
    uint8_t *b = malloc(len ? len : 1);
    if (!b) {
        close(fd);
        return kiln_fail(err, KILN_E_NOMEM, "ssd entry: out of memory");
    }
    while (got < len) {
        ssize_t r = pread(fd, b + got, len - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != len) {
        free(b);
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: short read");
    }
    *out = b;
    *n = len;
    return KILN_OK;
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
    char path[4200], name[40];
    path_of(s, path, sizeof path, kind, key);
    entry_name(name, sizeof name, kind, key);
    pthread_mutex_unlock(&s->mu);

    uint8_t *buf = NULL;
    size_t n = 0;
    const uint8_t *payload = NULL;
    size_t plen = 0;
    kiln_code rc = read_whole(path, &buf, &n, err);
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
        utimensat(AT_FDCWD, path, NULL, 0); /* last use survives a restart (LRU order) */
    }
    free(buf);
    pthread_mutex_lock(&s->mu);
    if (rc == KILN_E_CORRUPT || rc == KILN_E_NOT_FOUND) {
        int32_t e2 = map_find(s, kind, key);
        if (e2 >= 0 && s->ent[e2].state == ST_ONDISK) {
            ondisk_remove(s, e2, 0);
            if (rc == KILN_E_CORRUPT) quarantine_file(s, name, err ? err->msg : "corrupt");
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
        if (s->ent[e].state == ST_ONDISK) {
            ondisk_remove(s, e, 1);
        } else if (!s->ent[e].q->in_flight) {
            queue_drop(s, s->ent[e].q);
            /* a queued checkpoint may replace an older one still on disk (put drops
             * the old entry and lets the rename overwrite it): remove that file too */
            if (kind == KV_SSD_CKPT) {
                char path[4200];
                path_of(s, path, sizeof path, kind, key);
                unlink(path);
            }
        } else {
            s->ent[e].doomed = 1; /* in flight: the writer unlinks it once written */
        }
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
    while (s->st.pending > 0 && !s->st.degraded)
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
    pthread_mutex_unlock(&s->mu);
    return n;
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
