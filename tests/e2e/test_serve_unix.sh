#!/usr/bin/env bash
# test_serve_unix.sh — --unix PATH (curl --unix-socket): the same API on a
# unix-domain socket, mode 0600, a stale socket file replaced, a regular file
# or a live server's socket refused; POST /admin/lease only there: a request
# submitted during the lease makes no progress until it is released, then
# completes; cancellation works while leased; SIGTERM during a lease exits 0.
. "$(dirname "$0")/lib.sh"
e2e_need
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
PY=/usr/bin/python3
SOCK="$E2E_TMP/kiln.sock"
code() { curl -s -o "$E2E_TMP/body" -w '%{http_code}' "$@"; }
is() { [ "$1" = "$2" ] || { echo "  got '$1', expected '$2': $(head -c 300 "$E2E_TMP/body" 2>/dev/null)"; return 1; }; }
ustats() { curl -s --unix-socket "$SOCK" http://kiln/stats | $PY -c 'import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split("."): v=v[k]
print(v)' "$1"; }
wait_for() { for _ in $(seq 1 100); do eval "$1" && return 0; sleep 0.05; done; return 1; }

# a stale socket file (bound, then its process is gone) is replaced
$PY -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$SOCK"
check "stale socket file exists before start" test -S "$SOCK"
e2e_server S --model "$STORIES" --ctx 256 --threads 1 --unix "$SOCK" || exit 1
check "socket mode 0600" is "$(stat -c %a "$SOCK")" 600
check "stale socket replaced: /health over the socket" is "$(code --unix-socket "$SOCK" http://kiln/health)" 200
check "completion over the socket" is "$(code --unix-socket "$SOCK" -d '{"prompt":"Once","max_tokens":4,"temperature":0}' http://kiln/v1/completions)" 200
check "completion has 4 tokens" $PY -c 'import json,sys; assert json.load(open(sys.argv[1]))["usage"]["completion_tokens"]==4' "$E2E_TMP/body"
check "same API over TCP still" is "$(code -d '{"prompt":"Once","max_tokens":2}' "$S_URL/v1/completions")" 200
check "lease over TCP: 404" is "$(code -X POST "$S_URL/admin/lease")" 404
check "lease over the socket, wrong method: 405" is "$(code --unix-socket "$SOCK" http://kiln/admin/lease)" 405

# a live server's socket is not taken over
out=$("$KILN_BIN" serve --model "$STORIES" --port 0 --unix "$SOCK" 2>&1); rc=$?
check "live socket: second server refused" bash -c '[ $1 -ne 0 ] && grep -q "another server is listening" <<<"$2"' _ $rc "$out"
check "live socket: first server still answers" is "$(code --unix-socket "$SOCK" http://kiln/health)" 200

# the lease: the engine stops between steps; a request waits, then completes
curl -sN --unix-socket "$SOCK" -X POST http://kiln/admin/lease > "$E2E_TMP/lease" 2>/dev/null &
LEASE=$!
check "lease answers 'leased'" wait_for 'grep -qx leased "$E2E_TMP/lease"'
check "stats: one lease held" is "$(ustats engine.leases)" 1
steps0=$(ustats engine.steps)
vcurl -s --unix-socket "$SOCK" -d '{"prompt":"Once upon","max_tokens":8,"temperature":0}' -o "$E2E_TMP/held" -w '%{http_code}' http://kiln/v1/completions > "$E2E_TMP/held.code" &
HELD=$!
check "request during the lease is queued" wait_for '[ "$(ustats batch.queued)" = 1 ]'
sleep 1
check "no step ran during the lease" is "$(ustats engine.steps)" "$steps0"
check "the held request has not finished" kill -0 "$HELD"
# cancellation still works while leased: a client that gives up leaves the queue
vcurl -s -m 0.5 --unix-socket "$SOCK" -d '{"prompt":"Once","max_tokens":8}' http://kiln/v1/completions >/dev/null 2>&1
check "cancelled while leased: it leaves, the held one stays" wait_for '[ "$(ustats batch.queued)" = 1 ] && [ "$(ustats requests.cancelled)" -ge 1 ]'
kill "$LEASE"; wait "$LEASE" 2>/dev/null
wait "$HELD"
check "after release the held request completes (200)" is "$(cat "$E2E_TMP/held.code")" 200
check "after release: 8 tokens" $PY -c 'import json,sys; assert json.load(open(sys.argv[1]))["usage"]["completion_tokens"]==8' "$E2E_TMP/held"
check "stats: lease released" is "$(ustats engine.leases)" 0

# SIGTERM during a lease (with a request waiting) exits 0 promptly
curl -sN --unix-socket "$SOCK" -X POST http://kiln/admin/lease > "$E2E_TMP/lease2" 2>/dev/null &
LEASE=$!
wait_for 'grep -qx leased "$E2E_TMP/lease2"'
vcurl -s --unix-socket "$SOCK" -d '{"prompt":"Once","max_tokens":8}' http://kiln/v1/completions >/dev/null 2>&1 &
sleep 0.3
t0=$(date +%s.%N)
e2e_stop "$S_PID"; rc=$?
dt=$($PY -c "import time; print(round(time.time() - $t0, 2))")
echo "  SIGTERM during a lease: exit $rc after ${dt}s"
check "SIGTERM during a lease exits 0" [ $rc -eq 0 ]
check "... within 10 s" $PY -c "assert $dt < 10"
check "socket file removed at exit" bash -c '! [ -e "$1" ]' _ "$SOCK"
wait "$LEASE" 2>/dev/null

# a regular file at PATH is never deleted: start-up refused
echo "precious" > "$E2E_TMP/file.sock"
out=$("$KILN_BIN" serve --model "$STORIES" --port 0 --unix "$E2E_TMP/file.sock" 2>&1); rc=$?
check "regular file at PATH: start-up refused" bash -c '[ $1 -ne 0 ] && grep -q "not a socket" <<<"$2"' _ $rc "$out"
check "regular file left intact" is "$(cat "$E2E_TMP/file.sock")" precious
e2e_done
