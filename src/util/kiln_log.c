/*
 * kiln_log.c — stderr logger and kiln_panic().
 * Threads: any; each line is written with one fprintf (stdio locks the stream).
 */
#include "util/kiln_log.h"
#include "util/kiln_assert.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic int log_level = KLOG_WARN;

void kiln_log_set_level(klog_level lvl)
{
    atomic_store(&log_level, (int)lvl);
}

klog_level kiln_log_level(void)
{
    return (klog_level)atomic_load(&log_level);
}

void kiln_log_init_from_env(void)
{
    const char *v = getenv("KILN_LOG");
    if (!v) return;
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < 5; i++)
        if (strcmp(v, names[i]) == 0) kiln_log_set_level((klog_level)i);
}

void kiln_log(klog_level lvl, const char *sub, const char *fmt, ...)
{
    if ((int)lvl > atomic_load(&log_level)) return;
    static const char *const tags[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03d %-5s %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            (int)(ts.tv_nsec / 1000000), tags[lvl], sub, line);
}

_Noreturn void kiln_panic(const char *file, int line, const char *what)
{
    fprintf(stderr, "kiln: internal error (bug) at %s:%d: %s\n", file, line, what);
    fflush(stderr);
    abort();
}
