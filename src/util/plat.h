/*
 * plat.h — the OS behind one small API (plat_linux.c, plat_darwin.c).
 * No #ifdef __linux__ anywhere else.
 *
 *   plat_map m; if (plat_map_file(path, &m, &err) == KILN_OK) { use(m.data, m.size); plat_unmap(&m); }
 */
#ifndef KILN_PLAT_H
#define KILN_PLAT_H

#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef struct {
    const uint8_t *data; /* OWNED mapping (read-only); released by plat_unmap() */
    size_t size;
} plat_map;

/* API */
/* Maps a whole file read-only. An empty file maps to data=NULL, size=0. */
kiln_code plat_map_file(const char *path, plat_map *out, kiln_err *err);
void plat_unmap(plat_map *m);
/* Reads a whole file into a new NUL-terminated buffer. The caller frees *out.
 * Files over max_bytes are refused with KILN_E_TOO_LARGE. */
kiln_code plat_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         kiln_err *err);
int plat_cpu_count(void);      /* online CPUs, >= 1 */
size_t plat_page_size(void);
double plat_now(void);         /* monotonic seconds */
/* The calling thread's CPU time in seconds (time it ran, not time it waited:
 * a compile limit that holds on a loaded machine). */
double plat_thread_cpu(void);
uint64_t plat_rss_bytes(void); /* current resident set; 0 if unknown */
uint64_t plat_peak_rss_bytes(void);
uint64_t plat_total_memory(void);
/* Gives freed heap memory back to the OS (glibc: malloc_trim(0), every arena;
 * macOS: the zones' pressure relief). For after a burst of short-lived
 * allocations is gone — e.g. the SSD tier's drained write queue — whose freed
 * chunks the allocator would otherwise keep resident. Takes the allocator's
 * locks; costs ~ms per 100 MB: call it rarely, never on a hot path. */
void plat_trim_heap(void);
int plat_is_dir(const char *path);
/* Raises the soft open-file limit towards want (never above the hard limit, never
 * lowers it). Returns the soft limit now in force; 0 when it cannot be read. */
uint64_t plat_raise_fd_limit(uint64_t want);
/* The folder of the running executable (no trailing slash) into out; -1 if unknown. */
int plat_exe_dir(char *out, size_t n);
int plat_is_file(const char *path);

#endif
