/*
 * kv_ssd_int.h — shared by kv_ssd*.c only: entry names and header checks
 * (kv_ssd_format.c) and the file system side of the tier (kv_ssd_file.c).
 * Nothing outside src/kv/ includes it.
 */
#ifndef KILN_KV_SSD_INT_H
#define KILN_KV_SSD_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kv/kv_ssd.h"

/* ---------------------------------------------------------------- kv_ssd_format.c */

#define KV_SSD_NAME_MAX 40 /* "ck-" + 16 hex + ".kv" + NUL, rounded up */

/* API */
void kvs_entry_name(char *out, size_t n, kv_ssd_kind kind, uint64_t key);
/* Parses "<16 hex>.kv" or "ck-<16 hex>.kv". Returns 0 on a match. */
int kvs_parse_name(const char *name, kv_ssd_kind *kind, uint64_t *key);
int kvs_ident_eq(const kv_ssd_ident *a, const kv_ssd_ident *b);
/* 1: the same model and tokenizer under another setting (KV format, adapters, block size). */
int kvs_ident_other_setting(const kv_ssd_ident *a, const kv_ssd_ident *b);
/* Identity, kind, key and file length against a parsed header. */
kiln_code kvs_header_check(const kv_ssd_header *h, const kv_ssd_ident *id, kv_ssd_kind kind,
                           uint64_t key, uint64_t file_len, kiln_err *err);

/* ---------------------------------------------------------------- kv_ssd_file.c */

/* What a name in the directory turned out to be. */
typedef enum {
    KVF_REGULAR = 0, /* a regular file owned by this user: may be read */
    KVF_MISSING,     /* gone (raced with a removal) */
    KVF_STRANGE,     /* a FIFO, socket, device, symlink, directory, or another user's file */
    KVF_ERROR,       /* the OS refused to tell (EACCES, EIO) */
} kvf_kind;

/* The largest entry file the tier ever opens (bytes). */
#define KVF_MAX_FILE (KV_SSD_MAX_PAYLOAD + KV_SSD_HEADER_BYTES + KV_SSD_TRAILER_BYTES)

/* API */
/* Looks at dfd/name without opening it and without following a symlink. */
kvf_kind kvf_classify(int dfd, const char *name, struct stat *sb);
/* Opens dfd/name for reading: never follows a symlink, never blocks (a FIFO
 * opens non-blocking and is then refused), and refuses anything but a
 * regular file of this user. Returns an fd (O_CLOEXEC; O_NONBLOCK, which
 * changes nothing for a regular file), or -1 with *kind saying why. *sb is
 * the open file's fstat. */
int kvf_open_read(int dfd, const char *name, struct stat *sb, kvf_kind *kind);
/* Reads a whole entry file. *out is new (free()). KILN_E_NOT_FOUND: missing;
 * KILN_E_UNSUPPORTED: not a regular file of ours (err says which); KILN_E_CORRUPT:
 * a size over KVF_MAX_FILE or a short read; KILN_E_NOMEM. */
kiln_code kvf_read_entry(int dfd, const char *name, uint8_t **out, size_t *n, kiln_err *err);
/* Writes dfd/name atomically: .tmp-name (O_EXCL, no symlink followed), fsync,
 * rename, directory fsync. Refuses with ENOSPC, writing nothing, when the file
 * system would keep fewer than min_free bytes free afterwards. Returns 0 or an errno. */
int kvf_write_atomic(int dfd, const char *name, const uint8_t *buf, size_t n, uint64_t min_free);
/* Moves dfd/name into the directory qdfd (renameat: a symlink moves as
 * itself), or deletes it when qdfd < 0 or the move fails. Returns 1 when moved. */
int kvf_quarantine(int dfd, int qdfd, const char *name);
/* Marks a use: mtime = now, not following a symlink. */
void kvf_touch(int dfd, const char *name);
/* The file system's size (bytes) under dfd; 0 when unknown. */
uint64_t kvf_fs_size(int dfd);

#endif
