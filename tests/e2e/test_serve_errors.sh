#!/usr/bin/env bash
# test_serve_errors.sh — HTTP-level errors with curl: 400, 401, 404, 405, 413,
# 429, all in the OpenAI error shape; the port-taken refusal.
. "$(dirname "$0")/lib.sh"
e2e_need
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
e2e_server S --model "$STORIES" --ctx 256 --api-key sekret --max-body 2000 || exit 1
U=$S_URL
code() { curl -s -o "$E2E_TMP/body" -w '%{http_code}' "$@"; }
is() { [ "$1" = "$2" ] || { echo "  got $1, expected $2: $(head -c 300 "$E2E_TMP/body")"; return 1; }; }
# the error's fields and type, and conformance to the official ErrorResponse schema (validate_api.py)
shape() { python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert set(e)=={"message","type","param","code"}, e; assert e["type"]==sys.argv[2], e' "$E2E_TMP/body" "$1" &&
          /usr/bin/python3 "$E2E_DIR/validate_api.py" --one openai ErrorResponse "$E2E_TMP/body"; }
BODY='{"prompt":"Once","max_tokens":3}'
AUTH=(-H "Authorization: Bearer sekret")

check "401 without a key" is "$(code -d "$BODY" "$U/v1/completions")" 401
check "401 shape" shape authentication_error
check "401 with a wrong key" is "$(code -H 'Authorization: Bearer nope' -d "$BODY" "$U/v1/completions")" 401
check "200 with Bearer" is "$(code "${AUTH[@]}" -d "$BODY" "$U/v1/completions")" 200
check "200 with x-api-key" is "$(code -H 'x-api-key: sekret' -d "$BODY" "$U/v1/completions")" 200
check "/health needs no key" is "$(code "$U/health")" 200
check "404 unknown route" is "$(code "${AUTH[@]}" "$U/v1/nothing")" 404
check "404 shape" shape not_found_error
check "405 wrong method" is "$(code "${AUTH[@]}" "$U/v1/completions")" 405
check "405 shape" shape invalid_request_error
check "400 invalid JSON" is "$(code "${AUTH[@]}" -d '{"prompt":' "$U/v1/completions")" 400
check "400 wrong type" is "$(code "${AUTH[@]}" -d '{"prompt":"x","max_tokens":"many"}' "$U/v1/completions")" 400
check "400 shape" shape invalid_request_error
check "400 names the param" python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["error"]["param"]=="max_tokens"' "$E2E_TMP/body"
python3 -c 'import json; print(json.dumps({"prompt":"x"*5000}))' > "$E2E_TMP/big.json"
check "413 body over --max-body" is "$(code "${AUTH[@]}" --data-binary @"$E2E_TMP/big.json" "$U/v1/completions")" 413
check "413 shape" shape invalid_request_error
check "413 chunked body over --max-body" is "$(code "${AUTH[@]}" -H 'Transfer-Encoding: chunked' --data-binary @"$E2E_TMP/big.json" "$U/v1/completions")" 413
check "server alive after errors" is "$(code "$U/health")" 200

# 429: one running, one waiting, the rest refused
e2e_server Q --model "$STORIES" --ctx 512 --batch 1 --max-queue 1 || exit 1
LONG='{"prompt":"Once","max_tokens":500,"ignore_eos":true,"temperature":0}'
CURLS=()
for i in 1 2 3 4 5 6; do
  curl -s -o "$E2E_TMP/q$i" -w '%{http_code}\n' -d "$LONG" "$Q_URL/v1/completions" > "$E2E_TMP/q$i.code" &
  CURLS+=($!)
done
wait "${CURLS[@]}"
n429=$(cat "$E2E_TMP"/q*.code | grep -c 429)
n200=$(cat "$E2E_TMP"/q*.code | grep -c 200)
echo "  queue test: $n200 x 200, $n429 x 429"
check "429 when the queue is full" [ "$n429" -ge 1 ]
check "some requests still served" [ "$n200" -ge 1 ]
check "429 shape" bash -c "grep -l '\"rate_limit_error\"' $E2E_TMP/q? >/dev/null"
check "429 body conforms to ErrorResponse" bash -c "for f in \$(grep -l '\"rate_limit_error\"' $E2E_TMP/q?); do /usr/bin/python3 '$E2E_DIR/validate_api.py' --one openai ErrorResponse \$f || exit 1; done"

# a taken port is refused quickly with a clear message
PORT=${Q_URL##*:}
out=$("$KILN_BIN" serve --model "$STORIES" --port "$PORT" 2>&1); rc=$?
check "port taken: non-zero exit" [ $rc -ne 0 ]
check "port taken: clear message" grep -q "already in use" <<<"$out"
check "SIGTERM exits 0" e2e_stop "$S_PID"
e2e_done
