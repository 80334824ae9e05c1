#!/usr/bin/env bash
# test_serve_ssd_disk.sh — the SSD tier on a hostile or unlucky disk:
#   strange names in --ssd-cache (the FIFO `4444444444444444.kv` that used to
#   block start-up forever, a checkpoint-named FIFO, symlinks out of the
#   folder and to a device) never block start-up, are never served, counted;
#   a full disk (a real 6 MiB tmpfs in a user+mount namespace when the
#   machine allows one, and the ENOSPC hook always) keeps serving, logs one
#   WARN, stops writing, and resumes writing once space returns;
#   a cancelled request's checkpoint is removed within its keep time while the
#   server runs, and a retry inside that time resumes from it.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
REQ="$E2E_DIR/ssd_req.py"
MODEL=$(e2e_small_model) || e2e_skip "cannot make the test model"
j() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
stat_ssd() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['ssd_cache']['$2'])"; }
flush_code() { curl -s -o /dev/null -w '%{http_code}' -X POST "$1/admin/cache/flush"; }
# wait_for SECONDS cmd...: polls cmd until it succeeds (a condition, not a fixed sleep)
wait_for() {
  local t=$1; shift
  local end=$(($(date +%s) + t))
  until "$@"; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.2; done
}

# ---- strange names at start-up
DIR="$E2E_TMP/strange"
mkdir -p "$DIR" "$E2E_TMP/outside"
mkfifo "$DIR/4444444444444444.kv" "$DIR/ck-4444444444444445.kv"
echo "not an entry" > "$E2E_TMP/outside/target"
ln -s "$E2E_TMP/outside/target" "$DIR/5555555555555555.kv"
ln -s /dev/zero "$DIR/6666666666666666.kv"
t0=$(date +%s)
e2e_server A --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" || exit 1
check "start-up with a FIFO named like an entry does not block ($(($(date +%s) - t0)) s)" true
check "the strange names are counted ($(stat_ssd "$A_URL" strange))" [ "$(stat_ssd "$A_URL" strange)" = 4 ]
check "none is quarantined" [ "$(stat_ssd "$A_URL" quarantined)" = 0 ]
check "one WARN line names them" [ "$(grep -c 'no regular file of ours' "$A_LOG")" = 1 ]
r=$($PY "$REQ" "$A_URL" 1 4)
check "requests are served" [ -n "$(j "$r" "['text']")" ]
check "flush makes the prefix durable (200)" [ "$(flush_code "$A_URL")" = 200 ]
check "the FIFO is left as it was" test -p "$DIR/4444444444444444.kv"
check "the link's target outside the folder is untouched" grep -q "not an entry" "$E2E_TMP/outside/target"
e2e_stop "$A_PID"

# ---- a full disk: pauses, one WARN, keeps serving, resumes when space returns
# full_disk NAME URL PID LOG FREE_CMD: FREE_CMD gives the space back
full_disk() {
  local name=$1 url=$2 pid=$3 log=$4 free_cmd=$5
  local r1; r1=$($PY "$REQ" "$url" 1 4)
  local code; code=$(flush_code "$url")
  check "$name: flush on a full disk is not durable ($code)" [ "$code" = 503 ]
  check "$name: the tier says degraded" [ "$(stat_ssd "$url" degraded)" = True ]
  check "$name: failed writes are counted ($(stat_ssd "$url" failed))" [ "$(stat_ssd "$url" failed)" -ge 1 ]
  local r2; r2=$($PY "$REQ" "$url" 1 4)
  check "$name: requests keep working, same text" [ "$(j "$r2" "['text']")" = "$(j "$r1" "['text']")" ]
  check "$name: one WARN line" [ "$(grep -c 'write failed' "$log")" = 1 ]
  $free_cmd
  # writes resume at the first try after the retry time (KILN_SSD_RETRY_S=1)
  # (a short prompt: its blocks fit the space given back)
  resumed() { $PY "$REQ" "$url" -2 1 >/dev/null && [ "$(flush_code "$url")" = 200 ]; }
  check "$name: once space is back, a flush is durable again" wait_for 60 resumed
  check "$name: not degraded any more" [ "$(stat_ssd "$url" degraded)" = False ]
  check "$name: resumed is counted" [ "$(stat_ssd "$url" resumed)" -ge 1 ]
  check "$name: still one WARN line ($(grep -c 'write failed' "$log")), one line for the resume ($(grep -c 'writes resumed' "$log"))" \
    bash -c "[ \$(grep -c 'write failed' '$log') = 1 ] && [ \$(grep -c 'writes resumed' '$log') = 1 ]"
  local r3; r3=$($PY "$REQ" "$url" 1 4)
  check "$name: and the text is still the same" [ "$(j "$r3" "['text']")" = "$(j "$r1" "['text']")" ]
  check "$name: the server exits 0" e2e_stop "$pid"
}

# the hook: while the file exists, writes fail like ENOSPC; deleting it gives the space back
touch "$E2E_TMP/disk-full"
KILN_SSD_FAIL_FILE="$E2E_TMP/disk-full" KILN_SSD_RETRY_S=1 \
  e2e_server H --model "$MODEL" --ctx 4096 --ssd-cache "$E2E_TMP/hook" || exit 1
full_disk "hook" "$H_URL" "$H_PID" "$H_LOG" "rm -f $E2E_TMP/disk-full"

# a real full file system: a 6 MiB tmpfs mounted in a private user + mount
# namespace (no root needed); the test fills it with a 3 MiB file and deletes
# the file through /proc/PID/root to give the space back
TDIR="$E2E_TMP/tmpfs"
mkdir -p "$TDIR"
if unshare -Urm sh -c 'mount -t tmpfs -o size=1m tmpfs "$0"' "$TDIR" 2>/dev/null; then
  cat > "$E2E_TMP/kiln-ns" <<EOF
#!/bin/sh
exec unshare -Urm sh -c 'mount -t tmpfs -o size=6m tmpfs "\$0" && exec "\$@"' "$TDIR" "$KILN_BIN" "\$@"
EOF
  chmod +x "$E2E_TMP/kiln-ns"
  REAL_BIN=$KILN_BIN
  KILN_BIN="$E2E_TMP/kiln-ns" KILN_SSD_RETRY_S=1 \
    e2e_server T --model "$MODEL" --ctx 4096 --ssd-cache "$TDIR" || exit 1
  KILN_BIN=$REAL_BIN
  FS="/proc/$T_PID/root$TDIR"
  dd if=/dev/zero of="$FS/filler" bs=1M count=3 2>/dev/null
  check "tmpfs: the filler is in the server's tmpfs" [ -f "$FS/filler" ]
  full_disk "tmpfs" "$T_URL" "$T_PID" "$T_LOG" "rm -f $FS/filler"
else
  echo "note: no user+mount namespace here: the tmpfs part is skipped (the hook part ran)"
fi

# ---- checkpoints of cancelled requests go while the server runs
CK="$E2E_TMP/ck"
n_ckpt() { ls "$CK" | grep -c '^ck-'; }
no_ckpt() { [ "$(n_ckpt)" = 0 ]; }
# cancel PREFIX: streams a request and disconnects after 60 chunks
cancel() {
  $PY - "$1" "$2" <<'PY'
import json, socket, sys, urllib.parse
url, pid = sys.argv[1], int(sys.argv[2])
words = ["tom", "sees", "the", "sea", "and", "a", "boat", "with", "red", "sails"]
prompt = " ".join(f"{words[(i * 7 + pid) % 10]}{(i + pid) % 89}" for i in range(530))[:400]
body = json.dumps({"prompt": prompt, "max_tokens": 300, "temperature": 0, "stream": True,
                   "ignore_eos": True}).encode()
u = urllib.parse.urlparse(url)
s = socket.create_connection((u.hostname, u.port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
seen = b""
while seen.count(b"data: ") < 60:
    chunk = s.recv(65536)
    if not chunk:
        break
    seen += chunk
s.close()
print(seen.count(b"data: "))
PY
}
KILN_CKPT_CANCELLED_KEEP_S=1 e2e_server C --model "$MODEL" --ctx 4096 --ssd-cache "$CK" \
  --generation-checkpoint 10 || exit 1
chunks=$(cancel "$C_URL" 5)
check "a client disconnects mid-stream ($chunks chunks)" [ "$chunks" -ge 60 ]
n_ck_saved() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['ssd_cache']['checkpoints_saved'])"; }
# (conditions polled, not read once: the writer thread makes them true a little
# later, and much later on a loaded machine)
saved_some() { [ "$(n_ck_saved "$C_URL")" -ge 1 ]; }
check "it had saved checkpoints" wait_for 30 saved_some
check "its checkpoint is removed about a second later, without a restart" wait_for 30 no_ckpt
check "counted as expired ($(stat_ssd "$C_URL" expired))" [ "$(stat_ssd "$C_URL" expired)" -ge 1 ]
e2e_stop "$C_PID"
# the default keep time (300 s) lets a quick retry resume
e2e_server C2 --model "$MODEL" --ctx 4096 --ssd-cache "$CK" --generation-checkpoint 10 || exit 1
cancel "$C2_URL" 6 >/dev/null
# the retry comes once the server has noticed the disconnect (before that, the
# cancelled run could still write a checkpoint after the retry removed its own)
n_cancelled() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['requests']['cancelled'])"; }
cancelled() { [ "$(n_cancelled "$C2_URL")" -ge 1 ]; }
check "the server notices the disconnect" wait_for 30 cancelled
some_ckpt() { [ "$(n_ckpt)" -ge 1 ]; }
check "a disconnected request's checkpoint is kept for a retry" wait_for 30 some_ckpt
again=$($PY "$REQ" "$C2_URL" -6 300 '{"ignore_eos":true}')
check "the retry resumes from it ($(j "$again" "['resumed']") tokens)" [ "$(j "$again" "['resumed']")" -gt 0 ]
curl -s -X POST "$C2_URL/admin/cache/flush" >/dev/null
check "and the completed retry removes it" wait_for 30 no_ckpt
e2e_stop "$C2_PID"
e2e_done
