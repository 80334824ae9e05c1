/*
 * cli_ssd.h — opening `--ssd-cache DIR` for a loaded runtime (cli_ssd.c).
 */
#ifndef KILN_CLI_SSD_H
#define KILN_CLI_SSD_H

#include <stdbool.h>

#include "engine/eng_runtime.h"
#include "kv/kv_ssd.h"

/* API */
/* The write queue's cap in bytes (memory the tier's copies may hold, counted
 * in --memory-budget): queue_mib when > 0, else KILN_SSD_SPILL_QUEUE_GB, else
 * 1/16 of a memory budget (budget_bytes > 0) within [32 MiB, 2 GiB], else 2 GiB. */
uint64_t cli_ssd_queue_bytes(double queue_mib, uint64_t budget_bytes);
/* Opens DIR for rt's model (identity: fingerprint, KV format, tokenizer.json,
 * block size). ckpt: generation checkpoints on (half the write queue reserved
 * for them). queue_bytes: cli_ssd_queue_bytes. *out is new: kv_ssd_close. */
kiln_code cli_ssd_open(const char *dir, double max_gib, uint64_t queue_bytes,
                       const char *model_dir, const eng_runtime *rt, bool ckpt, kv_ssd **out,
                       kiln_err *err);

#endif
