/*
 * plat_posix.c — the parts of plat.h that POSIX covers on Linux and macOS alike:
 * mapping and reading files, CPU count, page size, the monotonic clock.
 * Memory figures differ per OS: plat_linux.c, plat_darwin.c.
 */
#include "util/plat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

kiln_code plat_map_file(const char *path, plat_map *out, kiln_err *err)
{
    out->data = NULL;
    out->size = 0;
    /* O_NONBLOCK: a FIFO in the path's place opens at once and is refused below
     * instead of blocking start-up until some writer appears */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return kiln_fail(err, errno == ENOENT ? KILN_E_NOT_FOUND : KILN_E_IO,
                                 "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kiln_fail(err, KILN_E_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kiln_fail(err, KILN_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return KILN_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return kiln_fail(err, KILN_E_IO, "%s: mmap: %s", path, strerror(e));
    out->data = p;
    out->size = (size_t)st.st_size;
    return KILN_OK;
}

void plat_unmap(plat_map *m)
{
    if (m && m->data) munmap((void *)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

kiln_code plat_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         kiln_err *err)
{
    *out = NULL;
    if (len) *len = 0;
    /* non-blocking open + fstat first: a FIFO named like the file never blocks */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return kiln_fail(err, errno == ENOENT ? KILN_E_NOT_FOUND : KILN_E_IO, "%s: %s",
                                 path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kiln_fail(err, KILN_E_IO, "%s: not a readable regular file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return kiln_fail(err, KILN_E_NOMEM, "%s: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return kiln_fail(err, KILN_E_TOO_LARGE, "%s: %lld bytes is over the %zu-byte limit", path,
                         (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return kiln_fail(err, KILN_E_NOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    size_t got = n ? fread(buf, 1, n, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (got != n || bad) {
        free(buf);
        return kiln_fail(err, KILN_E_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return KILN_OK;
}

int plat_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

size_t plat_page_size(void)
{
    long n = sysconf(_SC_PAGESIZE);
    return n < 1 ? 4096 : (size_t)n;
}

double plat_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double plat_thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return plat_now();
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int plat_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int plat_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

uint64_t plat_raise_fd_limit(uint64_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? (rlim_t)want : rl.rlim_max;
        struct rlimit nl = {.rlim_cur = to, .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl.rlim_cur = to;
    }
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}
