#!/usr/bin/env bash
# test_serve_request_memory.sh — what requests hold is bounded and counted
# (issue 20, items 3-5): request bodies are reserved in the request memory
# (--request-memory, inside --memory-budget) before they are read, so 100
# connections each sending a 4 MB body hold at most what fits and the rest get
# 503 + Retry-After at once (RSS grows by the cap, not by 400 MB); a small body
# whose parsed JSON is huge (120,000 empty messages) gets 413 naming the flag,
# in parallel too (or 503 + Retry-After while others hold the rest); afterwards the account is
# back to 0 and normal requests are served; a stored Responses entry counts its
# memory.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
F="$E2E_DIR/body_flood.py"
M=$(e2e_chat_model)
jf() { $PY -c 'import json,sys; v=json.loads(sys.argv[2])
for k in sys.argv[1].split("."): v=v[k]
print(v)' "$1" "$2"; }

# ---------------------------------------------------------------- bodies: 100 x 4 MB
e2e_server A --model "$M" --request-memory 16 || exit 1
check "stats: request_memory max is --request-memory" \
  [ "$(curl -s "$A_URL/stats" | $PY -c 'import json,sys; print(json.load(sys.stdin)["request_memory"]["max"])')" = 16777216 ]
out=$($PY "$F" hold "$A_URL" --pid "$A_PID" --n 100 --size 4000000)
echo "  $out"
check "100 x 4 MB bodies: 4 held (16 MiB), 96 refused" \
  bash -c '[ "$1" = 4 ] && [ "$2" = 96 ]' _ "$(jf held "$out")" "$(jf refused "$out")"
check "refused with 503 + Retry-After" [ "$(jf retry_after_ok "$out")" = True ]
check "RSS grew by less than the cap + 24 MB (was +400 MB)" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); g=r["rss_kb_held"]-r["rss_kb_before"]; print("  RSS growth", g, "kB"); assert g < 16384 + 24576, g' "$out"
check "a normal request is served while they are held" [ "$(jf normal_status "$out")" = 200 ]
check "request memory back to 0 once they go" [ "$(jf reqmem_after "$out")" = 0 ]

# ---------------------------------------------------------------- parsed JSON: 120,000 empty messages
out=$($PY "$F" bomb "$A_URL" --messages 120000 --parallel 4)
echo "  ${out:0:300}"
check "4 parallel bodies of 120,000 empty messages: 413 or 503 + Retry-After, naming --request-memory" \
  $PY -c '
import json,sys
r=json.loads(sys.argv[1])
for st, ra, b in zip(r["statuses"], r["retry_after"], r["bodies"]):
    assert st in (413, 503), (st, b)
    assert "--request-memory" in b, b
    assert st == 413 or ra is not None, (st, ra)' "$out"
out=$($PY "$F" bomb "$A_URL" --messages 120000)
check "the same body alone: 413 (it can never fit), naming --request-memory" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["statuses"] == [413] and "--request-memory" in r["bodies"][0], r' "$out"
out=$($PY "$F" bomb "$A_URL" --messages 2000)
check "2,000 empty messages still parse (the template decides: 200 or 400, not 413)" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["statuses"][0] in (200, 400), r' "$out"
st=$(curl -s "$A_URL/stats")
check "request memory back to 0, peak within the cap" \
  $PY -c 'import json,sys; m=json.loads(sys.argv[1])["request_memory"]; assert m["used"] == 0 and 0 < m["peak"] <= m["max"], m' "$st"
check "a normal request after all that: 200" \
  bash -c '[ "$(curl -s -o /dev/null -w "%{http_code}" "$1/v1/chat/completions" -H "Content-Type: application/json" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}")" = 200 ]' _ "$A_URL"
e2e_stop "$A_PID"

# ---------------------------------------------------------------- chat template renders
# A 1 KiB message that the template ("hold", limits_template.jinja) turns into
# a 4 MiB value: the render's memory is reserved in --request-memory while it
# runs (peak >= 4 MiB), parallel renders past the cap get 503 + Retry-After,
# and a render that could never fit is a 400 naming the flag.
HM="$E2E_TMP/hold-model"
mkdir -p "$HM" && cp "$M"/* "$HM"/ && cp "$E2E_DIR/limits_template.jinja" "$HM/chat_template.jinja"
e2e_server H --model "$HM" --request-memory 16 || exit 1
hold_req() { # URL N: N parallel "hold" requests; prints statuses, Retry-After and error messages
  $PY - "$1" "$2" <<'PYEOF'
import json, sys, threading, urllib.request, urllib.error
url, n = sys.argv[1], int(sys.argv[2])
body = json.dumps({"messages": [{"role": "user", "content": "hold" + "x" * 1020}], "max_tokens": 1}).encode()
out = [None] * n
def one(i):
    rq = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=120) as r:
            out[i] = (r.status, None, "")
    except urllib.error.HTTPError as e:
        out[i] = (e.code, e.headers.get("Retry-After"), json.loads(e.read())["error"]["message"])
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps(out))
PYEOF
}
out=$(hold_req "$H_URL" 1)
st=$(curl -s "$H_URL/stats")
check "one render of a 4 MiB value: 200, counted (request memory peak >= 4 MiB), back to 0" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); m=json.loads(sys.argv[2])["request_memory"]
assert r[0][0] == 200, r
assert m["peak"] >= 4 << 20 and m["peak"] <= m["max"] and m["used"] == 0, m' "$out" "$st"
out=$(hold_req "$H_URL" 8)
echo "  8 parallel: $(echo "$out" | $PY -c 'import json,sys; print([s for s,_,_ in json.load(sys.stdin)])')"
st=$(curl -s "$H_URL/stats")
check "8 parallel renders: 200, or 503 + Retry-After naming --request-memory; peak within the cap" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); m=json.loads(sys.argv[2])["request_memory"]
for s, ra, msg in r:
    assert s == 200 or (s == 503 and ra is not None and "--request-memory" in msg), (s, ra, msg)
assert m["peak"] <= m["max"] and m["used"] == 0, m' "$out" "$st"
e2e_stop "$H_PID"
e2e_server H2 --model "$HM" --max-body 65536 --request-memory 2 || exit 1
out=$(hold_req "$H2_URL" 1)
check "a render that can never fit (--request-memory 2): 400 naming --request-memory" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); assert r[0][0] == 400 and "--request-memory" in r[0][2], r' "$out"
e2e_stop "$H2_PID"

# ---------------------------------------------------------------- Responses store: memory, not text
# (memory, not text: unit.srv_reqmem stores 300,000 numbers — 0.6 MB of text,
# over 8 MiB of values — and sees it refused)
e2e_server R --model "$M" --responses-store-mib 8 || exit 1
small=$($PY -c 'import json; print(json.dumps({"input":"hi","max_output_tokens":2,"store":True}))')
curl -s -o /dev/null "$R_URL/v1/responses" -H 'Content-Type: application/json' -d "$small"
st=$(curl -s "$R_URL/stats")
check "a small entry is kept" \
  $PY -c 'import json,sys; s=json.loads(sys.argv[1])["responses_store"]; assert s["entries"] == 1 and 0 < s["bytes"] < 65536, s' "$st"
check "request memory back to 0" \
  $PY -c 'import json,sys; m=json.loads(sys.argv[1])["request_memory"]; assert m["used"] == 0, m' "$st"
e2e_stop "$R_PID"
e2e_done
