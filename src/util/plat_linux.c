/*
 * plat_linux.c — memory figures on Linux, from /proc/self/status.
 */
#if defined(__linux__)
#include "util/plat.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0) {
            v = strtoull(line + kl, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v * 1024;
}

uint64_t plat_rss_bytes(void)
{
    return status_kb("VmRSS:");
}

uint64_t plat_peak_rss_bytes(void)
{
    uint64_t v = status_kb("VmHWM:");
    if (v) return v;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) return (uint64_t)ru.ru_maxrss * 1024;
    return 0;
}

void plat_trim_heap(void)
{
    malloc_trim(0);
}

uint64_t plat_total_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    return pages > 0 ? (uint64_t)pages * plat_page_size() : 0;
}

int plat_exe_dir(char *out, size_t n)
{
    char buf[4096];
    ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (k <= 0) return -1;
    buf[k] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return -1;
    *slash = 0;
    if ((size_t)snprintf(out, n, "%s", buf[0] ? buf : "/") >= n) return -1;
    return 0;
}

#else
typedef int plat_linux_unused; /* ISO C forbids an empty translation unit */
#endif
