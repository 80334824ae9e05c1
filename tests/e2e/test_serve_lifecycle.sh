#!/usr/bin/env bash
# test_serve_lifecycle.sh — disconnects free their blocks (/stats back to
# baseline); SIGTERM with streams in flight exits 0 within a bounded time.
. "$(dirname "$0")/lib.sh"
e2e_need node
CHAT_MODEL=$(e2e_chat_model) || exit 1
e2e_server CHAT --model "$CHAT_MODEL" --ctx 4096 --batch 4 || exit 1
run_node lifecycle.test.mjs --chat "$CHAT_URL"

# --timeout: a request past its limit is cancelled, the server carries on
e2e_server TO --model "$CHAT_MODEL" --ctx 4096 --timeout 1 || exit 1
t0=$(date +%s)
code=$(vcurl -s -o "$E2E_TMP/to.json" -w '%{http_code}' -d '{"messages":[{"role":"user","content":"go"}],"max_tokens":4000,"ignore_eos":true}' "$TO_URL/v1/chat/completions")
t1=$(date +%s)
# (no API has a finish reason for it: an error naming the flag, not finish_reason "cancelled")
check "--timeout cancels a long request: 503, code cancelled, naming --timeout ($code)" \
  bash -c '[ "$1" = 503 ] && grep -q "\"code\":\"cancelled\"" "$2" && grep -q -- "--timeout" "$2"' _ "$code" "$E2E_TMP/to.json"
check "--timeout is honoured within a few seconds ($((t1 - t0)) s)" [ $((t1 - t0)) -le 4 ]
check "a short request after the timeout works" bash -c "vcurl -s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}' $TO_URL/v1/chat/completions | grep -q chat.completion"

# SIGTERM while three long streams run
LONG='{"messages":[{"role":"user","content":"go"}],"max_tokens":3000,"ignore_eos":true,"stream":true}'
CURLS=()
for i in 1 2 3; do
  curl -sN -d "$LONG" "$CHAT_URL/v1/chat/completions" > "$E2E_TMP/s$i" 2>/dev/null &
  CURLS+=($!)
done
for _ in $(seq 1 100); do [ -s "$E2E_TMP/s3" ] && [ -s "$E2E_TMP/s1" ] && break; sleep 0.05; done
check "streams started before SIGTERM" [ -s "$E2E_TMP/s1" ]
t0=$(date +%s)
kill -TERM "$CHAT_PID"
rc=0; wait "$CHAT_PID" || rc=$?
t1=$(date +%s)
wait "${CURLS[@]}" 2>/dev/null
check "SIGTERM with requests in flight exits 0" [ "$rc" -eq 0 ]
check "shutdown took under 10 s ($((t1 - t0)) s)" [ $((t1 - t0)) -lt 10 ]
check "in-flight streams were ended (an error frame, or cut before [DONE])" \
  bash -c "grep -q '\"code\":\"cancelled\"' $E2E_TMP/s1 || ! grep -q '\[DONE\]' $E2E_TMP/s1"
check "the cut streams conform to the official schema" \
  bash -c 'for i in 1 2 3; do /usr/bin/python3 "$1/validate_api.py" --http "$2/v1/chat/completions" 200 "$3/s$i" || exit 1; done' _ "$E2E_DIR" "$CHAT_URL" "$E2E_TMP"
check "the ready line was printed" grep -q "serving .* at http://127.0.0.1" "$CHAT_LOG"
e2e_done
