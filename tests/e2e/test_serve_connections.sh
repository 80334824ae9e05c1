#!/usr/bin/env bash
# test_serve_connections.sh — hostile connections cannot lock out a normal
# client (issue 20): 1,000 idle + 200 slowloris connections held (spread over 8
# source addresses, then all from the client's own address) while a normal chat
# request is answered 200; per-connection deadlines close a slowloris header, an
# idle keep-alive connection and a half-sent body; past the caps (every slot
# busy) a request gets 503 + Retry-After + Connection: close naming the flag.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
F="$E2E_DIR/conn_flood.py"
M=$(e2e_chat_model)
jf() { $PY -c 'import json,sys; v=json.loads(sys.argv[2])
for k in sys.argv[1].split("."): v=v[k]
print(v)' "$1" "$2"; }

# ---------------------------------------------------------------- floods, default caps
e2e_server A --model "$M" || exit 1
out=$($PY "$F" flood "$A_URL" --idle 1000 --slow 200 --from 127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8,127.0.0.9)
echo "  8 addresses: $out"
check "flood from 8 addresses (1000 idle + 200 slowloris): normal request 200" [ "$(jf status "$out")" = 200 ]
check "flood from 8 addresses: the answer is a real completion" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["content"] is not None and r["seconds"] < 30, r' "$out"
cap=$(curl -s "$A_URL/stats" | $PY -c 'import json,sys; print(json.load(sys.stdin)["connections"]["max"])')
[ "$cap" -lt 1000 ] && echo "  note: the open-file limit narrowed --max-connections to $cap"
check "flood from 8 addresses: the server held min(1000, cap) of them" \
  [ "$(jf held_before "$out")" -ge "$((cap < 1000 ? cap : 1000))" ]
out=$($PY "$F" flood "$A_URL" --idle 1000 --slow 200 --from 127.0.0.1)
echo "  same address as the client: $out"
check "flood from the client's own address: normal request 200" [ "$(jf status "$out")" = 200 ]
st=$(curl -s "$A_URL/stats")
echo "  /stats connections: $(jf connections "$st")"
check "stats: idle connections were displaced, none refused" \
  $PY -c 'import json,sys; c=json.loads(sys.argv[1])["connections"]; assert c["evicted_idle"] > 0 and c["refused"] == 0 and c["max"] >= 16, c' "$st"
check "server still healthy after the floods" curl -sf "$A_URL/health" -o /dev/null
e2e_stop "$A_PID"

# ---------------------------------------------------------------- deadlines
e2e_server B --model "$M" --header-timeout 2 --keepalive-timeout 2 --body-timeout 2 || exit 1
for kind in header keepalive body; do
  out=$($PY "$F" deadline "$B_URL" --kind $kind --wait 15)
  check "$kind deadline: the connection is closed after ~2 s ($out)" \
    $PY -c 'import json,sys; t=json.loads(sys.argv[1])["closed_after"]; assert t is not None and 1.5 <= t <= 8, t' "$out"
done
st=$(curl -s "$B_URL/stats")
check "stats: one close per deadline" \
  $PY -c 'import json,sys; c=json.loads(sys.argv[1])["connections"]; assert c["closed_header_timeout"] >= 1 and c["closed_keepalive_timeout"] >= 1 and c["closed_body_timeout"] >= 1, c' "$st"
e2e_stop "$B_PID"

# ---------------------------------------------------------------- caps: every slot busy -> 503
e2e_server C --model "$M" --max-connections 3 --max-connections-per-ip 2 --body-timeout 120 || exit 1
exec 7> >($PY "$F" busy "$C_URL" --n 2 --from 127.0.0.1 > "$E2E_TMP/busy1")
for _ in $(seq 100); do [ -s "$E2E_TMP/busy1" ] && break; sleep 0.1; done
check "two half-sent bodies held from 127.0.0.1" grep -q '"held": 2' "$E2E_TMP/busy1"
out=$($PY "$F" request "$C_URL" --from 127.0.0.1)
check "per-address cap: 503 + Retry-After + close, names --max-connections-per-ip" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["status"] == 503 and r["retry_after"] == "1" and r["connection"] == "close" and "--max-connections-per-ip" in r["body"] and "overloaded" in r["body"], r' "$out"
out=$($PY "$F" request "$C_URL" --from 127.0.0.2)
check "another address is still served" [ "$(jf status "$out")" = 200 ]
exec 8> >($PY "$F" busy "$C_URL" --n 1 --from 127.0.0.3 > "$E2E_TMP/busy2")
for _ in $(seq 100); do [ -s "$E2E_TMP/busy2" ] && break; sleep 0.1; done
out=$($PY "$F" request "$C_URL" --from 127.0.0.2)
check "total cap, every slot busy: 503 naming --max-connections" \
  $PY -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["status"] == 503 and r["retry_after"] == "1" and "--max-connections" in r["body"], r' "$out"
exec 7>&- 8>&-
ok=0
for _ in $(seq 100); do
  [ "$($PY "$F" request "$C_URL" --from 127.0.0.1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])')" = 200 ] && { ok=1; break; }
  sleep 0.1
done
check "once the busy connections go, requests are served again" [ $ok = 1 ]
check "SIGTERM exits 0" e2e_stop "$C_PID"
e2e_done
