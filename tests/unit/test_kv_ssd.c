/*
 * test_kv_ssd.c — the SSD tier: round trips, restart indexing, corrupt entries
 * (flipped byte, truncation, wrong model, wrong version) quarantined, entries
 * of another KV format / adapter set / block size skipped and kept, the size
 * cap's LRU eviction, the directory lock, the bounded queue, write failures;
 * strange names (FIFO, socket, device, symlinks in and out of the folder, a directory,
 * a symlinked lock or quarantine) never block, redirect or get served; a full
 * disk pauses writing and writing resumes; checkpoint expiry on the writer
 * thread; checkpoint bytes under the size cap; a replaced checkpoint's older
 * file is neither lost before its successor is written nor left behind.
 */
#include "kv/kv_ssd.h"
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/sysmacros.h> /* makedev (macOS: sys/types.h) */
#endif
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <xxhash.h>

#define BLK 4096

static const kv_ssd_ident ID = {
    .model_fp = 0x1111, .kv_format = 0x2222, .tok_fp = 0x3333, .adapter_ns = 0, .block_tokens = 16};

static char dir_[256];

static const char *fresh_dir(const char *name)
{
    snprintf(dir_, sizeof dir_, "%s/kv_ssd_%s_%d", KILN_BINARY_DIR, name, (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
    if (system(cmd) != 0) return NULL;
    return dir_;
}

static kv_ssd *open_dir(const char *dir, kv_ssd_ident id, uint64_t max_bytes)
{
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = id;
    c.max_bytes = max_bytes;
    kv_ssd *s = NULL;
    kiln_err err;
    if (kv_ssd_open(&c, &s, &err) != KILN_OK) fprintf(stderr, "open: %s\n", err.msg);
    return s;
}

static void fill(uint8_t *b, int seed)
{
    for (int i = 0; i < BLK; i++)
        b[i] = (uint8_t)(i * 7 + seed * 13);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void path_of(char *out, size_t n, const char *dir, uint64_t key)
{
    snprintf(out, n, "%s/%016" PRIx64 ".kv", dir, key);
}

/* Writes n entries with keys 1..n and closes (drained). */
static void seed_entries(const char *dir, int n)
{
    kv_ssd *s = open_dir(dir, ID, 0);
    uint8_t b[BLK];
    for (int i = 1; i <= n; i++) {
        fill(b, i);
        kv_ssd_put(s, KV_SSD_BLOCK, (uint64_t)i, b, BLK);
    }
    kv_ssd_close(s, 10);
}

static void test_put_get_round_trip_and_restart(void)
{
    const char *dir = fresh_dir("rt");
    kiln_err err;
    kv_ssd *s = open_dir(dir, ID, 0);
    ASSERT_TRUE(s != NULL);
    uint8_t b[BLK], r[BLK];
    fill(b, 5);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 0xabc, b, BLK), 1);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 0xabc, b, BLK), 0); /* already there */
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 0xabc));
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 1);
    ASSERT_EQ_U64(st.bytes, KV_SSD_HEADER_BYTES + BLK + KV_SSD_TRAILER_BYTES);
    ASSERT_EQ_U64(st.pending, 0);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 0xabc, r, BLK, &err));
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 0xabd, r, BLK, &err), KILN_E_NOT_FOUND);
    st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.hits, 1);
    ASSERT_EQ_U64(st.misses, 1);
    kv_ssd_close(s, 1);
    /* restart: indexed from headers, served again */
    s = open_dir(dir, ID, 0);
    ASSERT_TRUE(s != NULL);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).entries, 1);
    memset(r, 0, BLK);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 0xabc, r, BLK, &err));
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    /* the wrong size for the pool is not served */
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 0xabc, r, BLK - 4, &err), KILN_E_NOT_FOUND);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).quarantined, 0); /* not corrupt: kept */
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 0xabc, r, BLK, &err));
    kv_ssd_close(s, 1);
}

static void test_queued_entry_is_served_before_it_is_written(void)
{
    const char *dir = fresh_dir("q");
    kiln_err err;
    kv_ssd *s = open_dir(dir, ID, 0);
    kv_ssd_pause_writer(s, 1);
    uint8_t b[BLK], r[BLK];
    fill(b, 9);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 42, b, BLK), 1);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).pending, 1);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 42, r, BLK, &err));
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    ASSERT_EQ_U64(kv_ssd_flush(s, 50, NULL), 1); /* paused: still pending */
    kv_ssd_pause_writer(s, 0);
    uint64_t written = 0;
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, &written), 0);
    ASSERT_EQ_U64(written, 1);
    kv_ssd_close(s, 1);
}

static void test_corrupt_entries_are_quarantined_never_served(void)
{
    const char *dir = fresh_dir("bad");
    kiln_err err;
    seed_entries(dir, 6);
    char p[512];
    /* 1: flipped payload byte (found at load: the scan reads headers only) */
    path_of(p, sizeof p, dir, 1);
    int fd = open(p, O_RDWR);
    uint8_t x;
    ASSERT_TRUE(pread(fd, &x, 1, KV_SSD_HEADER_BYTES + 100) == 1);
    x ^= 0x40;
    ASSERT_TRUE(pwrite(fd, &x, 1, KV_SSD_HEADER_BYTES + 100) == 1);
    /* 2: flipped header byte (found by the scan: header checksum) */
    close(fd);
    path_of(p, sizeof p, dir, 2);
    fd = open(p, O_RDWR);
    ASSERT_TRUE(pread(fd, &x, 1, 20) == 1);
    x ^= 1;
    ASSERT_TRUE(pwrite(fd, &x, 1, 20) == 1);
    close(fd);
    /* 3: truncated */
    path_of(p, sizeof p, dir, 3);
    ASSERT_TRUE(truncate(p, KV_SSD_HEADER_BYTES + 10) == 0);
    /* 4: wrong version (a valid header otherwise) */
    path_of(p, sizeof p, dir, 4);
    uint8_t h[KV_SSD_HEADER_BYTES];
    kv_ssd_header hd = {.version = KV_SSD_VERSION + 1,
                        .kind = KV_SSD_BLOCK,
                        .id = ID,
                        .key = 4,
                        .payload_len = BLK};
    kv_ssd_header_write(h, &hd);
    fd = open(p, O_RDWR);
    ASSERT_TRUE(pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
    close(fd);
    /* 5: a file whose name does not match its key */
    char p6[512];
    path_of(p, sizeof p, dir, 5);
    path_of(p6, sizeof p6, dir, 0x55);
    ASSERT_TRUE(rename(p, p6) == 0);
    /* 6 stays good; a stale temp file of a crashed write is removed */
    snprintf(p, sizeof p, "%s/.tmp-0000000000000009.kv", dir);
    fd = open(p, O_CREAT | O_WRONLY, 0600);
    close(fd);

    kv_ssd *s = open_dir(dir, ID, 0);
    ASSERT_TRUE(s != NULL);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.quarantined, 4); /* 2, 3, 4, 0x55 */
    ASSERT_EQ_U64(st.entries, 2);     /* 1 (payload not read yet) and 6 */
    ASSERT_TRUE(access(p, F_OK) != 0);
    uint8_t r[BLK], b[BLK];
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 1, r, BLK, &err), KILN_E_NOT_FOUND);
    ASSERT_TRUE(strstr(err.msg, "checksum") != NULL);
    for (uint64_t k = 2; k <= 5; k++)
        ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, k, r, BLK, &err), KILN_E_NOT_FOUND);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 6, r, BLK, &err));
    fill(b, 6);
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.quarantined, 5);
    ASSERT_EQ_U64(st.entries, 1);
    kv_ssd_close(s, 1);
    char q[512];
    snprintf(q, sizeof q, "%s/quarantine", dir);
    ASSERT_EQ_I64(count_files(q), 5);
}

static void test_entries_of_another_model_are_quarantined(void)
{
    const char *dir = fresh_dir("foreign");
    seed_entries(dir, 3);
    kv_ssd_ident other = ID;
    other.model_fp ^= 1;
    kv_ssd *s = open_dir(dir, other, 0);
    ASSERT_TRUE(s != NULL);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 0);
    ASSERT_EQ_U64(st.quarantined, 3);
    ASSERT_EQ_U64(st.skipped, 0);
    kv_ssd_close(s, 1);
    /* the tokenizer identity is part of the model's identity */
    seed_entries(dir, 2);
    other = ID;
    other.tok_fp ^= 1;
    s = open_dir(dir, other, 0);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).quarantined, 2);
    kv_ssd_close(s, 1);
}

/* Entries of the same model under another setting (KV format, adapter set,
 * block size) are skipped at start-up: not served, not moved, counted; a
 * server back on the first setting finds them all. Corrupt ones of another
 * setting are still quarantined. */
static void test_entries_of_another_setting_are_skipped_not_quarantined(void)
{
    const char *dir = fresh_dir("setting");
    kiln_err err;
    seed_entries(dir, 3);
    uint64_t one = KV_SSD_HEADER_BYTES + BLK + KV_SSD_TRAILER_BYTES;
    kv_ssd_ident q4 = ID;
    q4.kv_format ^= 0x40; /* --kv-quant 4 instead */
    kv_ssd *s = open_dir(dir, q4, 0);
    ASSERT_TRUE(s != NULL);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 0);
    ASSERT_EQ_U64(st.quarantined, 0);
    ASSERT_EQ_U64(st.skipped, 3);
    ASSERT_EQ_U64(st.skipped_bytes, 3 * one);
    uint8_t b[BLK], want[BLK];
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 1, b, BLK, &err), KILN_E_NOT_FOUND); /* never served */
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 2));
    fill(b, 9); /* this setting writes its own entries beside them */
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 0x99, b, BLK), 1);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_close(s, 1);
    /* adapters and block size are settings too */
    kv_ssd_ident ad = ID, bt = ID;
    ad.adapter_ns = 5;
    bt.block_tokens = 32;
    s = open_dir(dir, ad, 0);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).skipped, 4);
    kv_ssd_close(s, 1);
    s = open_dir(dir, bt, 0);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).skipped, 4);
    kv_ssd_close(s, 1);
    /* back on the first setting: all three are there and load */
    s = open_dir(dir, ID, 0);
    st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 3);
    ASSERT_EQ_U64(st.skipped, 1); /* the q4 entry */
    ASSERT_EQ_U64(st.quarantined, 0);
    for (int i = 1; i <= 3; i++) {
        fill(want, i);
        ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, (uint64_t)i, b, BLK, &err));
        ASSERT_TRUE(memcmp(b, want, BLK) == 0);
    }
    kv_ssd_close(s, 1);
    /* a truncated entry of another setting is corrupt, not "another setting" */
    char p[600];
    path_of(p, sizeof p, dir, 0x99);
    ASSERT_TRUE(truncate(p, 200) == 0);
    s = open_dir(dir, ID, 0);
    st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.skipped, 0);
    ASSERT_EQ_U64(st.quarantined, 1);
    ASSERT_EQ_U64(st.entries, 3);
    kv_ssd_close(s, 1);
}

static void test_size_cap_evicts_least_recently_used(void)
{
    const char *dir = fresh_dir("cap");
    kiln_err err;
    uint64_t one = KV_SSD_HEADER_BYTES + BLK + KV_SSD_TRAILER_BYTES;
    kv_ssd *s = open_dir(dir, ID, 3 * one);
    uint8_t b[BLK];
    for (int i = 1; i <= 3; i++) {
        fill(b, i);
        kv_ssd_put(s, KV_SSD_BLOCK, (uint64_t)i, b, BLK);
        kv_ssd_flush(s, 5000, NULL);
    }
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 1, b, BLK, &err)); /* 1 is now the most recent */
    for (int i = 4; i <= 5; i++) {
        fill(b, i);
        kv_ssd_put(s, KV_SSD_BLOCK, (uint64_t)i, b, BLK);
        kv_ssd_flush(s, 5000, NULL);
    }
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 3);
    ASSERT_EQ_U64(st.bytes, 3 * one);
    ASSERT_EQ_U64(st.evicted, 2);
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 1));
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 2));
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 3));
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 5));
    kv_ssd_close(s, 1);
    ASSERT_EQ_I64(count_files(dir), 3 + 2); /* + lock + quarantine/ */
    /* a smaller cap at the next start evicts at open */
    s = open_dir(dir, ID, one);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).entries, 1);
    kv_ssd_close(s, 1);
}

static void test_second_process_is_refused_by_the_lock(void)
{
    const char *dir = fresh_dir("lock");
    kv_ssd *a = open_dir(dir, ID, 0);
    ASSERT_TRUE(a != NULL);
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    kv_ssd *b = NULL;
    kiln_err err;
    ASSERT_CODE(kv_ssd_open(&c, &b, &err), KILN_E_BUSY);
    ASSERT_TRUE(strstr(err.msg, "in use by another kiln process") != NULL);
    ASSERT_TRUE(b == NULL);
    kv_ssd_close(a, 0);
    ASSERT_OK(kv_ssd_open(&c, &b, &err)); /* released at close */
    kv_ssd_close(b, 0);
}

static void test_full_queue_drops_oldest_not_in_flight(void)
{
    const char *dir = fresh_dir("drop");
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.queue_bytes = 3 * BLK;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    kv_ssd_pause_writer(s, 1);
    uint8_t b[BLK];
    for (int i = 1; i <= 5; i++) {
        fill(b, i);
        ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, (uint64_t)i, b, BLK), 1);
    }
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.pending, 3);
    ASSERT_EQ_U64(st.dropped, 2);
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 1));
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 3));
    uint8_t big[4 * BLK] = {0};
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 99, big, sizeof big), -1); /* over the whole queue */
    kv_ssd_pause_writer(s, 0);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).entries, 3);
    kv_ssd_close(s, 1);
}

static void test_checkpoint_reserve_keeps_blocks_to_half_the_queue(void)
{
    const char *dir = fresh_dir("reserve");
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.queue_bytes = 4 * BLK;
    c.ckpt_reserve = 1;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    kv_ssd_pause_writer(s, 1);
    uint8_t b[BLK] = {0};
    for (int i = 1; i <= 4; i++)
        kv_ssd_put(s, KV_SSD_BLOCK, (uint64_t)i, b, BLK);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).pending, 2); /* blocks: half */
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_CKPT, 7, b, BLK), 1);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_CKPT, 8, b, BLK), 1);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).pending, 4);
    kv_ssd_close(s, 5);
}

static void test_write_failure_degrades_without_crashing(void)
{
    const char *dir = fresh_dir("fail");
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.fail_after = 1;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    uint8_t b[BLK], r[BLK];
    fill(b, 1);
    kv_ssd_put(s, KV_SSD_BLOCK, 1, b, BLK);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_put(s, KV_SSD_BLOCK, 2, b, BLK);
    kv_ssd_flush(s, 5000, NULL);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_I64(st.degraded, 1);
    ASSERT_EQ_U64(st.failed, 1);
    ASSERT_EQ_U64(st.entries, 1);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 3, b, BLK), -2); /* paused: refused */
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 1, r, BLK, &err)); /* what is on disk still serves */
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    kv_ssd_close(s, 1);
}

static void test_checkpoints_replace_remove_and_expire(void)
{
    const char *dir = fresh_dir("ckpt");
    kiln_err err;
    kv_ssd *s = open_dir(dir, ID, 0);
    const char *a = "first checkpoint", *b = "second, longer checkpoint";
    kv_ssd_put(s, KV_SSD_CKPT, 77, a, strlen(a));
    kv_ssd_flush(s, 5000, NULL);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_CKPT, 77, b, strlen(b)), 1); /* replaces */
    kv_ssd_flush(s, 5000, NULL);
    kv_ssd_close(s, 1);
    s = open_dir(dir, ID, 0);
    void *got = NULL;
    size_t n = 0;
    ASSERT_OK(kv_ssd_get_alloc(s, KV_SSD_CKPT, 77, &got, &n, &err));
    ASSERT_EQ_I64(n, strlen(b));
    ASSERT_TRUE(memcmp(got, b, n) == 0);
    free(got);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).ckpt_entries, 1);
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 77)); /* kinds do not mix */
    ASSERT_EQ_I64(kv_ssd_expire(s, KV_SSD_CKPT, 3600), 0);
    ASSERT_EQ_I64(kv_ssd_expire(s, KV_SSD_CKPT, -1), 1);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).entries, 0);
    kv_ssd_put(s, KV_SSD_CKPT, 78, a, strlen(a));
    kv_ssd_flush(s, 5000, NULL);
    kv_ssd_remove(s, KV_SSD_CKPT, 78);
    ASSERT_CODE(kv_ssd_get_alloc(s, KV_SSD_CKPT, 78, &got, &n, &err), KILN_E_NOT_FOUND);
    kv_ssd_close(s, 1);
    ASSERT_EQ_I64(count_files(dir), 2); /* lock + quarantine/ */
}

/* A newer checkpoint takes the queued version's place, not the tail: a fast
 * decode that queues blocks between saves cannot starve it. The writer fails
 * after three writes: blocks 1, 2 and the checkpoint, never block 3. */
static void test_queued_checkpoint_is_replaced_in_place(void)
{
    const char *dir = fresh_dir("ckpt_place");
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.fail_after = 3;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    kv_ssd_pause_writer(s, 1);
    uint8_t b[BLK];
    fill(b, 1);
    const char *v1 = "checkpoint v1", *v2 = "checkpoint v2, longer";
    kv_ssd_put(s, KV_SSD_BLOCK, 1, b, BLK);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_CKPT, 9, v1, strlen(v1)), 1);
    kv_ssd_put(s, KV_SSD_BLOCK, 2, b, BLK);
    kv_ssd_put(s, KV_SSD_BLOCK, 3, b, BLK);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_CKPT, 9, v2, strlen(v2)), 1);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.pending, 4);
    ASSERT_EQ_U64(st.pending_bytes, 3 * BLK + strlen(v2));
    kv_ssd_pause_writer(s, 0);
    kv_ssd_flush(s, 5000, NULL);
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 1));
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 2));
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 3)); /* the write after the checkpoint failed */
    void *got = NULL;
    size_t n = 0;
    ASSERT_OK(kv_ssd_get_alloc(s, KV_SSD_CKPT, 9, &got, &n, &err));
    ASSERT_EQ_I64(n, strlen(v2));
    ASSERT_TRUE(memcmp(got, v2, n) == 0);
    free(got);
    kv_ssd_close(s, 1);
}

static void test_header_parser_rejects_garbage(void)
{
    kiln_err err;
    uint8_t h[KV_SSD_HEADER_BYTES];
    kv_ssd_header in = {.version = KV_SSD_VERSION,
                        .kind = KV_SSD_CKPT,
                        .id = ID,
                        .key = 5,
                        .payload_len = 10},
                  out;
    kv_ssd_header_write(h, &in);
    ASSERT_OK(kv_ssd_header_parse(h, sizeof h, &out, &err));
    ASSERT_EQ_U64(out.key, 5);
    ASSERT_EQ_U64(out.id.tok_fp, ID.tok_fp);
    ASSERT_EQ_I64(out.kind, KV_SSD_CKPT);
    ASSERT_CODE(kv_ssd_header_parse(h, sizeof h - 1, &out, &err), KILN_E_CORRUPT);
    h[0] ^= 1;
    ASSERT_CODE(kv_ssd_header_parse(h, sizeof h, &out, &err), KILN_E_CORRUPT);
    in.payload_len = KV_SSD_MAX_PAYLOAD + 1;
    kv_ssd_header_write(h, &in);
    ASSERT_CODE(kv_ssd_header_parse(h, sizeof h, &out, &err), KILN_E_CORRUPT);
}

/* Writes an entry file directly (no fsync): the scan test needs many, fast. */
static void write_raw(const char *dir, uint64_t key, const uint8_t *payload, size_t n)
{
    uint8_t buf[KV_SSD_HEADER_BYTES + 64 + 8];
    kv_ssd_header h = {
        .version = KV_SSD_VERSION, .kind = KV_SSD_BLOCK, .id = ID, .key = key, .payload_len = n};
    kv_ssd_header_write(buf, &h);
    memcpy(buf + KV_SSD_HEADER_BYTES, payload, n);
    uint64_t x = XXH3_64bits(buf, KV_SSD_HEADER_BYTES + n);
    for (int i = 0; i < 8; i++)
        buf[KV_SSD_HEADER_BYTES + n + (size_t)i] = (uint8_t)(x >> (8 * i));
    char p[512];
    path_of(p, sizeof p, dir, key);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(buf, 1, KV_SSD_HEADER_BYTES + n + 8, f);
        fclose(f);
    }
}

static void test_ten_thousand_entries_index_quickly(void)
{
    const char *dir = fresh_dir("many");
    kiln_err err;
    kv_ssd_close(open_dir(dir, ID, 0), 0); /* creates the directory */
    uint8_t b[64] = {0}, r[64];
    for (int i = 0; i < 10000; i++)
        write_raw(dir, (uint64_t)i + 1 + ((uint64_t)(i % 16) << 60), b,
                  sizeof b); /* every leading digit */
    kv_ssd *s = open_dir(dir, ID, 0);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 10000);
    ASSERT_EQ_U64(st.quarantined, 0);
    fprintf(stderr, "  index scan of 10000 entries: %.1f ms\n", st.scan_s * 1e3);
    ASSERT_TRUE(st.scan_s < 5.0);
    for (int i = 0; i < 10000; i++) /* every one indexed, whatever map growth did */
        if (!kv_ssd_has(s, KV_SSD_BLOCK, (uint64_t)i + 1 + ((uint64_t)(i % 16) << 60)))
            TEST_FAIL_("key %d not indexed", i);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 777 + ((uint64_t)(776 % 16) << 60), r, sizeof r, &err));
    kv_ssd_close(s, 0);
}

/* The scan's progress: the total is known from the first call, done only
 * grows, a call every KV_SSD_SCAN_PROGRESS_EVERY names, and the last says
 * done == total; names that are no entry (lock, quarantine/, README) are not
 * counted, invalid entry names (quarantined) are. */
typedef struct {
    uint64_t calls, first_done, first_total, last_done, last_total, max_done;
    int went_back;
} scan_log;

static void log_scan(void *user, uint64_t done, uint64_t total)
{
    scan_log *l = user;
    if (!l->calls++) l->first_done = done, l->first_total = total;
    if (done < l->last_done || done > total) l->went_back = 1;
    l->last_done = done;
    l->last_total = total;
}

static void test_scan_reports_progress(void)
{
    const char *dir = fresh_dir("progress");
    kv_ssd_close(open_dir(dir, ID, 0), 0);
    uint8_t b[64] = {0};
    enum { N = 3000 };
    for (int i = 0; i < N; i++) write_raw(dir, (uint64_t)i + 1, b, sizeof b);
    char p[512];
    for (int i = 0; i < 5; i++) { /* empty files named like entries: counted, quarantined */
        path_of(p, sizeof p, dir, 0xdead0000u + (uint64_t)i);
        FILE *f = fopen(p, "wb");
        if (f) fclose(f);
    }
    snprintf(p, sizeof p, "%s/README", dir);
    FILE *f = fopen(p, "wb");
    if (f) fclose(f);
    scan_log l = {0};
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.scan_progress = log_scan;
    c.scan_progress_user = &l;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, N);
    ASSERT_EQ_U64(st.quarantined, 5);
    ASSERT_EQ_U64(l.first_done, 0);
    ASSERT_EQ_U64(l.first_total, N + 5);
    ASSERT_EQ_U64(l.last_done, N + 5);
    ASSERT_EQ_U64(l.last_total, N + 5);
    ASSERT_EQ_U64(l.calls, 2 + (N + 5) / KV_SSD_SCAN_PROGRESS_EVERY);
    ASSERT_TRUE(!l.went_back);
    kv_ssd_close(s, 0);
    /* an empty folder: one call at 0 of 0, one at the end */
    dir = fresh_dir("progress_empty");
    l = (scan_log){0};
    c.dir = dir;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    ASSERT_EQ_U64(l.calls, 2);
    ASSERT_EQ_U64(l.last_total, 0);
    kv_ssd_close(s, 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Waits (up to 10 s) for cond; a condition, never a fixed sleep. */
#define WAIT_FOR(cond)                                                                             \
    do {                                                                                           \
        double t0_ = now_s();                                                                      \
        while (!(cond) && now_s() - t0_ < 10.0)                                                    \
            usleep(10000);                                                                         \
    } while (0)

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "  FAIL: kv_ssd_open blocked on a strange entry (alarm)\n";
    if (write(2, m, sizeof m - 1) < 0) _exit(3);
    _exit(3);
}

/* A FIFO, a socket, a directory and symlinks (to a valid entry outside the
 * folder, to /dev/zero, to a FIFO) named like entries: start-up neither
 * blocks nor follows, serves or moves any of them; they are counted. */
static void test_strange_names_never_block_or_get_served(void)
{
    const char *dir = fresh_dir("strange");
    kiln_err err;
    seed_entries(dir, 2); /* 1 and 2: real entries */
    char outside[512], p[512], tgt[512];
    snprintf(outside, sizeof outside, "%s_outside", dir);
    ASSERT_TRUE(mkdir(outside, 0700) == 0);
    seed_entries(outside, 3); /* a sound entry 3 outside the folder */
    /* the FIFO, and a checkpoint-named one */
    snprintf(p, sizeof p, "%s/4444444444444444.kv", dir);
    ASSERT_TRUE(mkfifo(p, 0600) == 0);
    snprintf(p, sizeof p, "%s/ck-4444444444444445.kv", dir);
    ASSERT_TRUE(mkfifo(p, 0600) == 0);
    /* a symlink out of the folder to a sound entry, one to a device, one to the FIFO */
    path_of(p, sizeof p, dir, 3);
    path_of(tgt, sizeof tgt, outside, 3);
    ASSERT_TRUE(symlink(tgt, p) == 0);
    path_of(p, sizeof p, dir, 0x77);
    ASSERT_TRUE(symlink("/dev/zero", p) == 0);
    path_of(p, sizeof p, dir, 0x78);
    ASSERT_TRUE(symlink("4444444444444444.kv", p) == 0);
    /* a directory and a unix socket */
    path_of(p, sizeof p, dir, 0x66);
    ASSERT_TRUE(mkdir(p, 0700) == 0);
    path_of(p, sizeof p, dir, 0x55);
    int sk = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", p);
    int bound = strlen(p) < sizeof sa.sun_path && bind(sk, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(sk);
    /* a character device (as root only: mknod needs it), like /dev/null */
    path_of(p, sizeof p, dir, 0x44);
    int dev = mknod(p, S_IFCHR | 0600, makedev(1, 3)) == 0;
    /* a stale temp name that is a symlink to a file outside: removed as a link */
    snprintf(p, sizeof p, "%s/.tmp-0000000000000001.kv", dir);
    ASSERT_TRUE(symlink(tgt, p) == 0);

    signal(SIGALRM, on_alarm);
    alarm(30); /* a blocking open would hang here forever */
    kv_ssd *s = open_dir(dir, ID, 0);
    alarm(0);
    ASSERT_TRUE(s != NULL);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 2);
    ASSERT_EQ_U64(st.strange, 6 + (uint64_t)bound + (uint64_t)dev);
    ASSERT_EQ_U64(st.quarantined, 0);
    uint8_t r[BLK];
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 3, r, BLK, &err), KILN_E_NOT_FOUND);
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 0x77, r, BLK, &err), KILN_E_NOT_FOUND);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 1, r, BLK, &err));
    /* the entry behind the link can still be written for real: the link is replaced */
    uint8_t b[BLK];
    fill(b, 9);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 3, b, BLK), 1);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 3, r, BLK, &err));
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    kv_ssd_close(s, 1);
    struct stat sb;
    path_of(p, sizeof p, dir, 3);
    ASSERT_TRUE(lstat(p, &sb) == 0 && S_ISREG(sb.st_mode)); /* a file of ours now */
    snprintf(p, sizeof p, "%s/4444444444444444.kv", dir);
    ASSERT_TRUE(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode)); /* left in place */
    /* the entry outside the folder is untouched (the write replaced the link) */
    kv_ssd *o = open_dir(outside, ID, 0);
    ASSERT_OK(kv_ssd_get(o, KV_SSD_BLOCK, 3, r, BLK, &err));
    fill(b, 3);
    ASSERT_TRUE(memcmp(b, r, BLK) == 0);
    kv_ssd_close(o, 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", outside);
    ASSERT_TRUE(system(cmd) == 0);
}

/* An entry swapped for a FIFO after the scan indexed it: a load does not
 * block and does not serve it; it is forgotten and counted. */
static void test_entry_swapped_for_a_fifo_after_the_scan(void)
{
    const char *dir = fresh_dir("swap");
    kiln_err err;
    seed_entries(dir, 1);
    kv_ssd *s = open_dir(dir, ID, 0);
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_BLOCK, 1));
    char p[512];
    path_of(p, sizeof p, dir, 1);
    ASSERT_TRUE(unlink(p) == 0 && mkfifo(p, 0600) == 0);
    uint8_t r[BLK];
    alarm(30);
    ASSERT_CODE(kv_ssd_get(s, KV_SSD_BLOCK, 1, r, BLK, &err), KILN_E_NOT_FOUND);
    alarm(0);
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 1));
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.strange, 1);
    ASSERT_EQ_U64(st.quarantined, 0);
    ASSERT_EQ_U64(st.entries, 0);
    kv_ssd_close(s, 0);
}

/* DIR/lock and DIR/quarantine as symlinks out of the folder: the lock is
 * refused (the target is not truncated); bad entries are deleted, never moved
 * through the link. */
static void test_symlinked_lock_and_quarantine_are_not_followed(void)
{
    const char *dir = fresh_dir("links");
    char victim[512], p[512], vdir[512];
    snprintf(victim, sizeof victim, "%s_victim", dir);
    FILE *f = fopen(victim, "w");
    ASSERT_TRUE(f != NULL);
    fputs("precious\n", f);
    fclose(f);
    ASSERT_TRUE(mkdir(dir, 0700) == 0);
    snprintf(p, sizeof p, "%s/lock", dir);
    ASSERT_TRUE(symlink(victim, p) == 0);
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_CODE(kv_ssd_open(&c, &s, &err), KILN_E_IO);
    struct stat sb;
    ASSERT_TRUE(stat(victim, &sb) == 0 && sb.st_size == 9); /* not truncated */
    ASSERT_TRUE(unlink(p) == 0);
    /* quarantine/ -> a folder elsewhere */
    snprintf(vdir, sizeof vdir, "%s_qdir", dir);
    ASSERT_TRUE(mkdir(vdir, 0700) == 0);
    snprintf(p, sizeof p, "%s/quarantine", dir);
    ASSERT_TRUE(symlink(vdir, p) == 0);
    seed_entries(dir, 1);
    path_of(p, sizeof p, dir, 1);
    ASSERT_TRUE(truncate(p, KV_SSD_HEADER_BYTES + 3) == 0); /* torn */
    s = open_dir(dir, ID, 0);
    ASSERT_TRUE(s != NULL);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).quarantined, 1);
    kv_ssd_close(s, 0);
    ASSERT_TRUE(access(p, F_OK) != 0);    /* the torn entry is gone */
    ASSERT_EQ_I64(count_files(vdir), 0); /* and did not travel through the link */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", victim, vdir);
    ASSERT_TRUE(system(cmd) == 0);
}

/* A full disk (the hook fails writes like ENOSPC while its file exists):
 * writing pauses, puts are refused for retry_s, entries on disk keep serving,
 * a failed probe pauses again, and the first write that succeeds resumes. */
static void test_full_disk_pauses_writing_then_resumes(void)
{
    const char *dir = fresh_dir("full");
    char full[600];
    snprintf(full, sizeof full, "%s_full", dir);
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.fail_file = full;
    c.retry_s = 0.2;
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    uint8_t b[BLK], r[BLK];
    fill(b, 1);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 1, b, BLK), 1);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    FILE *f = fopen(full, "w"); /* the disk is full */
    ASSERT_TRUE(f != NULL);
    fclose(f);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 2, b, BLK), 1);
    WAIT_FOR(kv_ssd_get_stats(s).failed == 1);
    ASSERT_EQ_I64(kv_ssd_get_stats(s).degraded, 1);
    ASSERT_TRUE(kv_ssd_paused_for(s) > 0);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 3, b, BLK), -2);
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 1, r, BLK, &err)); /* still served */
    WAIT_FOR(kv_ssd_paused_for(s) == 0);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 4, b, BLK), 1); /* the probe: fails again */
    WAIT_FOR(kv_ssd_get_stats(s).failed == 2);
    ASSERT_EQ_I64(kv_ssd_get_stats(s).degraded, 1);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 5, b, BLK), -2);
    ASSERT_TRUE(unlink(full) == 0); /* space is back */
    WAIT_FOR(kv_ssd_paused_for(s) == 0);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 6, b, BLK), 1);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_I64(st.degraded, 0);
    ASSERT_EQ_U64(st.resumed, 1);
    ASSERT_EQ_U64(st.failed, 2);
    ASSERT_EQ_U64(st.entries, 2); /* 1 and 6 */
    ASSERT_OK(kv_ssd_get(s, KV_SSD_BLOCK, 6, r, BLK, &err));
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 7, b, BLK), 1); /* and keeps writing */
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    ASSERT_EQ_U64(kv_ssd_get_stats(s).entries, 3);
    kv_ssd_close(s, 1);
}

/* The free-space reserve: a write that would leave less free is refused
 * before a byte is written (no entry, no temp file). */
static void test_free_space_reserve_refuses_before_writing(void)
{
    const char *dir = fresh_dir("reserve");
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    c.id = ID;
    c.min_free_bytes = (uint64_t)1 << 62; /* more than any disk has */
    kv_ssd *s = NULL;
    kiln_err err;
    ASSERT_OK(kv_ssd_open(&c, &s, &err));
    uint8_t b[BLK];
    fill(b, 1);
    ASSERT_EQ_I64(kv_ssd_put(s, KV_SSD_BLOCK, 1, b, BLK), 1);
    WAIT_FOR(kv_ssd_get_stats(s).failed == 1);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_I64(st.degraded, 1);
    ASSERT_EQ_U64(st.entries, 0);
    kv_ssd_close(s, 0);
    ASSERT_EQ_I64(count_files(dir), 2); /* lock + quarantine/: no entry, no .tmp- */
    DIR *d = opendir(dir);
    struct dirent *de;
    int tmp = 0;
    while (d && (de = readdir(d)))
        tmp += !strncmp(de->d_name, ".tmp-", 5);
    if (d) closedir(d);
    ASSERT_EQ_I64(tmp, 0);
}

/* Checkpoint expiry runs on the writer thread: kv_ssd_expire_in (a cancelled
 * request) and the max age, without a restart. */
static void test_checkpoints_expire_while_running(void)
{
    const char *dir = fresh_dir("expire");
    kv_ssd *s = open_dir(dir, ID, 0);
    const char *a = "checkpoint";
    kv_ssd_put(s, KV_SSD_CKPT, 1, a, strlen(a));
    kv_ssd_put(s, KV_SSD_CKPT, 2, a, strlen(a));
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    ASSERT_EQ_I64(kv_ssd_set_ckpt_max_age(s, 3600), 0); /* none is that old */
    kv_ssd_expire_in(s, KV_SSD_CKPT, 1, 0.2);
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_CKPT, 1));
    WAIT_FOR(!kv_ssd_has(s, KV_SSD_CKPT, 1));
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_CKPT, 1));
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_CKPT, 2));
    char p[512];
    snprintf(p, sizeof p, "%s/ck-%016x.kv", dir, 1);
    ASSERT_TRUE(access(p, F_OK) != 0);
    /* a newer version put before the expiry cancels it */
    kv_ssd_expire_in(s, KV_SSD_CKPT, 2, 0.3);
    kv_ssd_put(s, KV_SSD_CKPT, 2, "newer", 5);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    usleep(500000); /* past the cancelled expiry: checks that nothing happens */
    ASSERT_TRUE(kv_ssd_has(s, KV_SSD_CKPT, 2));
    /* the max age, swept periodically (every max_age / 2 here) */
    kv_ssd_set_ckpt_max_age(s, 0.4);
    WAIT_FOR(!kv_ssd_has(s, KV_SSD_CKPT, 2));
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_CKPT, 2));
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.expired, 2);
    ASSERT_EQ_U64(st.entries, 0);
    kv_ssd_close(s, 0);
}

/* Checkpoint bytes are counted toward the size cap like blocks. */
static void test_checkpoint_bytes_count_toward_the_cap(void)
{
    const char *dir = fresh_dir("ckcap");
    uint64_t one = KV_SSD_HEADER_BYTES + BLK + KV_SSD_TRAILER_BYTES;
    kv_ssd *s = open_dir(dir, ID, 3 * one);
    uint8_t b[BLK];
    fill(b, 1);
    kv_ssd_put(s, KV_SSD_BLOCK, 1, b, BLK);
    kv_ssd_put(s, KV_SSD_BLOCK, 2, b, BLK);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_put(s, KV_SSD_CKPT, 3, b, BLK);
    kv_ssd_put(s, KV_SSD_CKPT, 4, b, BLK);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.bytes, 3 * one);
    ASSERT_EQ_U64(st.evicted, 1);
    ASSERT_EQ_U64(st.ckpt_entries, 2);
    ASSERT_TRUE(!kv_ssd_has(s, KV_SSD_BLOCK, 1)); /* the least recently used went */
    kv_ssd_close(s, 0);
}

/* A checkpoint replaced by a newer version still queued: the older file stays
 * until the rename replaces it (a crash keeps it), comes back when the newer
 * one is dropped, and goes when the request's checkpoint is removed. */
static void test_replaced_checkpoint_file_is_kept_or_removed_correctly(void)
{
    const char *dir = fresh_dir("shadow");
    kiln_err err;
    char p[512];
    snprintf(p, sizeof p, "%s/ck-%016x.kv", dir, 9);
    kv_ssd *s = open_dir(dir, ID, 0);
    kv_ssd_put(s, KV_SSD_CKPT, 9, "v1", 2);
    ASSERT_EQ_U64(kv_ssd_flush(s, 5000, NULL), 0);
    kv_ssd_pause_writer(s, 1);
    kv_ssd_put(s, KV_SSD_CKPT, 9, "v2", 2);
    kv_ssd_close(s, 0); /* "crash" before v2 is written: v2 dropped */
    s = open_dir(dir, ID, 0);
    void *got = NULL;
    size_t n = 0;
    ASSERT_OK(kv_ssd_get_alloc(s, KV_SSD_CKPT, 9, &got, &n, &err));
    ASSERT_TRUE(n == 2 && memcmp(got, "v1", 2) == 0);
    free(got);
    /* removed while the newer version waits in the queue: the file goes */
    kv_ssd_pause_writer(s, 1);
    kv_ssd_put(s, KV_SSD_CKPT, 9, "v3", 2);
    kv_ssd_remove(s, KV_SSD_CKPT, 9);
    ASSERT_TRUE(access(p, F_OK) != 0);
    kv_ssd_stats st = kv_ssd_get_stats(s);
    ASSERT_EQ_U64(st.entries, 0);
    ASSERT_EQ_U64(st.bytes, 0);
    ASSERT_EQ_U64(st.pending, 0);
    kv_ssd_close(s, 0);
}

int main(void)
{
    RUN(test_put_get_round_trip_and_restart);
    RUN(test_queued_entry_is_served_before_it_is_written);
    RUN(test_corrupt_entries_are_quarantined_never_served);
    RUN(test_entries_of_another_model_are_quarantined);
    RUN(test_entries_of_another_setting_are_skipped_not_quarantined);
    RUN(test_size_cap_evicts_least_recently_used);
    RUN(test_second_process_is_refused_by_the_lock);
    RUN(test_full_queue_drops_oldest_not_in_flight);
    RUN(test_checkpoint_reserve_keeps_blocks_to_half_the_queue);
    RUN(test_write_failure_degrades_without_crashing);
    RUN(test_checkpoints_replace_remove_and_expire);
    RUN(test_queued_checkpoint_is_replaced_in_place);
    RUN(test_header_parser_rejects_garbage);
    RUN(test_ten_thousand_entries_index_quickly);
    RUN(test_scan_reports_progress);
    RUN(test_strange_names_never_block_or_get_served);
    RUN(test_entry_swapped_for_a_fifo_after_the_scan);
    RUN(test_symlinked_lock_and_quarantine_are_not_followed);
    RUN(test_full_disk_pauses_writing_then_resumes);
    RUN(test_free_space_reserve_refuses_before_writing);
    RUN(test_checkpoints_expire_while_running);
    RUN(test_checkpoint_bytes_count_toward_the_cap);
    RUN(test_replaced_checkpoint_file_is_kept_or_removed_correctly);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/kv_ssd_*_%d", KILN_BINARY_DIR, (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "could not remove the test directories\n");
    return TEST_DONE();
}
