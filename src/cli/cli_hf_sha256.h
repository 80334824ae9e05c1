/*
 * cli_hf_sha256.h — SHA-256 of a downloaded file (OpenSSL's libcrypto).
 *
 *   char hex[65]; if (cli_hf_sha256_file(path, hex) == 0) puts(hex);
 */
#ifndef KILN_CLI_HF_SHA256_H
#define KILN_CLI_HF_SHA256_H

/* API */
/* Hashes a whole file into 64 lowercase hex digits; returns 0, or -1 when it
 * cannot be read. */
int cli_hf_sha256_file(const char *path, char out[65]);

#endif
