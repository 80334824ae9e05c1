/*
 * cli_ssd.h — opening `--ssd-cache DIR` for a loaded runtime (cli_ssd.c).
 */
#ifndef KILN_CLI_SSD_H
#define KILN_CLI_SSD_H

#include <stdbool.h>

#include "engine/eng_runtime.h"
#include "kv/kv_ssd.h"

/* API */
/* Opens DIR for rt's model (identity: fingerprint, KV format, tokenizer.json,
 * block size). ckpt: generation checkpoints on (half the write queue reserved
 * for them). *out is new: kv_ssd_close. */
kiln_code cli_ssd_open(const char *dir, double max_gib, const char *model_dir,
                       const eng_runtime *rt, bool ckpt, kv_ssd **out, kiln_err *err);

#endif
