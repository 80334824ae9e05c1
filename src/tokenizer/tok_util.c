/*
 * tok_util.c — the tokenizer's small data structures: growable buffers, piece
 * lists, UTF-8 validation and lossy repair, GPT-2's bytes_to_unicode table, and
 * the two hash tables (token string -> id, id pair -> merge).
 *
 * Invariants:
 *   (1) a tok_buf with cap > 0 is NUL-terminated at p[len] (so pieces print).
 *   (2) tok_strmap keys are copied; callers may free theirs after put.
 *   (3) tok_mergemap keys are never UINT64_MAX (ids are < 2^31).
 * Threads: none of these lock; a table is read-only once its tokenizer is built.
 * Errors: functions return -1 on allocation failure, never abort.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

/* ================================================================ buffers */

int tok_buf_reserve(tok_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t need = b->len + extra + 1;
    if (need < b->len) return -1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_put(tok_buf *b, const void *s, size_t n)
{
    if (tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int tok_buf_putc(tok_buf *b, char c)
{
    return tok_buf_put(b, &c, 1);
}

void tok_buf_free(tok_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int tok_pieces_add(tok_pieces *p, const char *s, size_t len, bool at_start)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        tok_span *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v;
        p->cap = cap;
    }
    size_t off = p->text.len;
    if (tok_buf_put(&p->text, s, len)) return -1;
    p->v[p->n++] = (tok_span){off, len, at_start, false};
    return 0;
}

void tok_pieces_clear(tok_pieces *p)
{
    p->n = 0;
    p->text.len = 0;
}

void tok_pieces_free(tok_pieces *p)
{
    tok_buf_free(&p->text);
    free(p->v);
    memset(p, 0, sizeof *p);
}

const char *tok_memmem(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    const char *end = h + (hn - nn) + 1;
    for (const char *p = h; p < end;) {
        p = memchr(p, n[0], (size_t)(end - p));
        if (!p) return NULL;
        if (!memcmp(p, n, nn)) return p;
        p++;
    }
    return NULL;
}

/* ================================================================ UTF-8 */

int tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        unsigned d = s[i];
        if (d < lo || d > hi) return 0;
        lo = 0x80;
        hi = 0xBF;
        v = v << 6 | (d & 0x3F);
    }
    *cp = v;
    return len;
}

size_t tok_utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    while (i < len && i < n && s[i] >= lo && s[i] <= hi) {
        lo = 0x80;
        hi = 0xBF;
        i++;
    }
    return i;
}

bool tok_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = tok_utf8_next(u + i, n - i, &cp);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

int tok_utf8_lossy(tok_buf *out, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        uint32_t cp;
        int l = u[i] < 0x80 ? 1 : tok_utf8_next(u + i, n - i, &cp);
        if (l) {
            i += (size_t)l;
            continue;
        }
        if (tok_buf_put(out, s + run, i - run)) return -1;
        if (tok_buf_put(out, "\xEF\xBF\xBD", 3)) return -1;
        i += tok_utf8_bad_len(u + i, n - i);
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}

int tok_utf8_put(tok_buf *b, uint32_t cp)
{
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | cp >> 6);
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | cp >> 12);
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | cp >> 18);
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return tok_buf_put(b, t, n);
}

bool tok_is_whitespace(uint32_t cp)
{
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other
 * 68 bytes to U+0100.. in byte order. */
static const uint16_t BL_CP[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255};

int tok_bytelevel_char(unsigned b, char out[2])
{
    uint32_t cp = BL_CP[b & 0xFF];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_bytelevel_byte(uint32_t cp)
{
    if (cp < 256) return BL_CP[cp] == cp ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    /* U+0100 + k is the k-th byte that does not map to itself */
    static const uint8_t INV[68] = {
        0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,
        17,  18,  19,  20,  21,  22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  32,  127,
        128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144,
        145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 173};
    return INV[cp - 256];
}

/* ================================================================ hashing */

uint64_t tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, s, 8);
        h = (h ^ k) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t k = 0;
    memcpy(&k, s, n);
    h = (h ^ k) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return h;
}

/* ================================================================ string map */

#define SLOT_EMPTY UINT32_MAX

int tok_strmap_init(tok_strmap *m, size_t expect)
{
    memset(m, 0, sizeof *m);
    size_t slots = 16;
    while (slots < expect * 2) slots *= 2;
    m->slots = malloc(slots * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < slots; i++) m->slots[i].len = SLOT_EMPTY;
    m->mask = slots - 1;
    return 0;
}

static int strmap_grow(tok_strmap *m)
{
    size_t slots = (m->mask + 1) * 2;
    struct tok_strslot *s = malloc(slots * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < slots; i++) s[i].len = SLOT_EMPTY;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->slots[i].len == SLOT_EMPTY) continue;
        size_t j = (size_t)tok_hash(m->keys.p + m->slots[i].off, m->slots[i].len) & (slots - 1);
        while (s[j].len != SLOT_EMPTY) j = (j + 1) & (slots - 1);
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->mask = slots - 1;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *k, size_t n, int32_t val)
{
    if (n >= UINT32_MAX || m->keys.len + n >= UINT32_MAX) return -1;
    uint64_t h = tok_hash(k, n);
    size_t i = (size_t)h & m->mask;
    while (m->slots[i].len != SLOT_EMPTY) {
        struct tok_strslot *e = &m->slots[i];
        if (e->h == (uint32_t)(h >> 32) && e->len == n && memcmp(m->keys.p + e->off, k, n) == 0) {
            e->val = val;
            return 0;
        }
        i = (i + 1) & m->mask;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        struct tok_strent *ents = realloc(m->ents, cap * sizeof *ents);
        if (!ents) return -1;
        m->ents = ents;
        m->cap = cap;
    }
    size_t off = m->keys.len;
    if (tok_buf_put(&m->keys, k, n)) return -1;
    m->slots[i] = (struct tok_strslot){(uint32_t)(h >> 32), (uint32_t)n, (uint32_t)off, val};
    m->ents[m->n++] = (struct tok_strent){(uint32_t)off, (uint32_t)n};
    if (m->n * 2 > m->mask) return strmap_grow(m);
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *k, size_t n)
{
    if (!m->slots) return -1;
    uint64_t h = tok_hash(k, n);
    size_t i = (size_t)h & m->mask;
    while (m->slots[i].len != SLOT_EMPTY) {
        const struct tok_strslot *e = &m->slots[i];
        if (e->h == (uint32_t)(h >> 32) && e->len == n && memcmp(m->keys.p + e->off, k, n) == 0)
            return e->val;
        i = (i + 1) & m->mask;
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->slots);
    free(m->ents);
    tok_buf_free(&m->keys);
    memset(m, 0, sizeof *m);
}

/* ================================================================ merge map */

int tok_mergemap_init(tok_mergemap *m, size_t expect)
{
    size_t slots = 16;
    while (slots < expect * 2) slots *= 2;
    m->slots = malloc(slots * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < slots; i++) m->slots[i].key = UINT64_MAX;
    m->mask = slots - 1;
    m->n = 0;
    return 0;
}

/* A later duplicate pair overwrites the earlier one, as HF's map collect does. */
int tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    if ((m->n + 1) * 2 > m->mask + 1) return -1; /* sized by init */
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & m->mask;
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == key) {
            m->slots[i].rank = rank;
            m->slots[i].id = id;
            return 0;
        }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = (struct tok_mergeent){key, rank, id};
    m->n++;
    return 0;
}

void tok_mergemap_free(tok_mergemap *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}
