/*
 * kv_ssd_file.c — the SSD tier's file system side: every open, read, write,
 * rename and touch of an entry goes through here, relative to the cache
 * directory's fd (kv_ssd_int.h).
 *
 * Rules, so a strange directory entry can never hang, redirect or hurt kiln:
 *   (1) nothing is opened without O_NOFOLLOW: a symlink named like an entry
 *       is never followed, in or out of the folder;
 *   (2) reads open O_NONBLOCK: a FIFO named like an entry opens at once
 *       (instead of waiting for a writer forever) and is then refused;
 *   (3) what was opened is fstat'ed: only a regular file owned by this user,
 *       of at most KVF_MAX_FILE bytes, is read; kvf_classify lets the scan
 *       skip FIFOs, devices, sockets and directories without opening them at all;
 *   (4) writes create .tmp-NAME with O_CREAT|O_EXCL (never through an
 *       existing file or symlink), then rename it over NAME;
 *   (5) a write that would leave fewer than min_free bytes on the file system
 *       is refused as ENOSPC before a byte is written: the cache never fills
 *       the disk to the last block for everyone else.
 * Threads: any; no state.
 */
#include "kv/kv_ssd_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static kvf_kind kind_of(const struct stat *sb)
{
    if (!S_ISREG(sb->st_mode) || sb->st_uid != geteuid()) return KVF_STRANGE;
    return KVF_REGULAR;
}

kvf_kind kvf_classify(int dfd, const char *name, struct stat *sb)
{
    if (fstatat(dfd, name, sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? KVF_MISSING : KVF_ERROR;
    return kind_of(sb);
}

int kvf_open_read(int dfd, const char *name, struct stat *sb, kvf_kind *kind)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        /* ELOOP: a symlink (rule 1); ENXIO: a socket or a FIFO with no writer */
        *kind = errno == ENOENT ? KVF_MISSING
                : errno == ELOOP || errno == ENXIO || errno == EISDIR ? KVF_STRANGE
                                                                      : KVF_ERROR;
        return -1;
    }
    if (fstat(fd, sb) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        *kind = KVF_ERROR;
        return -1;
    }
    if ((*kind = kind_of(sb)) != KVF_REGULAR) {
        close(fd);
        return -1;
    }
    *kind = KVF_REGULAR; /* O_NONBLOCK means nothing to a regular file's reads: left on */
    return fd;
}

kiln_code kvf_read_entry(int dfd, const char *name, uint8_t **out, size_t *n, kiln_err *err)
{
    *out = NULL;
    *n = 0;
    struct stat sb;
    kvf_kind k;
    int fd = kvf_open_read(dfd, name, &sb, &k);
    if (fd < 0) {
        int e = errno;
        if (k == KVF_MISSING) return kiln_fail(err, KILN_E_NOT_FOUND, "ssd entry gone");
        if (k == KVF_STRANGE)
            return kiln_fail(err, KILN_E_UNSUPPORTED, "ssd entry %s is not a regular file of ours",
                             name);
        return kiln_fail(err, KILN_E_IO, "ssd entry %s: %s", name, strerror(e));
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > KVF_MAX_FILE) {
        close(fd);
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: %lld bytes", (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size, got = 0;
    uint8_t *b = malloc(len ? len : 1);
    if (!b) {
        close(fd);
        return kiln_fail(err, KILN_E_NOMEM, "ssd entry: out of memory for %zu bytes", len);
    }
    while (got < len) {
        ssize_t r = pread(fd, b + got, len - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != len) {
        free(b);
        return kiln_fail(err, KILN_E_CORRUPT, "ssd entry: short read (%zu of %zu bytes)", got, len);
    }
    *out = b;
    *n = len;
    return KILN_OK;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { /* no progress: treat as a full device */
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 1 when n more bytes would leave at least min_free free (or it cannot be told). */
static int room_for(int dfd, size_t n, uint64_t min_free)
{
    if (!min_free) return 1;
    struct statvfs v;
    if (fstatvfs(dfd, &v) != 0) return 1;
    uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    return avail >= (uint64_t)n + min_free;
}

int kvf_write_atomic(int dfd, const char *name, const uint8_t *buf, size_t n, uint64_t min_free)
{
    if (!room_for(dfd, n, min_free)) return ENOSPC;
    char tmp[KV_SSD_NAME_MAX + 8];
    snprintf(tmp, sizeof tmp, ".tmp-%s", name);
    (void)unlinkat(dfd, tmp, 0); /* a leftover of a failed write (rule 4 needs it gone) */
    int fd = openat(dfd, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return errno ? errno : EIO;
    int e = 0;
    if (write_all(fd, buf, n) != 0 || fsync(fd) != 0) e = errno ? errno : EIO;
    if (close(fd) != 0 && !e) e = errno ? errno : EIO;
    if (!e && renameat(dfd, tmp, dfd, name) != 0) e = errno ? errno : EIO;
    if (e) {
        (void)unlinkat(dfd, tmp, 0);
        return e;
    }
    if (fsync(dfd) != 0) return errno ? errno : EIO; /* the rename itself is durable */
    return 0;
}

int kvf_quarantine(int dfd, int qdfd, const char *name)
{
    if (qdfd >= 0 && renameat(dfd, name, qdfd, name) == 0) return 1;
    (void)unlinkat(dfd, name, 0);
    return 0;
}

void kvf_touch(int dfd, const char *name)
{
    (void)utimensat(dfd, name, NULL, AT_SYMLINK_NOFOLLOW);
}

uint64_t kvf_fs_size(int dfd)
{
    struct statvfs v;
    if (fstatvfs(dfd, &v) != 0) return 0;
    return (uint64_t)v.f_blocks * (uint64_t)v.f_frsize;
}
