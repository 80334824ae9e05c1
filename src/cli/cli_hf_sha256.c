/*
 * cli_hf_sha256.c — file hashing for `kiln get` through OpenSSL's EVP API.
 */
#include "cli/cli_hf_sha256.h"

#include <openssl/evp.h>
#include <stdio.h>

int cli_hf_sha256_file(const char *path, char out[65])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    unsigned char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, n) == 1;
    ok = ok && !ferror(f);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    if (!ok) return -1;
    static const char hexd[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hexd[md[i] >> 4];
        out[2 * i + 1] = hexd[md[i] & 15];
    }
    out[64] = '\0';
    return 0;
}
