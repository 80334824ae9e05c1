/*
 * kv_ssd_format.c — an SSD entry's bytes and name: the header (written,
 * parsed, checked against an identity), the whole-entry check with its
 * trailing checksum, and the file names of entries. Pure functions (the fuzz
 * target fuzz_kv_ssd_entry drives the parsers). Layout: kv_ssd.h and below.
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
 */
#include "kv/kv_ssd_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "util/kiln_le.h"

static const uint8_t MAGIC[8] = {'K', 'I', 'L', 'N', 'K', 'V', 'S', 0};

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

int kvs_ident_eq(const kv_ssd_ident *a, const kv_ssd_ident *b)
{
    return a->model_fp == b->model_fp && a->kv_format == b->kv_format && a->tok_fp == b->tok_fp &&
           a->adapter_ns == b->adapter_ns && a->block_tokens == b->block_tokens;
}

/* 1 when an entry was written by this model and tokenizer under another
 * setting (KV format, adapter set, block size): valid for a server started
 * with that setting, so the scan leaves it alone instead of quarantining it
 * (switching --kv-quant back and forth must not cost the cache). */
int kvs_ident_other_setting(const kv_ssd_ident *a, const kv_ssd_ident *b)
{
    return a->model_fp == b->model_fp && a->tok_fp == b->tok_fp && !kvs_ident_eq(a, b);
}

/* Header checks that need no payload: identity, kind, key, file length. */
kiln_code kvs_header_check(const kv_ssd_header *h, const kv_ssd_ident *id, kv_ssd_kind kind,
                           uint64_t key, uint64_t file_len, kiln_err *err)
{
    if (!kvs_ident_eq(&h->id, id))
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
    if ((rc = kvs_header_check(&h, id, kind, key, n, err))) return rc;
    size_t body = KV_SSD_HEADER_BYTES + (size_t)h.payload_len;
    if (kiln_get_le64(buf + body) != XXH3_64bits(buf, body))
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: payload checksum mismatch");
    *payload = buf + KV_SSD_HEADER_BYTES;
    *payload_len = (size_t)h.payload_len;
    return KILN_OK;
}

void kvs_entry_name(char *out, size_t n, kv_ssd_kind kind, uint64_t key)
{
    snprintf(out, n, "%s%016" PRIx64 ".kv", kind == KV_SSD_CKPT ? "ck-" : "", key);
}

/* Parses "<16 hex>.kv" or "ck-<16 hex>.kv" (the prefix is not a hex digit, so
 * the two never mix). Returns 0 on a match. */
int kvs_parse_name(const char *name, kv_ssd_kind *kind, uint64_t *key)
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

