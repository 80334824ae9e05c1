#!/usr/bin/env bash
# test_serve_admission.sh — memory admission on a real server (curl + python):
# --memory-budget edge cases (exactly fits, one token over -> clamped with
# finish_reason "length", prompt alone over -> 400 memory_admission in the
# OpenAI, Anthropic and Responses shapes, model alone over -> start-up refused),
# KILN_CONTEXT_LIMIT good and bad values, /stats admission and GET /fit (the same
# numbers as `kiln fit --json`), --kv-budget queueing (FIFO, nobody overtakes,
# all complete) and the process's measured peak RSS (VmHWM) within the budget.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3

# A ~19 MB bf16 qwen3 (6 layers, hidden 384): big enough that the budget matters.
M="$KILN_BINARY_DIR/test-models/e2e-admit-qwen3-bf16"
if [ ! -f "$M/model.safetensors" ]; then
  mkdir -p "$KILN_BINARY_DIR/test-models"
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch qwen3 --dtype bf16 --shape custom --hidden 384 \
    --layers 6 --heads 6 --kv-heads 2 --head-dim 64 --ffn 1024 --out "$M.tmp$$" >/dev/null &&
    { mv -T "$M.tmp$$" "$M" 2>/dev/null || rm -rf "$M.tmp$$"; }
fi
[ -f "$M/model.safetensors" ] || e2e_skip "cannot make the test model"

jget() { $PY -c 'import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split("."): v=v[k]
print("null" if v is None else v)' "$1"; }
code() { curl -s -o "$E2E_TMP/body" -w '%{http_code}' "$@"; }
is() { [ "$1" = "$2" ] || { echo "  got '$1', expected '$2': $(head -c 400 "$E2E_TMP/body" 2>/dev/null)"; return 1; }; }
ids() { $PY -c 'import sys; n=int(sys.argv[1]); print(",".join(str(10 + i % 400) for i in range(n)))' "$1"; }
complete() { # complete URL N_PROMPT MAX_TOKENS [extra json]
  local mt=""; [ "$3" != - ] && mt=",\"max_tokens\":$3"
  code -d "{\"prompt\":[$(ids "$2")]$mt,\"temperature\":0,\"ignore_eos\":true${4:-}}" "$1/v1/completions"
}
G=(--threads 2 --batch 2)

# ---------------------------------------------------------------- model alone over
out=$("$KILN_BIN" serve --model "$M" --port 0 "${G[@]}" --memory-budget 0.03 2>&1); rc=$?
check "model alone over the budget: start-up refused" [ $rc -ne 0 ]
check "refusal names weights, overhead and budget" \
  bash -c 'grep -q "leaves no room for any context" <<<"$1" && grep -q "weights 0.019 GB" <<<"$1" && grep -q "budget of 0.030 GB" <<<"$1"' _ "$out"
out=$("$KILN_BIN" serve --model "$M" --port 0 --memory-budget -1 2>&1); rc=$?
check "negative budget refused" [ $rc -eq 2 ]

# ---------------------------------------------------------------- KILN_CONTEXT_LIMIT bad values
for bad in abc 0 1 -3 12x 1e3; do
  out=$(KILN_CONTEXT_LIMIT=$bad "$KILN_BIN" serve --model "$M" --port 0 2>&1); rc=$?
  check "KILN_CONTEXT_LIMIT=$bad refuses start-up" bash -c '[ $1 -eq 2 ] && grep -q "KILN_CONTEXT_LIMIT must be" <<<"$2"' _ $rc "$out"
done

# ---------------------------------------------------------------- the budget's limit
# The fixed part (weights, scratch, logits, process overhead) from kiln fit; the
# budget then leaves exactly 13 KV blocks: one sequence of 208 tokens.
FIT=$("$KILN_BIN" fit --model "$M" --ctx 512 "${G[@]}" --budget 1 --bandwidth 1 --json)
fixed=$(( $(jget budget_bytes <<<"$FIT") - $(jget usable_bytes <<<"$FIT") ))
blk=$(( $(jget kv_bytes_per_token <<<"$FIT") * 16 + 64 ))
BUDGET=$($PY -c "print('%.9f' % (($fixed + 13 * $blk) / 1e9))")
e2e_server S --model "$M" --ctx 512 "${G[@]}" --memory-budget "$BUDGET" || exit 1
U=$S_URL
curl -s "$U/stats" > "$E2E_TMP/stats"
L=$(jget admission.enforced_context_tokens < "$E2E_TMP/stats")
echo "  budget $BUDGET GB: enforced context $L, max safe $(jget admission.max_safe_context < "$E2E_TMP/stats")"
check "enforced limit = max safe context of the budget (13 blocks)" bash -c '[ "$1" -ge 200 ] && [ "$1" -le 208 ]' _ "$L"
check "stats: source memory_budget" is "$(jget admission.context_limit_source < "$E2E_TMP/stats")" memory_budget
check "stats: memory_budget_bytes" is "$(jget admission.memory_budget_bytes < "$E2E_TMP/stats")" "$($PY -c "print(int($BUDGET * 1e9))")"
check "stats: kv_budget_bytes null" is "$(jget admission.kv_budget_bytes < "$E2E_TMP/stats")" null
check "stats: weights_bytes" is "$(jget admission.weights_bytes < "$E2E_TMP/stats")" "$(jget weights_bytes <<<"$FIT")"
check "stats: usable_bytes = budget - fixed" bash -c '[ $(( $1 - $2 )) -ge 0 ] && [ $(( $1 - $2 )) -lt $3 ]' _ \
  "$(jget admission.usable_bytes < "$E2E_TMP/stats")" $((13 * blk)) "$blk"

# GET /fit is `kiln fit --json` for the served model and options
curl -s "$U/fit" > "$E2E_TMP/fit"
"$KILN_BIN" fit --model "$M" --ctx 512 "${G[@]}" --budget "$BUDGET" --bandwidth 1 --json > "$E2E_TMP/fitcli"
check "GET /fit equals kiln fit --json (bandwidth and the server's measured process_bytes aside)" $PY - "$E2E_TMP/fit" "$E2E_TMP/fitcli" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert 1 << 20 < a.pop("process_bytes") < a["overhead_bytes"], a
for k in ("bandwidth_gb_s", "predicted_decode_tok_s"):
    assert a.pop(k) is None, k
    b.pop(k)
assert a == b, (a, b)
assert a["max_safe_context"] >= 200 and a["kv_blocks"] >= 13, a
EOF

P=20
check "exactly fits: 200" is "$(complete "$U" $P $((L - P)))" 200
check "exactly fits: all tokens, finish length" bash -c "$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r[\"usage\"][\"completion_tokens\"]==int(sys.argv[2]), r[\"usage\"]; assert r[\"choices\"][0][\"finish_reason\"]==\"length\"' $E2E_TMP/body $((L - P))"
check "one token over: 200 (clamped, not refused)" is "$(complete "$U" $P $((L - P + 1)))" 200
check "one token over: completion_tokens == clamp" bash -c "$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r[\"usage\"][\"completion_tokens\"]==int(sys.argv[2]), r[\"usage\"]; assert r[\"choices\"][0][\"finish_reason\"]==\"length\"' $E2E_TMP/body $((L - P))"
check "max_tokens unset: runs to the limit" is "$(complete "$U" $((L - 5)) -)" 200
check "max_tokens unset: 5 tokens of room" bash -c "$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r[\"usage\"][\"completion_tokens\"]==5, r[\"usage\"]' $E2E_TMP/body"
# streamed clamp: the final chunk says length, the usage chunk the clamp
vcurl -sN -d "{\"prompt\":[$(ids $((L - 7)))],\"max_tokens\":1000,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$U/v1/completions" > "$E2E_TMP/sse"
check "stream: clamped to 7 with finish_reason length" $PY - "$E2E_TMP/sse" <<'EOF'
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: {")]
assert [c["choices"][0]["finish_reason"] for c in ev if c.get("choices") and c["choices"][0].get("finish_reason")] == ["length"], ev[-3:]
assert ev[-1]["usage"]["completion_tokens"] == 7, ev[-1]
EOF
check "prompt leaving 1 token: 200" is "$(complete "$U" $((L - 1)) 50)" 200
check "prompt alone over: 400" is "$(complete "$U" "$L" 10)" 400
check "prompt alone over: memory_admission / context_over_budget with numbers" $PY - "$E2E_TMP/body" "$L" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["type"] == "memory_admission" and e["code"] == "context_over_budget", e
assert sys.argv[2] in e["message"] and "--memory-budget" in e["message"] and "weights" in e["message"], e
EOF
LONG=$($PY -c 'print(" ".join(["once upon a time there was a girl"] * 60))')
check "chat: prompt alone over -> 400" is "$(code -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$LONG\"}],\"max_tokens\":5}" "$U/v1/chat/completions")" 400
check "chat: memory_admission shape" $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert (e["type"],e["code"])==("memory_admission","context_over_budget"), e; assert set(e)=={"message","type","param","code"}' "$E2E_TMP/body"
check "anthropic: prompt alone over -> 400" is "$(code -d "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"$LONG\"}],\"max_tokens\":5}" "$U/v1/messages")" 400
check "anthropic: its error shape, memory_admission" $PY -c 'import json,sys; b=json.load(open(sys.argv[1])); assert b["type"]=="error", b; e=b["error"]; assert (e["type"],e["code"])==("memory_admission","context_over_budget"), e; assert "tokens" in e["message"]' "$E2E_TMP/body"
check "responses: prompt alone over -> 400" is "$(code -d "{\"input\":\"$LONG\",\"max_output_tokens\":5}" "$U/v1/responses")" 400
check "responses: memory_admission shape" $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert (e["type"],e["code"])==("memory_admission","context_over_budget"), e' "$E2E_TMP/body"
check "chat within the limit: 200 clamped" is "$(code -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":100000,"temperature":0}' "$U/v1/chat/completions")" 200
check "SIGTERM exits 0" e2e_stop "$S_PID"

# ---------------------------------------------------------------- KILN_CONTEXT_LIMIT narrows, never enlarges
KILN_CONTEXT_LIMIT=100 e2e_server E --model "$M" "${G[@]}" --memory-budget "$BUDGET" --ctx 512 || exit 1
curl -s "$E_URL/stats" > "$E2E_TMP/stats"
check "env narrows: enforced 100" is "$(jget admission.enforced_context_tokens < "$E2E_TMP/stats")" 100
check "env narrows: source KILN_CONTEXT_LIMIT" is "$(jget admission.context_limit_source < "$E2E_TMP/stats")" KILN_CONTEXT_LIMIT
check "env narrows: max safe context unchanged" is "$(jget admission.max_safe_context < "$E2E_TMP/stats")" "$L"
check "env limit: prompt of 100 -> 400 memory_admission" bash -c "[ \"\$(vcurl -s -o $E2E_TMP/body -w '%{http_code}' -d '{\"prompt\":[$(ids 100)],\"max_tokens\":3}' $E_URL/v1/completions)\" = 400 ] && grep -q KILN_CONTEXT_LIMIT $E2E_TMP/body && grep -q context_over_budget $E2E_TMP/body"
e2e_stop "$E_PID"
KILN_CONTEXT_LIMIT=100000 e2e_server E2 --model "$M" "${G[@]}" --memory-budget "$BUDGET" --ctx 512 || exit 1
check "env never enlarges" is "$(curl -s "$E2_URL/stats" | jget admission.enforced_context_tokens)" "$L"
e2e_stop "$E2_PID"

# ---------------------------------------------------------------- no budget: nothing refused on an estimate
e2e_server N --model "$M" "${G[@]}" || exit 1
curl -s "$N_URL/stats" > "$E2E_TMP/stats"
check "no budget: enforced null, budget null, usable null" $PY -c 'import json,sys; a=json.load(open(sys.argv[1]))["admission"]; assert a["enforced_context_tokens"] is None and a["memory_budget_bytes"] is None and a["usable_bytes"] is None and a["kv_budget_bytes"] is None, a' "$E2E_TMP/stats"
check "no budget: a long request is served" is "$(complete "$N_URL" 600 40)" 200
e2e_stop "$N_PID"

# ---------------------------------------------------------------- --kv-budget queueing
# 1 unit = 128 positions (8 prompt + 120 max_tokens) x 6144 bytes; budget 2.5 units.
# A,B: 1 unit; C: 2 units (waits for both); D,E,F: 1 unit (must not overtake C).
KVB=$($PY -c 'print("%.9f" % (2.5 * 128 * 6144 / 1e9))')
e2e_server K --model "$M" --threads 1 --batch 8 --ctx 512 --kv-budget "$KVB" || exit 1
check "kv: over the budget alone -> 400" is "$(complete "$K_URL" 8 400)" 400
check "kv: memory_admission / kv_over_budget" $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert (e["type"],e["code"])==("memory_admission","kv_over_budget"), e; assert "--kv-budget" in e["message"]' "$E2E_TMP/body"
check "kv: stats kv_budget_bytes" is "$(curl -s "$K_URL/stats" | jget admission.kv_budget_bytes)" "$($PY -c "print(int($KVB * 1e9))")"
$PY - "$K_URL" > "$E2E_TMP/kvq" 2>&1 <<'EOF'
import json, sys, threading, time, urllib.request
url = sys.argv[1]
mts = [120, 120, 248, 120, 120, 120]
res = [None] * len(mts)
samples = []
stop = False
def run(i):
    body = json.dumps({"prompt": [10 + i] * 8, "max_tokens": mts[i], "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    t0 = time.time(); first = None; n = 0; fin = None
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", body), timeout=300) as r:
        for line in r:
            if not line.startswith(b"data: {"): continue
            c = json.loads(line[6:])
            if c.get("usage"): n = c["usage"]["completion_tokens"]
            if c.get("choices") and c["choices"][0].get("finish_reason"): fin = c["choices"][0]["finish_reason"]
            elif c.get("choices") and first is None: first = time.time()
    res[i] = dict(submit=t0, first=first, done=time.time(), n=n, finish=fin)
def poll():
    while not stop:
        s = json.load(urllib.request.urlopen(url + "/stats"))
        samples.append((s["batch"]["active"], s["batch"]["queued"], s["admission"]["kv_projected_bytes"]))
        time.sleep(0.03)
def total():
    return json.load(urllib.request.urlopen(url + "/stats"))["requests"]["total"]
p = threading.Thread(target=poll); p.start()
ts = []
base_total = total()
for i in range(len(mts)):
    # submit the next one as soon as the engine has queued this one: the
    # arrival order is fixed and the requests overlap however fast the
    # machine decodes (a fixed 0.3 s spacing let a quiet machine finish each
    # request before the next arrived)
    t = threading.Thread(target=run, args=(i,)); t.start(); ts.append(t)
    t_end = time.time() + 10
    while total() < base_total + i + 1 and time.time() < t_end:
        time.sleep(0.002)
for t in ts: t.join(300)
stop = True; p.join()
base = res[0]["submit"]
for i, r in enumerate(res):
    print("req %d: max_tokens %d submit %.2fs first %.2fs done %.2fs tokens %d finish %s" % (
        i, mts[i], r["submit"] - base, r["first"] - base, r["done"] - base, r["n"], r["finish"]))
budget = 2.5 * 128 * 6144
print("stats samples %d: max active %d, max queued %d, max projected %d (budget %d)" % (
    len(samples), max(a for a, _, _ in samples), max(q for _, q, _ in samples), max(k for _, _, k in samples), budget))
assert all(r["n"] == mts[i] and r["finish"] == "length" for i, r in enumerate(res)), "all complete"
firsts = [r["first"] for r in res]
# requests admitted in the same step (D and E once C is done) may reach their
# clients in either order: ties within 0.1 s are not reorderings
assert all(b >= a - 0.1 for a, b in zip(firsts, firsts[1:])), "FIFO: first tokens in submission order"
assert res[3]["first"] > res[2]["first"], "D does not overtake C"
assert res[2]["first"] > min(res[0]["done"], res[1]["done"]) - 0.05, "C waited for A/B"
assert max(k for _, _, k in samples) <= budget, "projection within the budget"
assert max(a for a, _, _ in samples) <= 2 and max(q for _, q, _ in samples) >= 1, "queued, at most 2 running"
print("kv queue ok")
EOF
cat "$E2E_TMP/kvq"
check "kv-budget: 6 concurrent, all complete, FIFO, at most 2 running, no deadlock" grep -q "kv queue ok" "$E2E_TMP/kvq"
check "kv: stats back to zero projected" is "$(curl -s "$K_URL/stats" | jget admission.kv_projected_bytes)" 0
check "kv: waits counted" bash -c '[ "$(curl -s "$1/stats" | '"$PY"' -c "import json,sys; print(json.load(sys.stdin)[\"admission\"][\"kv_budget_waits\"])")" -ge 2 ]' _ "$K_URL"
e2e_stop "$K_PID"

# ---------------------------------------------------------------- measured peak RSS within the budget
# batch 4 x ctx 512 would need 132 blocks; the budget leaves 60: the pool is
# sized inside it, 6 concurrent requests run it full (and preempt), and the
# process's peak resident set (VmHWM: weights mapped + heap + stacks) stays under it.
FIT4=$("$KILN_BIN" fit --model "$M" --ctx 512 --threads 2 --batch 4 --budget 1 --bandwidth 1 --json)
# (kiln fit counts a default 64 MiB responses store; this server keeps 1 MiB)
f4=$(( $(jget budget_bytes <<<"$FIT4") - $(jget usable_bytes <<<"$FIT4") - 63 * 1048576 ))
RB=$($PY -c "print('%.9f' % (($f4 + 60 * $blk) / 1e9))")
e2e_server R --model "$M" --ctx 512 --threads 2 --batch 4 --memory-budget "$RB" --responses-store-mib 1 || exit 1
check "rss server: pool of 60 blocks inside the budget" is "$(curl -s "$R_URL/stats" | jget kv.blocks_total)" 60
CURLS=()
for i in 1 2 3 4 5 6; do
  vcurl -s -o "$E2E_TMP/r$i" -d "{\"prompt\":[$(ids $((100 + 40 * i)))],\"max_tokens\":300,\"temperature\":0,\"ignore_eos\":true}" "$R_URL/v1/completions" &
  CURLS+=($!)
done
wait "${CURLS[@]}"
check "rss load: all 6 answered 200" bash -c 'for i in 1 2 3 4 5 6; do grep -q "\"finish_reason\"" "$1/r$i" || exit 1; done' _ "$E2E_TMP"
hwm=$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$R_PID/status")
rbytes=$($PY -c "print(int($RB * 1e9))")
pre=$(curl -s "$R_URL/stats" | jget engine.preemptions)
echo "  measured VmHWM $hwm bytes vs --memory-budget $rbytes bytes ($((hwm * 100 / rbytes))%), preemptions $pre"
check "measured peak RSS (VmHWM) within --memory-budget" [ "$hwm" -le "$rbytes" ]
check "SIGTERM exits 0" e2e_stop "$R_PID"
e2e_done
