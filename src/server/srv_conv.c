/*
 * srv_conv.c — the conversation store: SQLite tables, FTS5 indexes kept in step
 * by triggers, JSON documents in and out (see srv_conv.h for the document).
 *
 * Schema (version 1, in meta.schema_version):
 *   conversations(rid INTEGER PRIMARY KEY, id TEXT UNIQUE, title, system, model,
 *                 settings JSON text, created_at, updated_at)
 *   messages(id INTEGER PRIMARY KEY, conv_rid -> conversations ON DELETE CASCADE,
 *            seq, role, content, reasoning, tool_calls JSON text, figures JSON text,
 *            created_at)
 *   conv_fts(title), msg_fts(content): FTS5 external-content tables over the two,
 *   rowid = rid / message id, maintained by AFTER INSERT/DELETE/UPDATE triggers.
 * Invariants:
 *   (1) every conversation row has exactly one conv_fts row, every message one
 *       msg_fts row (the triggers; a delete cascades to messages, whose triggers fire)
 *   (2) a conversation's messages have seq 0..n-1 in order (replace rewrites them all,
 *       append continues from max(seq) + 1)
 *   (3) every public call runs under st->mu in one transaction: it commits whole or
 *       rolls back whole
 * The file lives in the data folder (mode 0700 folder, 0600 file); WAL journal, so
 * several servers (or `kiln run`) may share one folder.
 * Threads: any; st->mu serializes the one connection.
 */
#include "server/srv_conv.h"
#include "util/plat.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct srv_conv_store {
    sqlite3 *db; /* OWNED */
    pthread_mutex_t mu;
    char path[4096];
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS conversations("
    "  rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '',"
    "  system TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',"
    "  settings TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL, updated_at REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS conversations_updated ON conversations(updated_at);"
    "CREATE TABLE IF NOT EXISTS messages("
    "  id INTEGER PRIMARY KEY,"
    "  conv_rid INTEGER NOT NULL REFERENCES conversations(rid) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '',"
    "  reasoning TEXT, tool_calls TEXT, figures TEXT, created_at REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS messages_conv ON messages(conv_rid, seq);"
    "CREATE VIRTUAL TABLE IF NOT EXISTS conv_fts USING fts5(title, content='conversations',"
    "  content_rowid='rid', tokenize='unicode61 remove_diacritics 2');"
    "CREATE VIRTUAL TABLE IF NOT EXISTS msg_fts USING fts5(content, content='messages',"
    "  content_rowid='id', tokenize='unicode61 remove_diacritics 2');"
    "CREATE TRIGGER IF NOT EXISTS conv_ai AFTER INSERT ON conversations BEGIN"
    "  INSERT INTO conv_fts(rowid, title) VALUES (new.rid, new.title); END;"
    "CREATE TRIGGER IF NOT EXISTS conv_ad AFTER DELETE ON conversations BEGIN"
    "  INSERT INTO conv_fts(conv_fts, rowid, title) VALUES ('delete', old.rid, old.title); END;"
    "CREATE TRIGGER IF NOT EXISTS conv_au AFTER UPDATE OF title ON conversations BEGIN"
    "  INSERT INTO conv_fts(conv_fts, rowid, title) VALUES ('delete', old.rid, old.title);"
    "  INSERT INTO conv_fts(rowid, title) VALUES (new.rid, new.title); END;"
    "CREATE TRIGGER IF NOT EXISTS msg_ai AFTER INSERT ON messages BEGIN"
    "  INSERT INTO msg_fts(rowid, content) VALUES (new.id, new.content); END;"
    "CREATE TRIGGER IF NOT EXISTS msg_ad AFTER DELETE ON messages BEGIN"
    "  INSERT INTO msg_fts(msg_fts, rowid, content) VALUES ('delete', old.id, old.content); END;"
    "CREATE TRIGGER IF NOT EXISTS msg_au AFTER UPDATE OF content ON messages BEGIN"
    "  INSERT INTO msg_fts(msg_fts, rowid, content) VALUES ('delete', old.id, old.content);"
    "  INSERT INTO msg_fts(rowid, content) VALUES (new.id, new.content); END;"
    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');";

/* ---------------------------------------------------------------- helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static kiln_code db_fail(srv_conv_store *st, kiln_err *err, const char *what)
{
    return kiln_fail(err, KILN_E_IO, "conversation store: %s: %s", what, sqlite3_errmsg(st->db));
}

static kiln_code exec(srv_conv_store *st, const char *sql, kiln_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) == SQLITE_OK) return KILN_OK;
    kiln_code rc = kiln_fail(err, KILN_E_IO, "conversation store: %s", msg ? msg : "error");
    sqlite3_free(msg);
    return rc;
}

static kiln_code prep(srv_conv_store *st, const char *sql, sqlite3_stmt **out, kiln_err *err)
{
    if (sqlite3_prepare_v2(st->db, sql, -1, out, NULL) == SQLITE_OK) return KILN_OK;
    *out = NULL;
    return db_fail(st, err, "prepare");
}

static void begin(srv_conv_store *st)
{
    pthread_mutex_lock(&st->mu);
    sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
}

/* Commits on rc == KILN_OK (a failed commit becomes the error), else rolls back. */
static kiln_code end(srv_conv_store *st, kiln_code rc, kiln_err *err)
{
    if (rc == KILN_OK && sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        rc = db_fail(st, err, "commit");
    if (rc != KILN_OK) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(s, i);
}

/* A JSON value as compact text (OWNED), NULL for null/absent. */
static char *json_text(const json_t *v)
{
    if (!v || json_is_null(v)) return NULL;
    return json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII);
}

static json_t *column_json(sqlite3_stmt *s, int i)
{
    const char *t = (const char *)sqlite3_column_text(s, i);
    if (!t) return json_null();
    json_error_t je;
    json_t *j = json_loads(t, JSON_DECODE_ANY, &je);
    return j ? j : json_null();
}

static json_t *column_str(sqlite3_stmt *s, int i)
{
    const char *t = (const char *)sqlite3_column_text(s, i);
    return t ? json_stringn(t, (size_t)sqlite3_column_bytes(s, i)) : json_null();
}

int srv_conv_id_ok(const char *s)
{
    size_t n = 0;
    for (; s && s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
              (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '-'))
            return 0;
    return n > 0 && n < SRV_CONV_ID_MAX;
}

/* conv_ + 24 hex digits from the OS's random source. */
static kiln_code new_id(char *out, kiln_err *err)
{
    unsigned char b[12];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof b) return kiln_fail(err, KILN_E_IO, "no random bytes for an id");
    int k = snprintf(out, SRV_CONV_ID_MAX, "conv_");
    for (size_t i = 0; i < sizeof b; i++) k += snprintf(out + k, SRV_CONV_ID_MAX - (size_t)k, "%02x", b[i]);
    return KILN_OK;
}

/* ---------------------------------------------------------------- open */

void srv_conv_default_dir(char *out, size_t n)
{
    const char *x = getenv("XDG_DATA_HOME");
    if (x && x[0] == '/') {
        snprintf(out, n, "%s/kiln", x);
        return;
    }
    const char *home = getenv("HOME");
    snprintf(out, n, "%s/.local/share/kiln", home && *home ? home : ".");
}

static int mkdirs(const char *path, mode_t mode)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, mode) && errno != EEXIST ? -1 : 0;
}

kiln_code srv_conv_open(const char *dir, srv_conv_store **out, kiln_err *err)
{
    *out = NULL;
    if (!dir || !dir[0]) return kiln_fail(err, KILN_E_INVALID, "conversation store: empty folder");
    if (mkdirs(dir, 0700) != 0 || !plat_is_dir(dir))
        return kiln_fail(err, KILN_E_IO, "cannot create the data folder %s: %s", dir, strerror(errno));
    srv_conv_store *st = calloc(1, sizeof *st);
    if (!st) return kiln_fail(err, KILN_E_NOMEM, "conversation store: out of memory");
    pthread_mutex_init(&st->mu, NULL);
    snprintf(st->path, sizeof st->path, "%s/%s", dir, SRV_CONV_DB_NAME);
    int fd = open(st->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* born 0600, never wider */
    if (fd >= 0) close(fd);
    int rc = sqlite3_open_v2(st->path, &st->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        kiln_fail(err, KILN_E_IO, "cannot open %s: %s", st->path,
                  st->db ? sqlite3_errmsg(st->db) : "out of memory");
        srv_conv_close(st);
        return err ? err->code : KILN_E_IO;
    }
    sqlite3_busy_timeout(st->db, 5000);
    kiln_code k = exec(st, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", err);
    if (!k) k = exec(st, SCHEMA, err);
    if (!k) {
        sqlite3_stmt *s;
        if (!(k = prep(st, "SELECT value FROM meta WHERE key = 'schema_version'", &s, err))) {
            const char *v = sqlite3_step(s) == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
            if (!v || strcmp(v, "1") != 0)
                k = kiln_fail(err, KILN_E_UNSUPPORTED, "%s: schema version %s is newer than this kiln's (1)",
                              st->path, v ? v : "?");
            sqlite3_finalize(s);
        }
    }
    if (k) {
        kiln_err_prefix(err, "%s: ", st->path);
        srv_conv_close(st);
        return k;
    }
    *out = st;
    return KILN_OK;
}

void srv_conv_close(srv_conv_store *st)
{
    if (!st) return;
    if (st->db) sqlite3_close_v2(st->db);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

const char *srv_conv_db_path(const srv_conv_store *st)
{
    return st->path;
}

/* ---------------------------------------------------------------- validation */

static kiln_code bad(kiln_err *err, const char *fmt, const char *field)
{
    return kiln_fail(err, KILN_E_INVALID, fmt, field);
}

/* Optional string field: absent/null ok; anything else but a string is refused. */
static kiln_code opt_str(const json_t *o, const char *k, size_t max, const char **out, kiln_err *err)
{
    const json_t *v = json_object_get(o, k);
    *out = NULL;
    if (!v || json_is_null(v)) return KILN_OK;
    if (!json_is_string(v)) return bad(err, "'%s' must be a string", k);
    if (max && json_string_length(v) > max)
        return kiln_fail(err, KILN_E_TOO_LARGE, "'%s' is over %zu bytes", k, max);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(err, "'%s' must not contain NUL characters", k);
    *out = json_string_value(v);
    return KILN_OK;
}

static kiln_code check_message(const json_t *m, kiln_err *err)
{
    if (!json_is_object(m)) return bad(err, "%s: each message must be an object", "messages");
    const char *role;
    kiln_code rc = opt_str(m, "role", 32, &role, err);
    if (rc) return rc;
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                  strcmp(role, "tool")))
        return bad(err, "%s: role must be system, user, assistant or tool", "messages");
    const char *s;
    if ((rc = opt_str(m, "content", 0, &s, err)) || (rc = opt_str(m, "reasoning", 0, &s, err)))
        return rc;
    const json_t *tc = json_object_get(m, "tool_calls"), *fg = json_object_get(m, "figures");
    if (tc && !json_is_null(tc) && !json_is_array(tc))
        return bad(err, "%s: tool_calls must be an array", "messages");
    if (fg && !json_is_null(fg) && !json_is_object(fg))
        return bad(err, "%s: figures must be an object", "messages");
    return KILN_OK;
}

static kiln_code check_doc(const json_t *doc, int need_messages_ok, kiln_err *err)
{
    if (!json_is_object(doc)) return bad(err, "%s must be a JSON object", "the conversation");
    const char *s;
    kiln_code rc;
    if ((rc = opt_str(doc, "title", SRV_CONV_MAX_TITLE, &s, err)) ||
        (rc = opt_str(doc, "system", 0, &s, err)) || (rc = opt_str(doc, "model", 256, &s, err)))
        return rc;
    const json_t *set = json_object_get(doc, "settings");
    if (set && !json_is_null(set) && !json_is_object(set)) return bad(err, "'%s' must be an object", "settings");
    const json_t *msgs = json_object_get(doc, "messages");
    if (msgs && !json_is_null(msgs)) {
        if (!json_is_array(msgs)) return bad(err, "'%s' must be an array", "messages");
        if (json_array_size(msgs) > SRV_CONV_MAX_MESSAGES)
            return kiln_fail(err, KILN_E_TOO_LARGE, "more than %d messages", SRV_CONV_MAX_MESSAGES);
        size_t i;
        const json_t *m;
        json_array_foreach(msgs, i, m) if ((rc = check_message(m, err))) return rc;
    }
    (void)need_messages_ok;
    return KILN_OK;
}

static double num_or(const json_t *o, const char *k, double dflt)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) < 1e11
               ? json_number_value(v)
               : dflt;
}

/* ---------------------------------------------------------------- rows */

/* rid of id, 0 when absent. */
static long long rid_of(srv_conv_store *st, const char *id)
{
    sqlite3_stmt *s;
    if (prep(st, "SELECT rid FROM conversations WHERE id = ?1", &s, NULL)) return 0;
    bind_text(s, 1, id);
    long long rid = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    return rid;
}

static kiln_code not_found(kiln_err *err, const char *id)
{
    return kiln_fail(err, KILN_E_NOT_FOUND, "no conversation '%.64s'", id);
}

static kiln_code insert_messages(srv_conv_store *st, long long rid, const json_t *msgs,
                                 long long *first_id, kiln_err *err)
{
    sqlite3_stmt *q, *s;
    kiln_code rc = prep(st, "SELECT coalesce(max(seq) + 1, 0), count(*) FROM messages WHERE conv_rid = ?1",
                        &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, rid);
    long long seq = 0, have = 0;
    if (sqlite3_step(q) == SQLITE_ROW) {
        seq = sqlite3_column_int64(q, 0);
        have = sqlite3_column_int64(q, 1);
    }
    sqlite3_finalize(q);
    if (have + (long long)json_array_size(msgs) > SRV_CONV_MAX_MESSAGES)
        return kiln_fail(err, KILN_E_TOO_LARGE, "a conversation holds at most %d messages",
                         SRV_CONV_MAX_MESSAGES);
    if ((rc = prep(st, "INSERT INTO messages(conv_rid, seq, role, content, reasoning, tool_calls, "
                       "figures, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                   &s, err)))
        return rc;
    double now = now_s();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const json_t *c = json_object_get(m, "content");
        char *tc = json_text(json_object_get(m, "tool_calls")), *fg = json_text(json_object_get(m, "figures"));
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, rid);
        sqlite3_bind_int64(s, 2, seq++);
        bind_text(s, 3, json_string_value(json_object_get(m, "role")));
        bind_text(s, 4, json_is_string(c) ? json_string_value(c) : "");
        bind_text(s, 5, json_string_value(json_object_get(m, "reasoning")));
        bind_text(s, 6, tc);
        bind_text(s, 7, fg);
        sqlite3_bind_double(s, 8, num_or(m, "created_at", now));
        int step = sqlite3_step(s);
        free(tc);
        free(fg);
        if (step != SQLITE_DONE) {
            rc = db_fail(st, err, "insert message");
            break;
        }
        if (i == 0 && first_id) *first_id = sqlite3_last_insert_rowid(st->db);
    }
    sqlite3_finalize(s);
    return rc;
}

static kiln_code touch(srv_conv_store *st, long long rid, kiln_err *err)
{
    sqlite3_stmt *s;
    kiln_code rc = prep(st, "UPDATE conversations SET updated_at = ?2 WHERE rid = ?1", &s, err);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, rid);
    sqlite3_bind_double(s, 2, now_s());
    if (sqlite3_step(s) != SQLITE_DONE) rc = db_fail(st, err, "update");
    sqlite3_finalize(s);
    return rc;
}

/* Inserts one conversation row + its messages (doc already checked). */
static kiln_code insert_doc(srv_conv_store *st, const json_t *doc, char *id_out, kiln_err *err)
{
    kiln_code rc = new_id(id_out, err);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = prep(st, "INSERT INTO conversations(id, title, system, model, settings, created_at, "
                       "updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   &s, err)))
        return rc;
    const json_t *set = json_object_get(doc, "settings");
    char *settings = json_is_object(set) ? json_text(set) : NULL;
    double now = now_s(), created = num_or(doc, "created_at", now);
    const char *t = json_string_value(json_object_get(doc, "title"));
    const char *sy = json_string_value(json_object_get(doc, "system"));
    const char *mo = json_string_value(json_object_get(doc, "model"));
    bind_text(s, 1, id_out);
    bind_text(s, 2, t ? t : "");
    bind_text(s, 3, sy ? sy : "");
    bind_text(s, 4, mo ? mo : "");
    bind_text(s, 5, settings ? settings : "{}");
    sqlite3_bind_double(s, 6, created);
    sqlite3_bind_double(s, 7, num_or(doc, "updated_at", now));
    int step = sqlite3_step(s);
    free(settings);
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) return db_fail(st, err, "insert conversation");
    long long rid = sqlite3_last_insert_rowid(st->db);
    const json_t *msgs = json_object_get(doc, "messages");
    return json_is_array(msgs) ? insert_messages(st, rid, msgs, NULL, err) : KILN_OK;
}

/* The document of rid (OWNED), NULL on failure. */
static json_t *load_doc(srv_conv_store *st, long long rid, kiln_err *err)
{
    sqlite3_stmt *s;
    if (prep(st, "SELECT id, title, system, model, settings, created_at, updated_at FROM "
                 "conversations WHERE rid = ?1",
             &s, err))
        return NULL;
    sqlite3_bind_int64(s, 1, rid);
    json_t *doc = NULL;
    if (sqlite3_step(s) == SQLITE_ROW) {
        doc = json_object();
        json_object_set_new(doc, "id", column_str(s, 0));
        json_object_set_new(doc, "object", json_string("conversation"));
        json_object_set_new(doc, "title", column_str(s, 1));
        json_object_set_new(doc, "system", column_str(s, 2));
        json_object_set_new(doc, "model", column_str(s, 3));
        json_object_set_new(doc, "settings", column_json(s, 4));
        json_object_set_new(doc, "created_at", json_real(sqlite3_column_double(s, 5)));
        json_object_set_new(doc, "updated_at", json_real(sqlite3_column_double(s, 6)));
    }
    sqlite3_finalize(s);
    if (!doc) {
        kiln_fail(err, KILN_E_NOT_FOUND, "no such conversation");
        return NULL;
    }
    json_t *msgs = json_array();
    if (prep(st, "SELECT id, role, content, reasoning, tool_calls, figures, created_at FROM messages "
                 "WHERE conv_rid = ?1 ORDER BY seq",
             &s, err)) {
        json_decref(msgs);
        json_decref(doc);
        return NULL;
    }
    sqlite3_bind_int64(s, 1, rid);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *m = json_object();
        json_object_set_new(m, "id", json_integer(sqlite3_column_int64(s, 0)));
        json_object_set_new(m, "role", column_str(s, 1));
        json_object_set_new(m, "content", column_str(s, 2));
        json_object_set_new(m, "reasoning", column_str(s, 3));
        json_object_set_new(m, "tool_calls", column_json(s, 4));
        json_object_set_new(m, "figures", column_json(s, 5));
        json_object_set_new(m, "created_at", json_real(sqlite3_column_double(s, 6)));
        json_array_append_new(msgs, m);
    }
    sqlite3_finalize(s);
    json_object_set_new(doc, "messages", msgs);
    return doc;
}

/* ---------------------------------------------------------------- API */

kiln_code srv_conv_get(srv_conv_store *st, const char *id, json_t **out, kiln_err *err)
{
    *out = NULL;
    begin(st);
    long long rid = rid_of(st, id);
    kiln_code rc = rid ? KILN_OK : not_found(err, id);
    if (!rc && !(*out = load_doc(st, rid, err))) rc = err ? err->code : KILN_E_IO;
    return end(st, rc, err);
}

kiln_code srv_conv_create(srv_conv_store *st, const json_t *doc, char *id_out, kiln_err *err)
{
    kiln_code rc = check_doc(doc, 1, err);
    if (rc) return rc;
    begin(st);
    return end(st, insert_doc(st, doc, id_out, err), err);
}

kiln_code srv_conv_replace(srv_conv_store *st, const char *id, const json_t *doc, kiln_err *err)
{
    kiln_code rc = check_doc(doc, 1, err);
    if (rc) return rc;
    begin(st);
    long long rid = rid_of(st, id);
    if (!rid) return end(st, not_found(err, id), err);
    static const char *const cols[] = {"title", "system", "model", "settings"};
    for (size_t i = 0; i < 4 && !rc; i++) {
        const json_t *v = json_object_get(doc, cols[i]);
        if (!v || json_is_null(v)) continue;
        char sql[128];
        snprintf(sql, sizeof sql, "UPDATE conversations SET %s = ?2 WHERE rid = ?1", cols[i]);
        sqlite3_stmt *s;
        if ((rc = prep(st, sql, &s, err))) break;
        char *txt = json_is_string(v) ? NULL : json_text(v);
        sqlite3_bind_int64(s, 1, rid);
        bind_text(s, 2, txt ? txt : json_string_value(v));
        if (sqlite3_step(s) != SQLITE_DONE) rc = db_fail(st, err, "update");
        free(txt);
        sqlite3_finalize(s);
    }
    const json_t *msgs = json_object_get(doc, "messages");
    if (!rc && json_is_array(msgs)) {
        sqlite3_stmt *s;
        if (!(rc = prep(st, "DELETE FROM messages WHERE conv_rid = ?1", &s, err))) {
            sqlite3_bind_int64(s, 1, rid);
            if (sqlite3_step(s) != SQLITE_DONE) rc = db_fail(st, err, "delete messages");
            sqlite3_finalize(s);
        }
        if (!rc) rc = insert_messages(st, rid, msgs, NULL, err);
    }
    if (!rc) rc = touch(st, rid, err);
    return end(st, rc, err);
}

kiln_code srv_conv_append(srv_conv_store *st, const char *id, const json_t *msgs,
                          long long *first_id, kiln_err *err)
{
    json_t *arr = json_is_array(msgs) ? json_incref((json_t *)msgs) : json_pack("[O]", msgs);
    if (!arr) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    kiln_code rc = KILN_OK;
    size_t i;
    const json_t *m;
    if (json_array_size(arr) == 0) rc = bad(err, "%s: nothing to append", "messages");
    json_array_foreach(arr, i, m) if (!rc) rc = check_message(m, err);
    if (rc) {
        json_decref(arr);
        return rc;
    }
    begin(st);
    long long rid = rid_of(st, id);
    rc = rid ? insert_messages(st, rid, arr, first_id, err) : not_found(err, id);
    if (!rc) rc = touch(st, rid, err);
    json_decref(arr);
    return end(st, rc, err);
}

kiln_code srv_conv_delete(srv_conv_store *st, const char *id, kiln_err *err)
{
    begin(st);
    sqlite3_stmt *s;
    kiln_code rc = prep(st, "DELETE FROM conversations WHERE id = ?1", &s, err);
    if (!rc) {
        bind_text(s, 1, id);
        if (sqlite3_step(s) != SQLITE_DONE) rc = db_fail(st, err, "delete");
        else if (sqlite3_changes(st->db) == 0) rc = not_found(err, id);
        sqlite3_finalize(s);
    }
    return end(st, rc, err);
}

/* The FTS5 query for free text: every word quoted (so no operator or column filter
 * comes from the user), the last one a prefix; NULL when there is no word. OWNED. */
static char *fts_query(const char *q)
{
    size_t n = strlen(q), cap = 3 * n + 16, k = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    const char *p = q;
    int words = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        if (words++) out[k++] = ' ';
        out[k++] = '"';
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            if (*p == '"') out[k++] = '"';
            out[k++] = *p++;
        }
        out[k++] = '"';
    }
    if (!words) {
        free(out);
        return NULL;
    }
    out[k++] = '*';
    out[k] = 0;
    return out;
}

static json_t *summary_row(sqlite3_stmt *s, int with_snippet)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", column_str(s, 0));
    json_object_set_new(o, "object", json_string("conversation"));
    json_object_set_new(o, "title", column_str(s, 1));
    json_object_set_new(o, "model", column_str(s, 2));
    json_object_set_new(o, "created_at", json_real(sqlite3_column_double(s, 3)));
    json_object_set_new(o, "updated_at", json_real(sqlite3_column_double(s, 4)));
    json_object_set_new(o, "n_messages", json_integer(sqlite3_column_int64(s, 5)));
    if (with_snippet) json_object_set_new(o, "snippet", column_str(s, 6));
    return o;
}

kiln_code srv_conv_list(srv_conv_store *st, const char *q, int limit, int offset, json_t **out,
                        int *has_more, kiln_err *err)
{
    *out = NULL;
    *has_more = 0;
    if (limit < 1) limit = 1;
    if (limit > 1000) limit = 1000;
    if (offset < 0) offset = 0;
    char *fq = q ? fts_query(q) : NULL;
    static const char plain[] =
        "SELECT c.id, c.title, c.model, c.created_at, c.updated_at,"
        " (SELECT count(*) FROM messages m WHERE m.conv_rid = c.rid)"
        " FROM conversations c ORDER BY c.updated_at DESC, c.rid DESC LIMIT ?1 OFFSET ?2";
    /* best hit per conversation: its title or any message; the snippet comes from the
     * row with the lowest (best) bm25 rank (SQLite's bare column with min()) */
    static const char search[] =
        "SELECT c.id, c.title, c.model, c.created_at, c.updated_at,"
        " (SELECT count(*) FROM messages m WHERE m.conv_rid = c.rid), h.snip, min(h.rank)"
        " FROM (SELECT rowid AS r, snippet(conv_fts, 0, char(57344), char(57345), '…', 16) AS snip,"
        "              rank FROM conv_fts WHERE conv_fts MATCH ?3"
        "       UNION ALL"
        "       SELECT m.conv_rid, snippet(msg_fts, 0, char(57344), char(57345), '…', 16), msg_fts.rank"
        "       FROM msg_fts JOIN messages m ON m.id = msg_fts.rowid WHERE msg_fts MATCH ?3) h"
        " JOIN conversations c ON c.rid = h.r GROUP BY c.rid"
        " ORDER BY min(h.rank), c.updated_at DESC LIMIT ?1 OFFSET ?2";
    begin(st);
    sqlite3_stmt *s;
    kiln_code rc = prep(st, fq ? search : plain, &s, err);
    json_t *arr = json_array();
    if (!rc && !arr) rc = kiln_fail(err, KILN_E_NOMEM, "out of memory");
    if (!rc) {
        sqlite3_bind_int(s, 1, limit + 1);
        sqlite3_bind_int(s, 2, offset);
        if (fq) bind_text(s, 3, fq);
        int step;
        while ((step = sqlite3_step(s)) == SQLITE_ROW) {
            if ((int)json_array_size(arr) == limit) {
                *has_more = 1;
                break;
            }
            json_array_append_new(arr, summary_row(s, fq != NULL));
        }
        if (step != SQLITE_ROW && step != SQLITE_DONE) rc = db_fail(st, err, "search");
        sqlite3_finalize(s);
    }
    free(fq);
    rc = end(st, rc, err);
    if (rc) json_decref(arr);
    else *out = arr;
    return rc;
}

kiln_code srv_conv_export(srv_conv_store *st, const char *id, json_t **out, kiln_err *err)
{
    *out = NULL;
    json_t *list = json_array();
    if (!list) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    begin(st);
    kiln_code rc = KILN_OK;
    if (id) {
        long long rid = rid_of(st, id);
        json_t *d = rid ? load_doc(st, rid, err) : NULL;
        if (!rid) rc = not_found(err, id);
        else if (!d) rc = err ? err->code : KILN_E_IO;
        else json_array_append_new(list, d);
    } else {
        sqlite3_stmt *s;
        rc = prep(st, "SELECT rid FROM conversations ORDER BY created_at, rid", &s, err);
        while (!rc && sqlite3_step(s) == SQLITE_ROW) {
            json_t *d = load_doc(st, sqlite3_column_int64(s, 0), err);
            if (!d) rc = err ? err->code : KILN_E_IO;
            else json_array_append_new(list, d);
        }
        if (s) sqlite3_finalize(s);
    }
    rc = end(st, rc, err);
    if (rc) {
        json_decref(list);
        return rc;
    }
    *out = json_pack("{s:s, s:i, s:f, s:o}", "object", "kiln.conversations", "version", 1,
                     "exported_at", now_s(), "conversations", list);
    return *out ? KILN_OK : kiln_fail(err, KILN_E_NOMEM, "out of memory");
}

kiln_code srv_conv_import(srv_conv_store *st, const json_t *in, json_t **ids, kiln_err *err)
{
    *ids = NULL;
    const json_t *list = in;
    if (json_is_object(in) && json_is_array(json_object_get(in, "conversations")))
        list = json_object_get(in, "conversations");
    json_t *one = NULL;
    if (json_is_object(list)) list = one = json_pack("[O]", in);
    if (!json_is_array(list)) return bad(err, "%s: send an export, an array of conversations or one", "import");
    size_t i;
    const json_t *d;
    kiln_code rc = KILN_OK;
    json_array_foreach(list, i, d) if (!rc) rc = check_doc(d, 1, err);
    json_t *got = json_array();
    if (!rc && !got) rc = kiln_fail(err, KILN_E_NOMEM, "out of memory");
    if (!rc) {
        begin(st);
        json_array_foreach(list, i, d) {
            char id[SRV_CONV_ID_MAX];
            if ((rc = insert_doc(st, d, id, err))) break;
            json_array_append_new(got, json_string(id));
        }
        rc = end(st, rc, err);
    }
    json_decref(one);
    if (rc) json_decref(got);
    else *ids = got;
    return rc;
}
