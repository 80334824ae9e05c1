/*
 * plat_darwin.c — memory figures on macOS, from Mach task_info and sysctl.
 */
#if defined(__APPLE__)
#include "util/plat.h"

#include <limits.h>
#include <mach-o/dyld.h>
#include <mach/mach.h>
#include <malloc/malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sysctl.h>

uint64_t plat_rss_bytes(void)
{
    struct mach_task_basic_info info;
    mach_msg_type_number_t n = MACH_TASK_BASIC_INFO_COUNT;
    if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO, (task_info_t)&info, &n) != KERN_SUCCESS)
        return 0;
    return (uint64_t)info.resident_size;
}

void plat_trim_heap(void)
{
    malloc_zone_pressure_relief(NULL, 0);
}

uint64_t plat_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) return (uint64_t)ru.ru_maxrss; /* bytes on macOS */
    return 0;
}

uint64_t plat_total_memory(void)
{
    uint64_t v = 0;
    size_t len = sizeof v;
    return sysctlbyname("hw.memsize", &v, &len, NULL, 0) == 0 ? v : 0;
}

int plat_exe_dir(char *out, size_t n)
{
    char raw[4096], real[PATH_MAX];
    uint32_t len = sizeof raw;
    if (_NSGetExecutablePath(raw, &len) != 0 || !realpath(raw, real)) return -1;
    char *slash = strrchr(real, '/');
    if (!slash) return -1;
    *slash = 0;
    if ((size_t)snprintf(out, n, "%s", real[0] ? real : "/") >= n) return -1;
    return 0;
}

#else
typedef int plat_darwin_unused; /* ISO C forbids an empty translation unit */
#endif
