/*
 * cli_hf_sha256.h — SHA-256 (FIPS 180-4) for verifying downloaded files.
 *
 *   cli_hf_sha256 h; cli_hf_sha256_init(&h); cli_hf_sha256_update(&h, p, n);
 *   char hex[65]; cli_hf_sha256_hex(&h, hex);
 */
#ifndef KILN_CLI_HF_SHA256_H
#define KILN_CLI_HF_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t buf[64];
    size_t n_buf;
} cli_hf_sha256;

/* API */
void cli_hf_sha256_init(cli_hf_sha256 *s);
void cli_hf_sha256_update(cli_hf_sha256 *s, const void *data, size_t n);
void cli_hf_sha256_hex(cli_hf_sha256 *s, char out[65]); /* finishes s */
/* Hashes a whole file; returns 0, or -1 when it cannot be read. */
int cli_hf_sha256_file(const char *path, char out[65]);

#endif
