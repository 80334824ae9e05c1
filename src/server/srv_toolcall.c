/*
 * srv_toolcall.c — per-family tool-call parsers behind one incremental
 * splitter (see srv_toolcall.h).
 *
 * States, and the function that moves each:
 *   TEXT -> CALL   scan_text()   a start marker appears outside a ``` block
 *   CALL -> TEXT   scan_call()   the call parsed (appended to calls) or was
 *                                malformed (its text goes to content)
 * Invariants:
 *   (1) in TEXT, buf holds only bytes that might still begin a marker, a
 *       code fence, or whitespace after a call: never more than one marker
 *   (2) in CALL, buf starts with the marker that opened the call
 *   (3) no byte of a parsed call ever reaches content
 * Threads: one parser per choice, used by one thread.
 * Errors: only out of memory; bad markup is content, never an error.
 */
#include "server/srv_toolcall.h"
#include "server/srv_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- types */

typedef struct {
    char *name;    /* OWNED */
    char *args;    /* OWNED: compact JSON object */
    size_t serial; /* the open call it was while streaming (srv_tc_open_get) */
} tc_call;

/* A call of the markup being parsed, for streaming: its name is known and
 * args holds the part of its final arguments text that can no longer change. */
typedef struct {
    char *name;  /* OWNED */
    srv_buf args; /* OWNED */
} tc_open;

struct srv_tc {
    srv_tc_family f;
    const json_t *tools; /* BORROWED: the request's tools, for schema coercion */
    bool in_call;        /* state CALL */
    bool in_fence;       /* inside a ``` block: markers are text */
    bool any_text;       /* non-space content already emitted (llama3 bare JSON only first) */
    bool after_call;     /* drop the whitespace (and llama3 ';') between calls */
    srv_buf buf;         /* OWNED: unprocessed bytes (invariants 1, 2) */
    tc_call *calls;      /* OWNED [n_calls] */
    size_t n_calls, cap_calls;
    /* streaming view of the call markup in buf (state CALL): a body may hold
     * several calls (mistral's [{..},{..}]); the k-th has serial serial0 + k */
    tc_open *open;       /* OWNED [n_open] (cap_open allocated) */
    size_t n_open, cap_open;
    size_t serial0;      /* serial of the body's first call */
    size_t serial_next;  /* serial0 of the next body: never reused */
    size_t body_calls;   /* calls the body added so far */
    size_t max_open;     /* most open calls the body showed */
    bool gemma_closed;   /* preview: the call's {...} closed (gemma_parse) */
    bool preview_due;    /* buf holds an open call whose view is not built yet */
};

static const char *const FAMILY_NAMES[SRV_TC_COUNT] = {
    [SRV_TC_NONE] = "none",       [SRV_TC_HERMES] = "hermes", [SRV_TC_QWEN3_CODER] = "qwen3_coder",
    [SRV_TC_LLAMA3] = "llama3",   [SRV_TC_MISTRAL] = "mistral", [SRV_TC_GEMMA] = "gemma",
    [SRV_TC_GEMMA4] = "gemma4",
};

#define M_TOOL_CALL "<tool_call>"
#define M_FUNCTION "<function="
#define M_PYTHON "<|python_tag|>"
#define M_MISTRAL "[TOOL_CALLS]"
#define M_GEMMA "<start_function_call>"
#define M_GEMMA4 "<|tool_call>"
#define M_GEMMA4_END "<tool_call|>"
#define M_GEMMA4_RESPONSE "<|tool_response>"

/* Start markers of each family (NULL-terminated). */
static const char *const *markers(srv_tc_family f)
{
    static const char *const hermes[] = {M_TOOL_CALL, M_FUNCTION, NULL};
    static const char *const llama[] = {M_PYTHON, NULL};
    static const char *const mistral[] = {M_MISTRAL, NULL};
    static const char *const gemma[] = {M_GEMMA, NULL};
    static const char *const gemma4[] = {M_GEMMA4, NULL};
    static const char *const none[] = {NULL};
    switch (f) {
    case SRV_TC_HERMES:
    case SRV_TC_QWEN3_CODER: return hermes;
    case SRV_TC_LLAMA3: return llama;
    case SRV_TC_MISTRAL: return mistral;
    case SRV_TC_GEMMA: return gemma;
    case SRV_TC_GEMMA4: return gemma4;
    default: return none;
    }
}

/* ---------------------------------------------------------------- helpers */

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static const char *find(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    for (size_t i = 0; i + l <= n; i++)
        if (s[i] == lit[0] && !memcmp(s + i, lit, l)) return s + i;
    return NULL;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    while (i < n && is_space(s[i])) i++;
    return i;
}

/* End (one past) of the JSON object or array starting at s[0]: 0 while it is
 * incomplete, (size_t)-1 when s[0] opens neither. Strings and escapes are skipped. */
static size_t json_extent(const char *s, size_t n)
{
    if (!n) return 0;
    if (s[0] != '{' && s[0] != '[') return (size_t)-1;
    int depth = 0;
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (str) {
            if (c == '\\') i++;
            else if (c == '"') str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return 0;
}

/* The JSON schema "type" of parameter `param` of tool `name`, or NULL. */
static const char *param_type(const json_t *tools, const char *name, const char *param, size_t plen)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!fn) fn = t; /* flat tools (Responses API) */
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (!n || strcmp(n, name)) continue;
        json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        if (!props) props = json_object_get(json_object_get(fn, "input_schema"), "properties");
        const char *k;
        json_t *v;
        json_object_foreach(props, k, v) {
            if (strlen(k) != plen || memcmp(k, param, plen)) continue;
            json_t *ty = json_object_get(v, "type");
            if (json_is_array(ty)) { /* ["integer", "null"]: the first non-null */
                size_t j;
                json_t *e;
                json_array_foreach(ty, j, e) {
                    const char *s = json_string_value(e);
                    if (s && strcmp(s, "null")) return s;
                }
                return NULL;
            }
            return json_string_value(ty);
        }
    }
    return NULL;
}

/* A value the format gave as text, as JSON: the schema's type decides; with
 * no schema, `guess` tries JSON first (gemma's bare 42/true) else a string. */
static json_t *coerce(const char *v, size_t n, const char *type, bool guess)
{
    if (!type && !guess) return json_stringn(v, n);
    if (type && !strcmp(type, "string")) return json_stringn(v, n);
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
    if (!j && type && (!strcmp(type, "number") || !strcmp(type, "integer")))
        /* an integer past int64 (jansson refuses it) is still a JSON number */
        j = json_loadb(v, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, NULL);
    if (j && type && !strcmp(type, "integer") && json_is_real(j) &&
        fabs(json_real_value(j)) < 9.2e18 && /* the cast below is defined */
        json_real_value(j) == (double)(json_int_t)json_real_value(j)) {
        json_t *k = json_integer((json_int_t)json_real_value(j));
        json_decref(j);
        j = k;
    }
    return j ? j : json_stringn(v, n);
}

static bool name_ok(const char *name, size_t nlen)
{
    if (!nlen) return false;
    for (size_t i = 0; i < nlen; i++) /* a name is text: no NUL or control bytes */
        if ((unsigned char)name[i] < 0x20) return false;
    return true;
}

/* Adds a call; args (OWNED, compact JSON object text) is taken even on failure. */
static int add_call_text(srv_tc *p, const char *name, size_t nlen, char *args)
{
    if (!args || !name_ok(name, nlen)) goto fail;
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? p->cap_calls * 2 : 4;
        tc_call *nc = realloc(p->calls, cap * sizeof *nc);
        if (!nc) goto fail;
        p->calls = nc;
        p->cap_calls = cap;
    }
    tc_call c = {strndup(name, nlen), args, p->serial0 + p->body_calls};
    if (!c.name) goto fail;
    p->calls[p->n_calls++] = c;
    p->body_calls++;
    return 0;
fail:
    free(args);
    return -1;
}

static int add_call(srv_tc *p, const char *name, size_t nlen, json_t *args /* stolen */)
{
    char *text = args ? srv_json_dump(args, NULL) : NULL;
    json_decref(args);
    return add_call_text(p, name, nlen, text);
}

/* JSON text s[0..n) without the whitespace between tokens, appended to b
 * (a prefix of the text gives a prefix of the result). */
static int strip_ws(const char *s, size_t n, srv_buf *b)
{
    bool str = false, esc = false;
    size_t run = 0; /* bytes kept, not yet copied */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') str = false;
        } else if (is_space(c)) {
            if (run && srv_buf_add(b, s + i - run, run)) return -1;
            run = 0;
            continue;
        } else if (c == '"') {
            str = true;
        }
        run++;
    }
    return run ? srv_buf_add(b, s + n - run, run) : 0;
}

static char *strip_ws_dup(const char *s, size_t n)
{
    srv_buf b = {0};
    if (strip_ws(s, n, &b) || srv_buf_add(&b, "", 1)) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.p; /* OWNED by the caller */
}

/* Where the parts of one call object {"name": N, "arguments"|"parameters": V}
 * lie in s[0..n) (s[0] == '{'; the text may stop anywhere inside it). */
typedef struct {
    size_t name0, name1; /* the "name" value token [name0, name1); name1 0 until complete */
    size_t args0, args1; /* the first arguments/parameters value; args0 0: none, args1 0: open */
    size_t end;          /* one past the object's '}'; 0 while open */
} jcall;

static void jcall_scan(const char *s, size_t n, jcall *c)
{
    enum { KEY, IN_KEY, COLON, VALUE, IN_VALUE, AFTER } st = KEY; /* at depth 1 */
    memset(c, 0, sizeof *c);
    int depth = 0, which = 0; /* which: 1 the value of "name", 2 of arguments/parameters */
    bool str = false, esc = false, scalar = false;
    size_t key0 = 0, val0 = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (str) {
            if (esc) {
                esc = false;
            } else if (ch == '\\') {
                esc = true;
            } else if (ch == '"') {
                str = false;
                if (depth == 1 && st == IN_KEY) {
                    size_t kl = i + 1 - key0;
                    const char *k = s + key0;
                    which = kl == 6 && !memcmp(k, "\"name\"", 6) ? 1
                            : (kl == 11 && !memcmp(k, "\"arguments\"", 11)) ||
                                      (kl == 12 && !memcmp(k, "\"parameters\"", 12))
                                  ? 2
                                  : 0;
                    st = COLON;
                } else if (depth == 1 && st == IN_VALUE) {
                    if (which == 1 && val0 == c->name0) c->name1 = i + 1;
                    if (which == 2 && val0 == c->args0) c->args1 = i + 1;
                    st = AFTER;
                }
            }
            continue;
        }
        if (depth == 1 && st == IN_VALUE && scalar) {
            if (ch != ',' && ch != '}' && !is_space(ch)) continue;
            if (which == 2 && val0 == c->args0) c->args1 = i;
            st = AFTER;
        }
        if (is_space(ch)) continue;
        bool start = depth == 1 && st == VALUE;
        if (start) {
            val0 = i;
            if (which == 1 && !c->name0 && ch == '"') c->name0 = i;
            if (which == 2 && !c->args0) c->args0 = i;
            st = IN_VALUE;
            scalar = ch != '"' && ch != '{' && ch != '[';
        }
        switch (ch) {
        case '"':
            str = true;
            if (depth == 1 && st == KEY) {
                key0 = i;
                st = IN_KEY;
            }
            break;
        case '{':
        case '[': depth++; break;
        case '}':
        case ']':
            if (--depth <= 0) {
                c->end = i + 1;
                return;
            }
            if (depth == 1 && st == IN_VALUE) {
                if (which == 2 && val0 == c->args0) c->args1 = i + 1;
                st = AFTER;
            }
            break;
        case ',':
            if (depth == 1) st = KEY;
            break;
        case ':':
            if (depth == 1 && st == COLON) st = VALUE;
            break;
        default: break;
        }
    }
}

/* ---------------------------------------------------------------- families */

/* {"name": N, "arguments"|"parameters": {...} or "{...}"} → a call. o is the
 * parsed object, s[0..n) its text: object arguments are kept as written, less
 * whitespace, so that the text streamed while it arrived is the final text. */
static int json_call(srv_tc *p, const json_t *o, const char *s, size_t n)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *a = json_object_get(o, "arguments"), *b = json_object_get(o, "parameters");
    if (!name || !json_is_object(o) || (a && b)) return -1;
    if (!a) a = b;
    if (!a || json_is_null(a)) return add_call_text(p, name, strlen(name), strdup("{}"));
    if (json_is_string(a)) {
        json_t *args = json_loads(json_string_value(a), JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(args)) {
            json_decref(args);
            return -1;
        }
        return add_call(p, name, strlen(name), args);
    }
    jcall c;
    jcall_scan(s, n, &c);
    if (!json_is_object(a) || !c.args0 || !c.args1) return -1; /* (an escaped key name) */
    return add_call_text(p, name, strlen(name), strip_ws_dup(s + c.args0, c.args1 - c.args0));
}

/* Parses s[0..n) as JSON and adds the call(s) in it (an object, or an array
 * of objects). Calls are added only when all of them are valid. Duplicate
 * keys are malformed (the streamed text could not equal the parsed one). */
static int json_calls(srv_tc *p, const char *s, size_t n)
{
    json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
    if (!j) return -1;
    size_t before = p->n_calls, i = skip_space(s, n, 0);
    int rc = 0;
    if (json_is_array(j) && json_array_size(j)) {
        size_t k;
        json_t *e;
        i++; /* '[' */
        json_array_foreach(j, k, e) {
            i = skip_space(s, n, i);
            jcall c;
            jcall_scan(s + i, n - i, &c);
            if (!c.end || (rc = json_call(p, e, s + i, c.end))) {
                rc = -1;
                break;
            }
            i = skip_space(s, n, i + c.end);
            if (i < n && s[i] == ',') i++;
        }
    } else {
        rc = json_is_object(j) ? json_call(p, j, s + i, n - i) : -1;
    }
    json_decref(j);
    if (rc) {
        while (p->n_calls > before) {
            p->n_calls--;
            free(p->calls[p->n_calls].name);
            free(p->calls[p->n_calls].args);
        }
        p->body_calls = 0;
    }
    return rc;
}

/* <function=N><parameter=P>\nV\n</parameter>...</function> (s[0..n) is
 * exactly that, surrounding whitespace aside). With partial (streaming, s a
 * prefix of the call), *partial gets the parameters that are complete so far
 * (NULL when the name is not known yet) and fname the name; nothing is added. */
static int xml_parse(srv_tc *p, const char *s, size_t n, json_t **partial, char fname[256])
{
    size_t i = skip_space(s, n, 0);
    size_t ml = strlen(M_FUNCTION);
    if (n - i < ml || memcmp(s + i, M_FUNCTION, ml)) return -1;
    i += ml;
    const char *gt = memchr(s + i, '>', n - i);
    if (!gt) return -1;
    const char *name = s + i;
    size_t nlen = (size_t)(gt - name);
    while (nlen && is_space(name[nlen - 1])) nlen--;
    if (!nlen || nlen >= 256 || memchr(name, '<', nlen)) return -1;
    memcpy(fname, name, nlen);
    fname[nlen] = 0;
    i = (size_t)(gt - s) + 1;
    json_t *args = json_object();
    if (!args) return -1;
    for (;;) {
        i = skip_space(s, n, i);
        if (n - i >= 11 && !memcmp(s + i, "</function>", 11)) {
            i = skip_space(s, n, i + 11);
            if (i != n || partial) break;
            return add_call(p, fname, nlen, args);
        }
        if (n - i < 11 || memcmp(s + i, "<parameter=", 11)) break;
        i += 11;
        const char *pg = memchr(s + i, '>', n - i);
        if (!pg) break;
        const char *pname = s + i;
        size_t plen = (size_t)(pg - pname);
        i = (size_t)(pg - s) + 1;
        const char *v = s + i;
        const char *e1 = find(v, n - i, "</parameter>"), *e2 = find(v, n - i, "<parameter="),
                   *e3 = find(v, n - i, "</function>");
        const char *end = e1;
        if (!end || (e2 && e2 < end)) end = e2;
        if (!end || (e3 && e3 < end)) end = e3;
        if (!end) break;
        size_t vlen = (size_t)(end - v);
        i = (size_t)(end - s) + (end == e1 ? 12 : 0);
        if (vlen && v[0] == '\n') v++, vlen--;
        if (vlen && v[vlen - 1] == '\n') vlen--;
        char key[256];
        if (!plen || plen >= sizeof key || memchr(pname, 0, plen)) break;
        memcpy(key, pname, plen);
        key[plen] = 0;
        if (json_object_get(args, key)) break; /* a repeated parameter: malformed */
        json_object_set_new(args, key, coerce(v, vlen, param_type(p->tools, fname, pname, plen), false));
    }
    if (partial) {
        *partial = args;
        return 0;
    }
    json_decref(args);
    return -1;
}

static int xml_call(srv_tc *p, const char *s, size_t n)
{
    char fname[256];
    return xml_parse(p, s, n, NULL, fname);
}

/* Gemma's value syntax → JSON: <escape>text<escape> (Gemma 4: <|"|>text<|"|>)
 * is a string, {k:v,...} an object, [v,...] an array, anything else a bare
 * token (42, true, null). Strings are raw: no escapes inside. */
static const char *gemma_quote(const srv_tc *p)
{
    return p->f == SRV_TC_GEMMA4 ? "<|\"|>" : "<escape>";
}

static json_t *gemma_value(srv_tc *p, const char *s, size_t n, size_t *i, const char *fn,
                           const char *type);

/* With partial (streaming, s a prefix): *partial gets the pairs complete so far. */
static json_t *gemma_object(srv_tc *p, const char *s, size_t n, size_t *i, const char *fn, json_t **partial)
{
    json_t *o = json_object();
    (*i)++; /* '{' */
    for (;;) {
        *i = skip_space(s, n, *i);
        if (*i < n && s[*i] == '}') {
            (*i)++;
            return o;
        }
        const char *q = gemma_quote(p);
        size_t ql = strlen(q), k0 = *i, kl;
        if (n - *i >= ql && !memcmp(s + *i, q, ql)) { /* a quoted key */
            const char *e = find(s + *i + ql, n - *i - ql, q);
            if (!e) break;
            k0 = *i + ql;
            kl = (size_t)(e - s) - k0;
            *i = skip_space(s, n, (size_t)(e - s) + ql);
        } else {
            while (*i < n && s[*i] != ':' && s[*i] != '}') (*i)++;
            kl = *i - k0;
            while (kl && is_space(s[k0 + kl - 1])) kl--;
        }
        if (*i >= n || s[*i] != ':' || !kl) break;
        char key[256];
        if (kl >= sizeof key || memchr(s + k0, 0, kl)) break;
        memcpy(key, s + k0, kl);
        key[kl] = 0;
        if (json_object_get(o, key)) break; /* a repeated key: malformed */
        (*i)++;
        json_t *v = gemma_value(p, s, n, i, fn, fn ? param_type(p->tools, fn, key, kl) : NULL);
        if (!v || (partial && skip_space(s, n, *i) >= n)) { /* a bare value may go on */
            json_decref(v);
            break;
        }
        json_object_set_new(o, key, v);
        *i = skip_space(s, n, *i);
        if (*i < n && s[*i] == ',') (*i)++;
    }
    if (partial) *partial = o;
    else json_decref(o);
    return NULL;
}

static json_t *gemma_value(srv_tc *p, const char *s, size_t n, size_t *i, const char *fn,
                           const char *type)
{
    const char *q = gemma_quote(p);
    size_t ql = strlen(q);
    *i = skip_space(s, n, *i);
    if (*i >= n) return NULL;
    if (n - *i >= ql && !memcmp(s + *i, q, ql)) {
        const char *e = find(s + *i + ql, n - *i - ql, q);
        if (!e) return NULL;
        const char *v = s + *i + ql;
        *i = (size_t)(e - s) + ql;
        return coerce(v, (size_t)(e - v), type ? type : "string", false);
    }
    if (s[*i] == '{') return gemma_object(p, s, n, i, NULL, NULL);
    if (s[*i] == '[') {
        json_t *a = json_array();
        (*i)++;
        for (;;) {
            *i = skip_space(s, n, *i);
            if (*i < n && s[*i] == ']') {
                (*i)++;
                return a;
            }
            json_t *v = gemma_value(p, s, n, i, NULL, NULL);
            if (!v) break;
            json_array_append_new(a, v);
            *i = skip_space(s, n, *i);
            if (*i < n && s[*i] == ',') (*i)++;
        }
        json_decref(a);
        return NULL;
    }
    size_t v0 = *i;
    while (*i < n && s[*i] != ',' && s[*i] != '}' && s[*i] != ']') (*i)++;
    size_t vl = *i - v0;
    while (vl && is_space(s[v0 + vl - 1])) vl--;
    return vl ? coerce(s + v0, vl, type, true) : NULL;
}

/* call:N{...} (s[0..n) is exactly that). partial: as xml_parse. */
static int gemma_parse(srv_tc *p, const char *s, size_t n, json_t **partial, char fname[256])
{
    size_t i = skip_space(s, n, 0);
    if (n - i < 5 || memcmp(s + i, "call:", 5)) return -1;
    i += 5;
    size_t n0 = i;
    while (i < n && s[i] != '{' && !is_space(s[i])) i++;
    size_t nl = i - n0;
    if (!nl || nl >= 256 || i >= n || s[i] != '{' || memchr(s + n0, 0, nl)) return -1;
    memcpy(fname, s + n0, nl);
    fname[nl] = 0;
    json_t *o = gemma_object(p, s, n, &i, fname, partial);
    if (partial) {
        p->gemma_closed = o != NULL;
        if (o) { /* the object closed: the whole of it is known */
            json_decref(*partial);
            *partial = o;
        }
        return 0;
    }
    if (!o || skip_space(s, n, i) != n) {
        json_decref(o);
        return -1;
    }
    return add_call(p, fname, nl, o);
}

static int gemma_call(srv_tc *p, const char *s, size_t n)
{
    char fname[256];
    return gemma_parse(p, s, n, NULL, fname);
}

/* One call starting at buf[0] (a marker, or llama3's bare '{').
 * Returns 1 parsed (*used bytes), 0 incomplete, -1 malformed (*used bytes are content). */
typedef int (*call_fn)(srv_tc *p, const char *s, size_t n, bool final, size_t *used);

static int tagged(srv_tc *p, const char *s, size_t n, bool final, size_t *used, const char *open,
                  const char *close, int (*body)(srv_tc *, const char *, size_t))
{
    size_t ol = strlen(open), cl = strlen(close);
    const char *e = find(s + ol, n - ol, close);
    if (!e && !final) return 0;
    size_t end = e ? (size_t)(e - s) : n;
    *used = e ? end + cl : n;
    return body(p, s + ol, end - ol) ? -1 : 1;
}

static int body_tool_call(srv_tc *p, const char *s, size_t n)
{
    size_t i = skip_space(s, n, 0);
    if (i < n && s[i] == '{') return json_calls(p, s, n);
    return xml_call(p, s, n);
}

static int call_hermes(srv_tc *p, const char *s, size_t n, bool final, size_t *used)
{
    if (!memcmp(s, M_TOOL_CALL, strlen(M_TOOL_CALL)))
        return tagged(p, s, n, final, used, M_TOOL_CALL, "</tool_call>", body_tool_call);
    /* a bare <function=...>...</function> */
    const char *e = find(s, n, "</function>");
    if (!e && !final) return 0;
    *used = e ? (size_t)(e - s) + 11 : n;
    return xml_call(p, s, *used) ? -1 : 1;
}

static int call_gemma(srv_tc *p, const char *s, size_t n, bool final, size_t *used)
{
    return p->f == SRV_TC_GEMMA4 ? tagged(p, s, n, final, used, M_GEMMA4, M_GEMMA4_END, gemma_call)
                                 : tagged(p, s, n, final, used, M_GEMMA, "<end_function_call>", gemma_call);
}

static int call_llama3(srv_tc *p, const char *s, size_t n, bool final, size_t *used)
{
    size_t i = 0, ml = strlen(M_PYTHON);
    if (n >= ml && !memcmp(s, M_PYTHON, ml)) i = ml;
    i = skip_space(s, n, i);
    size_t x = json_extent(s + i, n - i);
    if (x == 0 && !final) return 0;
    if (x == (size_t)-1) { /* no JSON after the marker: the marker is text, scanning goes on
                            * after it (taking the whole buffer would depend on how much of
                            * the output has arrived: streaming and not would differ) */
        *used = i;
        return -1;
    }
    if (x == 0) { /* the end of the output inside the JSON: all of it is text */
        *used = n;
        return -1;
    }
    *used = i + x;
    return json_calls(p, s + i, x) ? -1 : 1;
}

static int call_mistral(srv_tc *p, const char *s, size_t n, bool final, size_t *used)
{
    size_t i = skip_space(s, n, strlen(M_MISTRAL));
    *used = n;
    if (i >= n) return final ? -1 : 0;
    if (s[i] == '[' || s[i] == '{') { /* v3: a JSON array of calls */
        size_t x = json_extent(s + i, n - i);
        if (x == 0) return final ? -1 : 0;
        *used = i + x;
        return json_calls(p, s + i, x) ? -1 : 1;
    }
    /* v11: NAME[ARGS]{...} (a [CALL_ID]id may sit between) */
    const char *a = find(s + i, n - i, "[ARGS]");
    if (!a) return final ? -1 : 0;
    size_t nl = 0;
    while (i + nl < (size_t)(a - s) && s[i + nl] != '[') nl++;
    size_t j = (size_t)(a - s) + 6;
    size_t x = json_extent(s + j, n - j);
    if (x == 0) return final ? -1 : 0;
    if (x == (size_t)-1) { /* no JSON after [ARGS]: text up to there, scanning goes on */
        *used = j;
        return -1;
    }
    *used = j + x;
    json_t *args = json_loadb(s + j, x, JSON_REJECT_DUPLICATES, NULL);
    bool ok = json_is_object(args) && nl;
    json_decref(args);
    if (!ok) return -1;
    return add_call_text(p, s + i, nl, strip_ws_dup(s + j, x)) ? -1 : 1;
}

static call_fn call_parser(srv_tc_family f)
{
    switch (f) {
    case SRV_TC_LLAMA3: return call_llama3;
    case SRV_TC_MISTRAL: return call_mistral;
    case SRV_TC_GEMMA:
    case SRV_TC_GEMMA4: return call_gemma;
    default: return call_hermes;
    }
}

/* ---------------------------------------------------------------- streaming view */

static void open_clear(srv_tc *p)
{
    for (size_t k = 0; k < p->n_open; k++) {
        free(p->open[k].name);
        p->open[k].name = NULL;
        srv_buf_reset(&p->open[k].args);
    }
    p->n_open = 0;
}

/* A new open call named name[0..nlen); its args buffer empty. NULL on OOM. */
static tc_open *open_add(srv_tc *p, const char *name, size_t nlen)
{
    if (p->n_open == p->cap_open) {
        size_t cap = p->cap_open ? p->cap_open * 2 : 4;
        tc_open *no = realloc(p->open, cap * sizeof *no);
        if (!no) return NULL;
        memset(no + p->cap_open, 0, (cap - p->cap_open) * sizeof *no);
        p->open = no;
        p->cap_open = cap;
    }
    tc_open *o = &p->open[p->n_open];
    if (!(o->name = strndup(name, nlen))) return NULL;
    p->n_open++;
    if (p->n_open > p->max_open) p->max_open = p->n_open;
    return o;
}

/* Keeps only whole UTF-8 characters (a fragment is sent as a JSON string). */
static void open_trim(tc_open *o)
{
    o->args.len = srv_utf8_valid_prefix(o->args.p, o->args.len);
}

/* JSON calls (an object, or an array of them) at s[0]: each whose name is
 * known and whose arguments are an object as written (or absent, once the
 * call closed), in order; the first that is not stops the list. */
static int json_preview(srv_tc *p, const char *s, size_t n)
{
    size_t i = 0;
    bool array = s[0] == '[';
    if (array) i = skip_space(s, n, 1);
    while (i < n && s[i] == '{') {
        jcall c;
        jcall_scan(s + i, n - i, &c);
        const char *e = s + i;
        if (!c.name1) return 0;
        json_t *nm = json_loadb(e + c.name0, c.name1 - c.name0, JSON_DECODE_ANY, NULL);
        const char *name = json_string_value(nm);
        bool obj = c.args0 && e[c.args0] == '{';
        if (!name || !name_ok(name, strlen(name)) || (!obj && !(c.end && !c.args0))) {
            json_decref(nm);
            return 0;
        }
        tc_open *o = open_add(p, name, strlen(name));
        json_decref(nm);
        if (!o) return -1;
        if (!obj) {
            if (srv_buf_add(&o->args, "{}", 2)) return -1;
        } else {
            size_t a1 = c.args1 ? c.args1 : n - i;
            if (strip_ws(e + c.args0, a1 - c.args0, &o->args)) return -1;
            open_trim(o);
        }
        if (!array || !c.end) return 0;
        i = skip_space(s, n, i + c.end);
        if (i < n && s[i] == ',') i = skip_space(s, n, i + 1);
    }
    return 0;
}

/* Rebuilt arguments (qwen3_coder, gemma): the parameters complete so far,
 * serialized as the final object will be, less its '}' while it is open. */
static int rebuilt_preview(srv_tc *p, const char *fname, json_t *partial, bool closed)
{
    if (!partial || !name_ok(fname, strlen(fname))) {
        json_decref(partial);
        return 0;
    }
    size_t len;
    char *text = srv_json_dump(partial, &len);
    json_decref(partial);
    tc_open *o = text ? open_add(p, fname, strlen(fname)) : NULL;
    int rc = !o || srv_buf_add(&o->args, text, closed ? len : len - 1) ? -1 : 0;
    if (!rc) open_trim(o);
    free(text);
    return rc;
}

static int xml_preview(srv_tc *p, const char *s, size_t n)
{
    char fname[256];
    json_t *partial = NULL;
    if (xml_parse(p, s, n, &partial, fname)) return 0;
    return rebuilt_preview(p, fname, partial, false);
}

/* The streaming view of the call markup in buf (state CALL, incomplete). */
static int preview(srv_tc *p)
{
    open_clear(p);
    const char *s = p->buf.p;
    size_t n = p->buf.len, i = 0;
    switch (p->f) {
    case SRV_TC_HERMES:
    case SRV_TC_QWEN3_CODER:
        if (n >= strlen(M_TOOL_CALL) && !memcmp(s, M_TOOL_CALL, strlen(M_TOOL_CALL))) {
            i = skip_space(s, n, strlen(M_TOOL_CALL));
            if (i < n && s[i] == '{') return json_preview(p, s + i, n - i);
        }
        return xml_preview(p, s + i, n - i);
    case SRV_TC_GEMMA:
    case SRV_TC_GEMMA4: {
        i = strlen(p->f == SRV_TC_GEMMA4 ? M_GEMMA4 : M_GEMMA);
        char fname[256];
        json_t *partial = NULL;
        if (n < i || gemma_parse(p, s + i, n - i, &partial, fname) < 0) return 0;
        return rebuilt_preview(p, fname, partial, p->gemma_closed);
    }
    case SRV_TC_LLAMA3:
        if (n >= strlen(M_PYTHON) && !memcmp(s, M_PYTHON, strlen(M_PYTHON))) i = strlen(M_PYTHON);
        i = skip_space(s, n, i);
        return i < n && (s[i] == '{' || s[i] == '[') ? json_preview(p, s + i, n - i) : 0;
    case SRV_TC_MISTRAL: {
        i = skip_space(s, n, strlen(M_MISTRAL));
        if (i >= n) return 0;
        if (s[i] == '[' || s[i] == '{') return json_preview(p, s + i, n - i);
        const char *a = find(s + i, n - i, "[ARGS]");
        if (!a) return 0;
        size_t nl = 0;
        while (i + nl < (size_t)(a - s) && s[i + nl] != '[') nl++;
        size_t j = (size_t)(a - s) + 6;
        if (!nl || !name_ok(s + i, nl) || j >= n || s[j] != '{') return 0;
        size_t x = json_extent(s + j, n - j);
        tc_open *o = open_add(p, s + i, nl);
        if (!o || strip_ws(s + j, x && x != (size_t)-1 ? x : n - j, &o->args)) return -1;
        open_trim(o);
        return 0;
    }
    default: return 0;
    }
}

/* ---------------------------------------------------------------- splitter */

static int emit(srv_tc *p, const char *s, size_t n, srv_buf *content)
{
    for (size_t i = 0; i < n && !p->any_text; i++)
        if (!is_space(s[i])) p->any_text = true;
    return srv_buf_add(content, s, n);
}

/* How buf[i..) relates to a marker or fence: 2 a full match (*ml its
 * length), 1 a proper prefix (hold back), 0 neither. */
static int marker_at(const srv_tc *p, const char *s, size_t n, size_t i, bool final, bool text_before,
                     size_t *ml)
{
    const char *fence = "```";
    size_t left = n - i;
    if (s[i] == '`') {
        if (left >= 3 && !memcmp(s + i, fence, 3)) {
            *ml = 3;
            return 3;
        }
        return !final && left < 3 && !memcmp(s + i, fence, left) ? 1 : 0;
    }
    if (p->in_fence) return 0;
    for (const char *const *m = markers(p->f); *m; m++) {
        size_t l = strlen(*m);
        if (left >= l ? !memcmp(s + i, *m, l) : (!final && !memcmp(s + i, *m, left))) {
            *ml = l;
            return left >= l ? 2 : 1;
        }
    }
    if (p->f == SRV_TC_LLAMA3 && !p->any_text && !text_before && s[i] == '{') {
        *ml = 0;
        return 2;
    }
    return 0;
}

/* Gemma 4 writes <|tool_response> after its calls (the turn's end when the
 * tokenizer does not stop on it) and sometimes a stray <tool_call|>: the
 * length of such a marker at s[0], -1 for a proper prefix of one, 0 none. */
static int noise_at(const char *s, size_t n)
{
    static const char *const noise[] = {M_GEMMA4_RESPONSE, M_GEMMA4_END};
    for (size_t k = 0; k < 2; k++) {
        size_t l = strlen(noise[k]);
        if (n >= l && !memcmp(s, noise[k], l)) return (int)l;
        if (n && n < l && !memcmp(s, noise[k], n)) return -1;
    }
    return 0;
}

/* TEXT: emits what is content; returns 1 when a call starts at buf[0]. */
static int scan_text(srv_tc *p, bool final, srv_buf *content)
{
    srv_buf *b = &p->buf;
    if (p->after_call) {
        size_t i = 0;
        for (;;) {
            while (i < b->len && (is_space(b->p[i]) || (p->f == SRV_TC_LLAMA3 && b->p[i] == ';'))) i++;
            int n = p->f == SRV_TC_GEMMA4 ? noise_at(b->p + i, b->len - i) : 0;
            if (n > 0) {
                i += (size_t)n;
                continue;
            }
            if (n < 0 && !final) { /* maybe noise: wait */
                srv_buf_consume(b, i);
                return 0;
            }
            break;
        }
        srv_buf_consume(b, i);
        if (!b->len) return 0;
        p->after_call = false;
    }
    bool text_before = false;
    for (size_t i = 0; i < b->len; i++) {
        size_t ml = 0;
        int m = marker_at(p, b->p, b->len, i, final, text_before, &ml);
        text_before |= !is_space(b->p[i]);
        if (m == 3) { /* a fence: toggles, stays content */
            p->in_fence = !p->in_fence;
            i += 2;
            continue;
        }
        if (!m) continue;
        if (emit(p, b->p, i, content)) return -1;
        srv_buf_consume(b, i);
        return m == 2 ? 1 : 0; /* 1: a marker; 0: a partial one held back */
    }
    if (emit(p, b->p, b->len, content)) return -1;
    srv_buf_reset(b);
    return 0;
}

static int process(srv_tc *p, bool final, srv_buf *content)
{
    for (;;) {
        if (!p->in_call) {
            int r = scan_text(p, final, content);
            if (r <= 0) return r;
            p->in_call = true;
            p->serial0 = p->serial_next;
            p->body_calls = p->max_open = 0;
        }
        size_t used = 0;
        int r = call_parser(p->f)(p, p->buf.p, p->buf.len, final, &used);
        if (r == 0) { /* the streaming view is built when asked for (srv_tc_open_count) */
            open_clear(p);
            p->preview_due = !final;
            return 0;
        }
        open_clear(p);
        p->preview_due = false;
        /* serials of this body are spent, shown or not */
        p->serial_next = p->serial0 + (p->body_calls > p->max_open ? p->body_calls : p->max_open) + 1;
        if (r < 0) { /* malformed: its text is content */
            if (!used) used = p->buf.len;
            if (emit(p, p->buf.p, used, content)) return -1;
        } else {
            p->after_call = true;
        }
        srv_buf_consume(&p->buf, used);
        p->in_call = false;
        if (!p->buf.len) return 0;
    }
}

/* ---------------------------------------------------------------- API */

srv_tc_family srv_tc_detect(const char *t, const tok_tokenizer *tok)
{
    if (t) {
        if (strstr(t, M_GEMMA4) && strstr(t, M_GEMMA4_END)) return SRV_TC_GEMMA4;
        if (strstr(t, "<function=") && strstr(t, "<parameter=")) return SRV_TC_QWEN3_CODER;
        if (strstr(t, M_TOOL_CALL)) return SRV_TC_HERMES;
        if (strstr(t, M_MISTRAL)) return SRV_TC_MISTRAL;
        if (strstr(t, M_GEMMA) || (strstr(t, "call:") && strstr(t, "<escape>"))) return SRV_TC_GEMMA;
        if (strstr(t, M_PYTHON) || (strstr(t, "<|start_header_id|>") && strstr(t, "\"parameters\"")))
            return SRV_TC_LLAMA3;
    }
    if (tok) {
        static const struct { const char *piece; srv_tc_family f; } by_tok[] = {
            {M_GEMMA4, SRV_TC_GEMMA4},    {M_TOOL_CALL, SRV_TC_HERMES}, {M_MISTRAL, SRV_TC_MISTRAL},
            {M_PYTHON, SRV_TC_LLAMA3},    {M_GEMMA, SRV_TC_GEMMA},
        };
        for (size_t i = 0; i < sizeof by_tok / sizeof by_tok[0]; i++)
            if (tok_piece_to_id(tok, by_tok[i].piece, strlen(by_tok[i].piece)) >= 0) return by_tok[i].f;
    }
    return SRV_TC_NONE;
}

int srv_tc_family_from_name(const char *name)
{
    for (int i = 0; i < SRV_TC_COUNT; i++)
        if (name && !strcmp(name, FAMILY_NAMES[i])) return i;
    if (name && (!strcmp(name, "qwen") || !strcmp(name, "qwen3"))) return SRV_TC_HERMES;
    return -1;
}

const char *srv_tc_family_name(srv_tc_family f)
{
    return f >= 0 && f < SRV_TC_COUNT ? FAMILY_NAMES[f] : "none";
}

bool srv_tc_needs_special(srv_tc_family f)
{
    return f == SRV_TC_LLAMA3 || f == SRV_TC_MISTRAL || f == SRV_TC_GEMMA || f == SRV_TC_GEMMA4;
}

kiln_code srv_tc_create(srv_tc_family f, const json_t *tools, srv_tc **out, kiln_err *err)
{
    *out = NULL;
    srv_tc *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_E_NOMEM, "tool-call parser: out of memory");
    p->f = f;
    p->tools = tools;
    *out = p;
    return KILN_OK;
}

void srv_tc_free(srv_tc *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args);
    }
    free(p->calls);
    for (size_t k = 0; k < p->cap_open; k++) {
        free(p->open[k].name);
        srv_buf_free(&p->open[k].args);
    }
    free(p->open);
    srv_buf_free(&p->buf);
    free(p);
}

int srv_tc_push(srv_tc *p, const char *s, size_t n, srv_buf *content)
{
    if (p->f == SRV_TC_NONE) return srv_buf_add(content, s, n);
    if (srv_buf_add(&p->buf, s, n)) return -1;
    return process(p, false, content) < 0 ? -1 : 0;
}

int srv_tc_finish(srv_tc *p, srv_buf *content)
{
    if (p->f == SRV_TC_NONE || !p->buf.len) return 0;
    if (process(p, true, content) < 0) return -1;
    open_clear(p);
    p->preview_due = false;
    p->in_call = false;
    if (p->after_call) srv_buf_reset(&p->buf); /* trailing whitespace after a call */
    int rc = p->buf.len ? emit(p, p->buf.p, p->buf.len, content) : 0;
    srv_buf_reset(&p->buf);
    return rc;
}

size_t srv_tc_count(const srv_tc *p)
{
    return p ? p->n_calls : 0;
}

void srv_tc_get(const srv_tc *p, size_t i, const char **name, const char **args)
{
    *name = p->calls[i].name;
    *args = p->calls[i].args;
}

size_t srv_tc_serial(const srv_tc *p, size_t i)
{
    return p->calls[i].serial;
}

size_t srv_tc_open_count(srv_tc *p)
{
    if (!p) return 0;
    if (p->preview_due) {
        p->preview_due = false;
        if (preview(p)) open_clear(p); /* out of memory: the calls show when parsed */
    }
    return p->n_open;
}

void srv_tc_open_get(const srv_tc *p, size_t k, size_t *serial, const char **name, const char **args,
                     size_t *len)
{
    *serial = p->serial0 + k;
    *name = p->open[k].name;
    *args = p->open[k].args.p ? p->open[k].args.p : "";
    *len = p->open[k].args.len;
}

size_t srv_tc_settled(const srv_tc *p)
{
    return !p ? 0 : p->in_call ? p->serial0 : p->serial_next;
}
