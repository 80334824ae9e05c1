/*
 * kiln_log.h — one key=value line per event on stderr, with a subsystem tag.
 *
 *   KLOG_INFO("kv", "evicted blocks=%d", n);
 *
 * The level is an atomic set at start-up (KILN_LOG=debug or kiln_log_set_level).
 */
#ifndef KILN_LOG_H
#define KILN_LOG_H

typedef enum { KLOG_ERROR, KLOG_WARN, KLOG_INFO, KLOG_DEBUG, KLOG_TRACE } klog_level;

/* API */
void kiln_log(klog_level lvl, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kiln_log_set_level(klog_level lvl);
klog_level kiln_log_level(void);
/* Reads KILN_LOG (error|warn|info|debug|trace); unknown values leave the level as is. */
void kiln_log_init_from_env(void);

#define KLOG_ERROR(sub, ...) kiln_log(KLOG_ERROR, (sub), __VA_ARGS__)
#define KLOG_WARN(sub, ...) kiln_log(KLOG_WARN, (sub), __VA_ARGS__)
#define KLOG_INFO(sub, ...) kiln_log(KLOG_INFO, (sub), __VA_ARGS__)
#define KLOG_DEBUG(sub, ...)                                                                       \
    do {                                                                                           \
        if (kiln_log_level() >= KLOG_DEBUG) kiln_log(KLOG_DEBUG, (sub), __VA_ARGS__);              \
    } while (0)
#define KLOG_TRACE(sub, ...)                                                                       \
    do {                                                                                           \
        if (kiln_log_level() >= KLOG_TRACE) kiln_log(KLOG_TRACE, (sub), __VA_ARGS__);              \
    } while (0)

#endif
