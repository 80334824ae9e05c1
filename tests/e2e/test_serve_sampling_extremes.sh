#!/usr/bin/env bash
# test_serve_sampling_extremes.sh — extreme but valid sampler values over HTTP
# (docs/engine.md, Sampling): top_p 1e-300, temperature 1e-30 / 1e-300,
# min_p 1, top_k 1 and 2^31-1, penalties at the API's bounds, logit_bias
# +-100: every answer is a 200 with text and finite logprobs, and the
# settings whose limit is greedy give the greedy text; a model whose logits
# hold NaN: the NaN token is never sampled, and an all-NaN row is an error.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
e2e_server S --model "$STORIES" --ctx 256 || exit 1

# gen EXTRA_JSON -> prints "text" (exit 1 on a non-200, a missing text, or a
# logprob that is not a finite number)
gen() {
  vcurl -s -w '\n%{http_code}' "$S_URL/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"seed\": 7, \"logprobs\": 3, $1}" |
    $PY -c '
import json, math, sys
body, code = sys.stdin.read().rsplit("\n", 1)
if code != "200":
    print("HTTP " + code + ": " + body[:300], file=sys.stderr); sys.exit(1)
def no_nan(c): raise ValueError("non-finite number " + c)
d = json.loads(body, parse_constant=no_nan)
ch = d["choices"][0]
lp = ch["logprobs"]
vals = lp["token_logprobs"] + [v for t in lp["top_logprobs"] for v in t.values()]
if not vals or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
    print("bad logprobs", file=sys.stderr); sys.exit(1)
print(json.dumps(ch["text"]))'
}

greedy=$(gen '"temperature": 0') || { check "greedy reference" false; e2e_done; exit 1; }
check "greedy reference ($greedy)" [ -n "$greedy" ]
for extra in '"temperature": 1, "top_p": 1e-300' '"temperature": 1e-30' '"temperature": 1e-300' \
  '"temperature": 1.5, "top_k": 1' '"temperature": 2, "min_p": 1' \
  '"temperature": 1, "top_p": 1e-300, "min_p": 1, "top_k": 1'; do
  out=$(gen "$extra")
  check "{$extra}: 200, finite logprobs, the greedy text" [ "$out" = "$greedy" ]
done
for extra in '"temperature": 2, "top_k": 2147483647' '"temperature": 2, "top_p": 0.9999999' \
  '"temperature": 1, "repetition_penalty": 0.001' '"temperature": 1, "repetition_penalty": 100' \
  '"temperature": 1, "presence_penalty": 2, "frequency_penalty": 2' \
  '"temperature": 1, "presence_penalty": -2, "frequency_penalty": -2' \
  '"temperature": 1, "min_p": 1e-300' \
  '"temperature": 1, "logit_bias": {"300": -100, "301": -100, "302": 100}'; do
  out=$(gen "$extra")
  check "{$extra}: 200 with text and finite logprobs" [ -n "$out" ]
done
# +100 on one token, greedy: that token every time (bias dominates the logits)
out=$(gen '"temperature": 0, "logit_bias": {"400": 100}')
one=$(vcurl -s "$S_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0, "logit_bias": {"400": 100}}' |
  $PY -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))')
check "logit_bias +100 forces its token at every step" \
  $PY -c "import json,sys; o=json.loads(sys.argv[1]); t=json.loads(sys.argv[2]); sys.exit(0 if t and o == t * 24 else 1)" "$out" "$one"
# outside the API's ranges: a 400 naming the parameter, as before
code=$(vcurl -s -o "$E2E_TMP/b.json" -w '%{http_code}' "$S_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "x", "max_tokens": 1, "logit_bias": {"5": 1e30}}')
check "logit_bias 1e30 is a 400 naming logit_bias ($code)" bash -c "[ $code = 400 ] && grep -q logit_bias '$E2E_TMP/b.json'"
code=$(vcurl -s -o "$E2E_TMP/b.json" -w '%{http_code}' "$S_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "x", "max_tokens": 1, "top_p": 0}')
check "top_p 0 is a 400 naming top_p ($code)" bash -c "[ $code = 400 ] && grep -q top_p '$E2E_TMP/b.json'"
check "/stats counts no NaN rows" \
  bash -c "curl -s '$S_URL/stats' | $PY -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[\"engine\"][\"nan_logit_rows\"] == 0 else 1)'"
ids=$(curl -s "$S_URL/tokenize" -H 'Content-Type: application/json' -d '{"prompt": "Once upon a time"}' |
  $PY -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(map(str, d.get("tokens") or d.get("ids"))))')
e2e_stop "$S_PID"

# NaN logits: a copy of the model whose embedding row of one token (the last of
# "Once upon a time") is NaN. Its embeddings are tied, so that token's logit is
# NaN at every step (never sampled, counted, one WARN) while the others are
# fine; a prompt holding the token makes every logit NaN: a clear error, no crash.
T=${ids##* }
NANM="$E2E_TMP/nan-model"
mkdir -p "$NANM"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json; do ln -s "$STORIES/$f" "$NANM/$f"; done
$PY - "$STORIES/model.safetensors" "$NANM/model.safetensors" "$T" <<'PY'
import json, struct, sys
src, dst, tok = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
e = h["model.embed_tokens.weight"]
assert e["dtype"] == "F32"
dim = e["shape"][1]
at = 8 + n + e["data_offsets"][0] + tok * dim * 4
b[at:at + dim * 4] = struct.pack("<f", float("nan")) * dim
open(dst, "wb").write(b)
PY
e2e_server N --model "$NANM" --ctx 256 || exit 1
out=$(vcurl -s -w '\n%{http_code}' "$N_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a", "max_tokens": 16, "temperature": 1, "seed": 3, "logprobs": 2}')
check "NaN logits for one token (id $T): still a 200" [ "${out##*$'\n'}" = 200 ]
check "...with finite logprobs" $PY -c '
import json, math, sys
def no_nan(c): raise ValueError(c)
d = json.loads(sys.argv[1].rsplit("\n", 1)[0], parse_constant=no_nan)
lp = d["choices"][0]["logprobs"]["token_logprobs"]
sys.exit(0 if lp and all(math.isfinite(v) for v in lp) else 1)' "$out"
nan_rows=$(curl -s "$N_URL/stats" | $PY -c 'import json,sys; print(json.load(sys.stdin)["engine"]["nan_logit_rows"])')
check "...and the NaN rows are counted ($nan_rows)" [ "$nan_rows" -ge 16 ]
check "...with one WARN line" [ "$(grep -c 'produced NaN logits' "$N_LOG")" = 1 ]
code=$(vcurl -s -o "$E2E_TMP/n.json" -w '%{http_code}' "$N_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 4}')
check "a prompt holding the NaN token: an error that says so ($code)" \
  bash -c "[ $code = 500 ] && grep -q 'no finite logit' '$E2E_TMP/n.json'"
r=$(vcurl -s -o /dev/null -w '%{http_code}' "$N_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a", "max_tokens": 4}')
check "the server keeps serving ($r)" [ "$r" = 200 ]
e2e_stop "$N_PID"
e2e_done
