/*
 * cli_ssd.c — opening the SSD KV tier for `kiln serve --ssd-cache DIR`: the
 * entry identity (model fingerprint, KV format, tokenizer, adapters, block
 * size) and the environment knobs:
 *   KILN_SSD_SPILL_QUEUE_GB  write-queue cap in GiB (--ssd-queue-mib wins; default
 *                            2, or 1/16 of --memory-budget)
 *   KILN_SSD_RETRY_S         after a failed write, retry writing this many seconds later (5)
 *   KILN_SSD_MIN_FREE_MB     keep this much of the file system free (default 2%, <= 1 GiB)
 *   KILN_SSD_FAIL_AFTER      test hook: writes after the Nth fail like ENOSPC
 *   KILN_SSD_FAIL_FILE       test hook: while this file exists, writes fail like ENOSPC
 */
#include "cli/cli_ssd.h"
#include "cli/cli_progress.h"
#include "util/plat.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

/* The tokenizer's identity: a hash of tokenizer.json (0 when absent). */
static uint64_t tokenizer_fp(const char *model_dir)
{
    char path[4200], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    if (plat_read_file(path, (size_t)1 << 30, &text, &n, NULL) != KILN_OK) return 0;
    uint64_t h = XXH3_64bits(text, n);
    free(text);
    return h;
}

/* The start-up scan's progress, shown as weight reading's is (cli_progress: a
 * bar on a terminal, a line every 5 s otherwise) but only when it is worth it:
 * a folder of SCAN_SHOW_ENTRIES entries or more (about 0.2 s of scan on a
 * quiet SSD), or a scan still running after SCAN_SHOW_AFTER_S (a slow disk). */
#define SCAN_SHOW_ENTRIES 10000
#define SCAN_SHOW_AFTER_S 1.0

typedef struct {
    cli_progress p;
    char label[96];
    double t0;
    uint64_t done; /* the last count reported */
    int state;     /* 0 not shown, 1 shown, 2 ended */
} scan_view;

static void scan_progress(void *user, uint64_t done, uint64_t total)
{
    scan_view *v = user;
    v->done = done;
    if (v->state == 2) return;
    if (v->state == 0) {
        if (total < SCAN_SHOW_ENTRIES && plat_now() - v->t0 < SCAN_SHOW_AFTER_S) return;
        cli_progress_begin(&v->p, v->label, total, 0);
        v->state = 1;
    }
    if (done >= total) {
        cli_progress_end(&v->p, done);
        v->state = 2;
    } else {
        cli_progress_cb(&v->p, done, total);
    }
}

uint64_t cli_ssd_queue_bytes(double queue_mib, uint64_t budget_bytes)
{
    if (queue_mib > 0) return (uint64_t)(queue_mib * 1048576.0);
    const char *q = getenv("KILN_SSD_SPILL_QUEUE_GB");
    if (q && atof(q) > 0) return (uint64_t)(atof(q) * 1073741824.0);
    const uint64_t lo = (uint64_t)32 << 20, hi = (uint64_t)2 << 30;
    if (!budget_bytes) return hi;
    /* a burst the disk cannot keep up with waits here: on a budget, a share of it */
    uint64_t b = budget_bytes / 16;
    return b < lo ? lo : b > hi ? hi : b;
}

kiln_code cli_ssd_open(const char *dir, double max_gib, uint64_t queue_bytes,
                       const char *model_dir, const eng_runtime *rt, bool ckpt, kv_ssd **out,
                       kiln_err *err)
{
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    scan_view view = {.t0 = plat_now()};
    snprintf(view.label, sizeof view.label, "indexing --ssd-cache");
    c.scan_progress = scan_progress;
    c.scan_progress_user = &view;
    uint64_t fp = mdl_fingerprint(rt->model);
    c.id = (kv_ssd_ident){.model_fp = fp,
                          .kv_format = rt->ns ^ fp, /* ns = fingerprint ^ KV format */
                          .tok_fp = tokenizer_fp(model_dir),
                          .adapter_ns = 0,
                          .block_tokens = (uint32_t)rt->o.block_tokens};
    c.max_bytes = max_gib > 0 ? (uint64_t)(max_gib * 1073741824.0) : 0;
    if (queue_bytes) c.queue_bytes = queue_bytes;
    const char *fa = getenv("KILN_SSD_FAIL_AFTER");
    if (fa && *fa) c.fail_after = atoll(fa);
    const char *ff = getenv("KILN_SSD_FAIL_FILE");
    if (ff && *ff) c.fail_file = ff;
    const char *rs = getenv("KILN_SSD_RETRY_S");
    if (rs && atof(rs) > 0) c.retry_s = atof(rs);
    const char *mf = getenv("KILN_SSD_MIN_FREE_MB");
    if (mf && atof(mf) > 0) c.min_free_bytes = (uint64_t)(atof(mf) * 1048576.0);
    c.ckpt_reserve = ckpt;
    kiln_code rc = kv_ssd_open(&c, out, err);
    if (view.state == 1) cli_progress_end(&view.p, view.done); /* a failed scan's bar */
    return rc;
}
