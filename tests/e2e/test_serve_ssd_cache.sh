#!/usr/bin/env bash
# test_serve_ssd_cache.sh — the SSD KV tier (--ssd-cache) end to end:
#   restart survival (a ~2,000-token prefix prefilled before SIGTERM is cached
#   after the restart; prints cold vs restarted TTFT), flush, the DIR lock,
#   corrupt entries quarantined (flipped payload byte, truncation, another
#   model), the size cap, and a failing disk (simulated ENOSPC) that degrades
#   to no persistence without failing requests.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
REQ="$E2E_DIR/ssd_req.py"
MODEL=$(e2e_small_model) || e2e_skip "cannot make the test model"
DIR="$E2E_TMP/ssd"
j() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
stat_ssd() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['ssd_cache']['$2'])"; }

# ---- cold, then restart on the same DIR
e2e_server A --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" || exit 1
cold=$($PY "$REQ" "$A_URL" 1 8)
check "cold request runs (prompt $(j "$cold" "['prompt']") tokens, cached $(j "$cold" "['cached']"))" [ "$(j "$cold" "['cached']")" = 0 ]
flush=$(curl -s -w ' %{http_code}' -X POST "$A_URL/admin/cache/flush")
check "flush answers 200 durable ($flush)" bash -c "[[ '$flush' == *'\"durable\":true'* && '$flush' == *' 200' ]]"
check "entries are on disk" [ "$(stat_ssd "$A_URL" entries)" -ge 100 ]
# a second server may not share the DIR
port=$(e2e_free_port)
"$KILN_BIN" serve --model "$MODEL" --port "$port" --ssd-cache "$DIR" > "$E2E_TMP/second.log" 2>&1
rc=$?
check "a second server on the same DIR is refused (rc $rc)" [ $rc -ne 0 ]
check "with a clear message" grep -q "in use by another kiln process" "$E2E_TMP/second.log"
check "SIGTERM exits 0" e2e_stop "$A_PID"

e2e_server B --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" || exit 1
warm=$($PY "$REQ" "$B_URL" 1 8)
ct=$(j "$cold" "['ttft']"); wt=$(j "$warm" "['ttft']")
echo "cold TTFT ${ct}s, after restart ${wt}s (prompt $(j "$warm" "['prompt']") tokens, cached $(j "$warm" "['cached']"))"
check "after the restart the prefix is cached" [ "$(j "$warm" "['cached']")" -ge $(( $(j "$warm" "['prompt']") - 16 )) ]
check "TTFT falls to under half of cold" $PY -c "import sys; sys.exit(0 if $wt < $ct / 2 else 1)"
check "the same text as the cold run" [ "$(j "$cold" "['text']")" = "$(j "$warm" "['text']")" ]
check "/stats.ssd_cache counts SSD hits" [ "$(stat_ssd "$B_URL" hits)" -ge 100 ]
check "/metrics has the SSD counters" bash -c "curl -s $B_URL/metrics | grep -q '^kiln_ssd_cache_hits_total [1-9]'"
check "SIGTERM exits 0" e2e_stop "$B_PID"

# ---- corrupt entries: a flipped payload byte in every entry (found when the
# first block of the chain is loaded), then a truncated file (found by the scan)
$PY - "$DIR" <<'PY'
import glob, sys
for p in glob.glob(sys.argv[1] + "/*.kv"):
    with open(p, "r+b") as f:
        f.seek(96 + 1000); b = f.read(1); f.seek(96 + 1000); f.write(bytes([b[0] ^ 0x20]))
PY
e2e_server C --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" || exit 1
again=$($PY "$REQ" "$C_URL" 1 8)
check "a corrupt entry is never served: same text ($(j "$again" "['cached']") cached)" [ "$(j "$cold" "['text']")" = "$(j "$again" "['text']")" ]
check "the flipped entry is quarantined when loaded" [ "$(stat_ssd "$C_URL" quarantined)" = 1 ]
e2e_stop "$C_PID"
one=$(ls "$DIR"/*.kv | head -n 1)
truncate -s 500 "$one"
e2e_server C2 --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" || exit 1
check "a truncated entry is quarantined at start-up" [ "$(stat_ssd "$C2_URL" quarantined)" = 1 ]
check "quarantine/ holds both" [ "$(ls "$DIR/quarantine" | wc -l)" = 2 ]
e2e_stop "$C2_PID"

# ---- entries of another model are not loaded
TINY=$(e2e_chat_model) || exit 1
e2e_server D --model "$TINY" --ctx 4096 --ssd-cache "$DIR" || exit 1
check "another model's entries are quarantined" [ "$(stat_ssd "$D_URL" entries)" = 0 ]
check "...and counted" [ "$(stat_ssd "$D_URL" quarantined)" -ge 100 ]
e2e_stop "$D_PID"

# ---- size cap: 1 MiB holds ~30 blocks of this model
CAP="$E2E_TMP/ssd-cap"
e2e_server E --model "$MODEL" --ctx 4096 --ssd-cache "$CAP" --ssd-cache-max 0.001 || exit 1
$PY "$REQ" "$E_URL" 2 1 >/dev/null
curl -s -X POST "$E_URL/admin/cache/flush" >/dev/null
bytes=$(stat_ssd "$E_URL" bytes)
check "the cap holds ($bytes bytes <= 1 MiB)" [ "$bytes" -le 1073742 ]
check "the least recently used were evicted" [ "$(stat_ssd "$E_URL" evicted)" -ge 1 ]
e2e_stop "$E_PID"

# ---- a failing disk (simulated ENOSPC after 3 writes) degrades, requests still work
FULL="$E2E_TMP/ssd-full"
KILN_SSD_FAIL_AFTER=3 e2e_server F --model "$MODEL" --ctx 4096 --ssd-cache "$FULL" || exit 1
r1=$($PY "$REQ" "$F_URL" 3 4)
code=$(curl -s -o "$E2E_TMP/flush.json" -w '%{http_code}' -X POST "$F_URL/admin/cache/flush")
r2=$($PY "$REQ" "$F_URL" 3 4)
check "requests succeed on a failing disk" [ "$(j "$r2" "['text']")" = "$(j "$r1" "['text']")" ]
check "the tier says degraded" [ "$(stat_ssd "$F_URL" degraded)" = True ]
check "failed writes are counted" [ "$(stat_ssd "$F_URL" failed)" -ge 1 ]
check "flush answers 503 when not durable ($code)" [ "$code" = 503 ]
check "one warning in the log" [ "$(grep -c 'write failed' "$F_LOG")" = 1 ]
check "the server still exits 0" e2e_stop "$F_PID"

# ---- the write queue's copies are memory inside --memory-budget
adm() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['admission']['overhead_bytes'])"; }
e2e_server P --model "$MODEL" --ctx 1024 --memory-budget 2 || exit 1
o_plain=$(adm "$P_URL"); e2e_stop "$P_PID"
e2e_server Q --model "$MODEL" --ctx 1024 --memory-budget 2 --ssd-cache "$E2E_TMP/ssd-q" || exit 1
q=$(stat_ssd "$Q_URL" queue_max_bytes); o_q=$(adm "$Q_URL")
check "on a 2 GB budget the write queue gets 1/16 of it ($q bytes)" [ "$q" = 125000000 ]
check "and the plan counts it ($o_plain + $q = $o_q)" [ $((o_plain + q)) = "$o_q" ]
check "/stats shows the queue's bytes" [ "$(stat_ssd "$Q_URL" queue_bytes)" -ge 0 ]
e2e_stop "$Q_PID"
e2e_server R --model "$MODEL" --ctx 1024 --memory-budget 2 --ssd-cache "$E2E_TMP/ssd-r" --ssd-queue-mib 64 || exit 1
check "--ssd-queue-mib 64 sets it, counted too" \
  bash -c '[ "$1" = 67108864 ] && [ $(($2 + 67108864)) = "$3" ]' _ "$(stat_ssd "$R_URL" queue_max_bytes)" "$o_plain" "$(adm "$R_URL")"
e2e_stop "$R_PID"
"$KILN_BIN" serve --model "$MODEL" --ssd-queue-mib 64 > "$E2E_TMP/q.log" 2>&1
check "--ssd-queue-mib without --ssd-cache is refused" grep -q "needs --ssd-cache" "$E2E_TMP/q.log"
e2e_done
