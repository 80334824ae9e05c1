/*
 * cli_ssd.c — opening the SSD KV tier for `kiln serve --ssd-cache DIR`: the
 * entry identity (model fingerprint, KV format, tokenizer, adapters, block
 * size) and the environment knobs:
 *   KILN_SSD_SPILL_QUEUE_GB  write-queue cap in GiB (default 2)
 *   KILN_SSD_RETRY_S         after a failed write, retry writing this many seconds later (5)
 *   KILN_SSD_MIN_FREE_MB     keep this much of the file system free (default 2%, <= 1 GiB)
 *   KILN_SSD_FAIL_AFTER      test hook: writes after the Nth fail like ENOSPC
 *   KILN_SSD_FAIL_FILE       test hook: while this file exists, writes fail like ENOSPC
 */
#include "cli/cli_ssd.h"
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

kiln_code cli_ssd_open(const char *dir, double max_gib, const char *model_dir,
                       const eng_runtime *rt, bool ckpt, kv_ssd **out, kiln_err *err)
{
    kv_ssd_config c = kv_ssd_config_default();
    c.dir = dir;
    uint64_t fp = mdl_fingerprint(rt->model);
    c.id = (kv_ssd_ident){.model_fp = fp,
                          .kv_format = rt->ns ^ fp, /* ns = fingerprint ^ KV format */
                          .tok_fp = tokenizer_fp(model_dir),
                          .adapter_ns = 0,
                          .block_tokens = (uint32_t)rt->o.block_tokens};
    c.max_bytes = max_gib > 0 ? (uint64_t)(max_gib * 1073741824.0) : 0;
    const char *q = getenv("KILN_SSD_SPILL_QUEUE_GB");
    if (q && atof(q) > 0) c.queue_bytes = (uint64_t)(atof(q) * 1073741824.0);
    const char *fa = getenv("KILN_SSD_FAIL_AFTER");
    if (fa && *fa) c.fail_after = atoll(fa);
    const char *ff = getenv("KILN_SSD_FAIL_FILE");
    if (ff && *ff) c.fail_file = ff;
    const char *rs = getenv("KILN_SSD_RETRY_S");
    if (rs && atof(rs) > 0) c.retry_s = atof(rs);
    const char *mf = getenv("KILN_SSD_MIN_FREE_MB");
    if (mf && atof(mf) > 0) c.min_free_bytes = (uint64_t)(atof(mf) * 1048576.0);
    c.ckpt_reserve = ckpt;
    return kv_ssd_open(&c, out, err);
}
