#!/usr/bin/env bash
# test_serve_get.sh — `kiln get` against a local mock hub (tests/cli/serve_mock_hub.py):
# download into the HF cache layout, resume, sha256 check, offline and 404
# errors; then `kiln serve` resolving a repo id from the cache, downloading one that is
# missing (progress lines, --offline refusal), no --model serving the built-in
# stories260K, `kiln ls` and `kiln rm`.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
KILN_SOURCE_DIR="${KILN_SOURCE_DIR:-$HERE/../..}"
KILN_BIN="${KILN_BIN:-$KILN_SOURCE_DIR/build/kiln}"
KILN_SHARED_DIR="${KILN_SHARED_DIR:-$KILN_SOURCE_DIR/../shared}"
MODEL="$KILN_SHARED_DIR/models/stories260K"
PASS=0; FAIL=0
check() { local n=$1; shift; if "$@"; then PASS=$((PASS+1)); echo "ok   $n"; else FAIL=$((FAIL+1)); echo "FAIL $n"; fi; }
[ -x "$KILN_BIN" ] && [ -d "$MODEL" ] && command -v python3 >/dev/null || { echo "SKIP: needs kiln, python3 and $MODEL"; echo "0 passed, 0 failed"; exit 0; }
T=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
python3 "$HERE/serve_mock_hub.py" "$MODEL" "$T/port" "$T/hub.log" & PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; sleep 0.05; done
export KILN_HF_ENDPOINT="http://127.0.0.1:$(cat "$T/port")"
export HF_HOME="$T/hf" HF_HUB_CACHE=""
SNAP="$T/hf/hub/models--test-org--tiny/snapshots/0123456789abcdef0123456789abcdef01234567"

# resume: a partial file left by an interrupted download
mkdir -p "$SNAP"
head -c 4000 "$MODEL/model.safetensors" > "$SNAP/model.safetensors.incomplete"
out=$("$KILN_BIN" get test-org/tiny --quiet 2>&1); rc=$?
check "kiln get exits 0" [ $rc -eq 0 ]
check "prints the snapshot folder" [ "$out" = "$SNAP" ]
for f in config.json tokenizer.json model.safetensors generation_config.json; do
  check "$f equals the source" cmp -s "$MODEL/$f" "$SNAP/$f"
done
check "refs/main holds the commit" grep -qx 0123456789abcdef0123456789abcdef01234567 "$T/hf/hub/models--test-org--tiny/refs/main"
check "*.bin is skipped" [ ! -e "$SNAP/pytorch_model.bin" ]
check "no .incomplete left" bash -c "! ls $SNAP/*.incomplete 2>/dev/null | grep -q ."
check "the partial file was resumed with a Range request" grep -q "model.safetensors range=bytes=4000-" "$T/hub.log"
lines=$(wc -l < "$T/hub.log")
"$KILN_BIN" get test-org/tiny --quiet >/dev/null 2>&1
check "a second get downloads nothing" [ "$(grep -c resolve "$T/hub.log")" -eq "$(head -n "$lines" "$T/hub.log" | grep -c resolve)" ]

out=$("$KILN_BIN" get test-org/corrupt --quiet 2>&1); rc=$?
check "sha256 mismatch fails" [ $rc -ne 0 ]
check "sha256 mismatch is explained" grep -q "sha256" <<<"$out"
out=$("$KILN_BIN" get test-org/missing --quiet 2>&1); rc=$?
fails_with() { [ "$1" -ne 0 ] && grep -q "$2" <<<"$3"; }
check "unknown repo fails clearly" fails_with $rc "not found" "$out"
out=$(KILN_HF_ENDPOINT=http://127.0.0.1:1 "$KILN_BIN" get test-org/other --quiet 2>&1); rc=$?
check "offline fails clearly" fails_with $rc "offline" "$out"
out=$("$KILN_BIN" get 2>&1); rc=$?
check "no repo id is a usage error" [ $rc -eq 2 ]

# kiln serve with a repo id from the cache, and with no --model at all
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
serve_ok() { # serve_ok ID [flags]: serves and /v1/models names ID
  local want=$1; shift
  "$KILN_BIN" serve --port "$PORT" --threads 1 --data-dir "" "$@" > "$T/serve.out" 2>&1 & local pid=$!
  local ok=1
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && { ok=0; break; }; sleep 0.05; done
  [ $ok = 0 ] && curl -s "http://127.0.0.1:$PORT/v1/models" | grep -q "\"id\":\"$want\"" || ok=1
  kill -TERM $pid; wait $pid || ok=1
  return $ok
}
check "serve --model ORG/NAME resolves from the cache" serve_ok test-org/tiny --model test-org/tiny
check "serve without --model serves the built-in stories260K" serve_ok stories260K
check "... and says so" grep -q "using the built-in stories260K" "$T/serve.out"
check "serve without --model needs no network" serve_ok stories260K --offline

# kiln ls: the built-in model and the cached one, with format, architecture, fit
out=$("$KILN_BIN" ls 2>&1); rc=$?
check "kiln ls exits 0" [ $rc -eq 0 ]
check "kiln ls lists the cached repo" grep -qE "^test-org/tiny +1\.[0-9] MB +f32 +LlamaForCausalLM +yes +yes" <<<"$out"
check "kiln ls lists the built-in model first" bash -c "sed -n 2p <<<'$out' | grep -qE '^stories260K .*yes +yes'"
mkdir -p "$T/models/bad"; echo '{"architectures": ["MambaForCausalLM"], "model_type": "mamba"}' > "$T/models/bad/config.json"
cp -r "$MODEL" "$T/models/mine"
out=$("$KILN_BIN" ls --models-dir "$T/models" --json 2>&1)
check "kiln ls --models-dir lists a folder model" python3 -c "import json,sys; d={m['id']: m for m in json.loads(sys.argv[1])}; m=d['mine']; sys.exit(0 if m['supported'] and m['format']=='f32' and m['fits'] and m['parameters']>0 else 1)" "$out"
check "kiln ls says why a model is not supported" python3 -c "import json,sys; d={m['id']: m for m in json.loads(sys.argv[1])}; sys.exit(0 if not d['bad']['supported'] and 'Mamba' in d['bad']['why'] else 1)" "$out"

# a repo id that is not cached is downloaded by serve (progress lines when not a TTY), unless --offline
export HF_HOME="$T/hf2"
lines=$(wc -l < "$T/hub.log")
out=$("$KILN_BIN" serve --model test-org/tiny --offline --port "$PORT" 2>&1 </dev/null); rc=$?
check "--offline with a repo that is not cached fails clearly" fails_with $rc "downloads are off" "$out"
check "... without touching the network" [ "$(wc -l < "$T/hub.log")" = "$lines" ]
out=$(HF_HUB_OFFLINE=1 "$KILN_BIN" serve --model test-org/tiny --port "$PORT" 2>&1 </dev/null); rc=$?
check "HF_HUB_OFFLINE=1 refuses too" fails_with $rc "HF_HUB_OFFLINE" "$out"
check "serve --model ORG/NAME downloads what is missing" serve_ok test-org/tiny --model test-org/tiny
check "... saying so, with progress" bash -c "grep -q 'is not cached; downloading it' '$T/serve.out' && grep -qE '^test-org/tiny: 100% \(1\.0 MiB/1\.0 MiB' '$T/serve.out'"
check "... into the cache layout" cmp -s "$MODEL/model.safetensors" "$T/hf2/hub/models--test-org--tiny/snapshots/0123456789abcdef0123456789abcdef01234567/model.safetensors"

# kiln rm
out=$("$KILN_BIN" rm test-org/tiny 2>&1 </dev/null); rc=$?
check "kiln rm without --yes and no terminal refuses" bash -c "[ $rc -eq 2 ] && [ -d '$T/hf2/hub/models--test-org--tiny' ]"
out=$("$KILN_BIN" rm test-org/tiny --yes 2>&1); rc=$?
check "kiln rm --yes deletes the repo" bash -c "[ $rc -eq 0 ] && [ ! -e '$T/hf2/hub/models--test-org--tiny' ]"
check "... and the source model is untouched" cmp -s "$MODEL/model.safetensors" "$T/models/mine/model.safetensors"
out=$("$KILN_BIN" rm test-org/tiny --yes 2>&1); rc=$?
check "kiln rm of a model not in the cache fails" fails_with $rc "not in the Hugging Face cache" "$out"
out=$("$KILN_BIN" rm ../etc --yes 2>&1); rc=$?
check "kiln rm takes only ORG/NAME" [ $rc -eq 2 ]

# kiln run ORG/NAME downloads what is missing too, then chats (piped input)
out=$(printf 'Once upon a time\n/quit\n' | "$KILN_BIN" run test-org/tiny --threads 1 --max-tokens 8 --temperature 0 2>&1); rc=$?
check "kiln run ORG/NAME downloads the missing model, then answers" bash -c "[ $rc -eq 0 ] && grep -q 'is not cached; downloading it' <<<'$out' && grep -q 'kiln run: test-org/tiny' <<<'$out' && grep -qE '^\[8 tokens' <<<'$out'"
out=$(printf '/quit\n' | "$KILN_BIN" run test-org/other --offline 2>&1); rc=$?
check "kiln run --offline refuses to download" fails_with $rc "downloads are off" "$out"
out=$("$KILN_BIN" serve --model test-org/absent --port "$PORT" 2>&1 </dev/null); rc=$?
check "serve with an unknown repo fails clearly" fails_with $rc "not found" "$out"
out=$("$KILN_BIN" serve --model /nonexistent/dir --port "$PORT" 2>&1); rc=$?
check "serve with a missing folder fails" [ $rc -ne 0 ]
out=$("$KILN_BIN" serve --model "$MODEL" --thinking maybe 2>&1); rc=$?
check "bad --thinking is a usage error" [ $rc -eq 2 ]
out=$("$KILN_BIN" serve --model "$MODEL" --batch 0 2>&1); rc=$?
check "bad --batch is a usage error" [ $rc -eq 2 ]
# progress off a terminal: plain lines (a bar on a TTY; see cli_progress.h)
out=$("$KILN_BIN" quantize --model "$MODEL" --out "$T/q4" 2>&1 </dev/null)
check "kiln quantize reports its progress" grep -qE "^quantizing to 4-bit: 100% \(342 KiB/342 KiB" <<<"$out"
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
