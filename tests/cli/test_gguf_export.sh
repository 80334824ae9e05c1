#!/usr/bin/env bash
# test_gguf_export.sh — tools/gguf-export and the bench/peer smoke.
#
# 1. gguf-export --self-test: Q8_0 / Q4_0 blocks by hand (d, rounding, nibble order, clamp),
#    random round trips within the format's error bound, the RoPE row permutation, GGUF
#    writer -> reader (kv types, alignment, data) and rejection of damaged files.
# 2. Tiny llama (llama3 RoPE, tied), qwen2 (biases), qwen3 (q/k norms), mistral snapshots
#    exported to F16, Q8_0 and Q4_0 and read back with --check --model: header, tensor infos,
#    alignment, sizes, hyperparameters, every tensor dequantized (Q/K un-permuted) vs the
#    safetensors within the format's error.
# 3. With node-llama-cpp installed (bench/peer/setup): llama.cpp on the F16 GGUF gives kiln's
#    greedy tokens and log-probabilities (bench/peer/crosscheck) for each architecture, and a
#    GGUF without the Q/K permutation or the llama3 RoPE factors is caught. Skipped (with a
#    message) when node-llama-cpp is absent.
# 4. bench/peer/run --smoke prints its table (kiln figures, and llama.cpp's when installed).
# Env: KILN_BIN, KILN_SOURCE_DIR, KILN_BINARY_DIR (set by CTest).
set -u
SRC=${KILN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${KILN_BINARY_DIR:-$SRC/build}
export KILN_BIN=${KILN_BIN:-$BIN/kiln}
PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
EXP="$PY $SRC/tools/gguf-export"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { # check "description" command...
    local d=$1; shift
    local log
    if log=$("$@" 2>&1); then ok "$d"; else bad "$d"; fi
    echo "$log" | tail -4 | sed 's/^/     /'
}

if ! $PY -c 'import numpy' 2>/dev/null; then
    echo "SKIP: /usr/bin/python3 has no numpy (apt-get install python3-numpy)"
    exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

check "gguf-export --self-test" $EXP --self-test

MK="$PY $SRC/tools/make-test-model"
$MK --arch llama --dtype bf16 --shape small --rope-scaling llama3 --layers 2 --tie --out "$T/llama" >/dev/null
$MK --arch qwen2 --dtype f16 --out "$T/qwen2" >/dev/null
$MK --arch qwen3 --dtype f32 --out "$T/qwen3" >/dev/null
$MK --arch mistral --dtype f16 --no-tie --out "$T/mistral" >/dev/null
for m in llama qwen2 qwen3 mistral; do
    for t in f16 q8_0 q4_0; do
        if $EXP --model "$T/$m" --type $t --out "$T/$m-$t.gguf" >/dev/null; then
            check "$m $t: written, read back, every tensor within the $t error" \
                $EXP --check "$T/$m-$t.gguf" --model "$T/$m"
        else
            bad "$m $t: export failed"
        fi
    done
done
# the llama file carries what llama.cpp needs: permuted Q/K rows, rope_freqs, no output.weight (tied)
check "llama GGUF layout (rope_freqs, tied output, tokenizer keys)" $PY - "$SRC/tools" "$T/llama-f16.gguf" <<'EOF'
import importlib.machinery, importlib.util, sys
sys.path.insert(0, sys.argv[1])
ld = importlib.machinery.SourceFileLoader("gx", sys.argv[1] + "/gguf-export")
spec = importlib.util.spec_from_loader("gx", ld)
gx = importlib.util.module_from_spec(spec)
ld.exec_module(gx)
r = gx.GGUFReader(sys.argv[2])
assert r.kv["general.architecture"] == "llama"
assert "rope_freqs.weight" in r.tensors and r.tensors["rope_freqs.weight"]["ne"] == [16]
assert "output.weight" not in r.tensors
assert r.kv["tokenizer.ggml.model"] == "gpt2" and r.kv["tokenizer.ggml.pre"] == "llama-bpe"
toks, types = r.kv["tokenizer.ggml.tokens"], r.kv["tokenizer.ggml.token_type"]
assert len(toks) == len(types) == r.kv["llama.vocab_size"]
assert toks[r.kv["tokenizer.ggml.bos_token_id"]] == "<|begin_of_text|>" and types[r.kv["tokenizer.ggml.bos_token_id"]] == 3
assert toks[-1].startswith("[PAD") and types[-1] == 5
assert len(r.kv["tokenizer.ggml.merges"]) > 100 and r.kv["tokenizer.ggml.add_bos_token"] is True
print("layout ok")
EOF
# a wrong file must fail --check
$EXP --model "$T/llama" --type q4_0 --out "$T/bad.gguf" --broken no-permute >/dev/null
if $EXP --check "$T/bad.gguf" --model "$T/llama" >/dev/null 2>&1; then
    bad "--check accepts Q/K rows in HF order"
else
    ok "--check rejects Q/K rows in HF order"
fi

CC="$PY $SRC/bench/peer/crosscheck"
if [ -f "$SRC/bench/peer/node_modules/node-llama-cpp/package.json" ]; then
    # 300-token prompts: the llama3 low-frequency factors change the logits past a few hundred positions
    check "llama.cpp == kiln: llama (llama3 RoPE, bf16 -> F16)" $CC --model "$T/llama" --prompt-tokens 300
    for m in qwen2 qwen3 mistral; do
        check "llama.cpp == kiln: $m" $CC --model "$T/$m" --prompt-tokens 100
    done
    for b in no-permute no-rope-freqs; do
        $EXP --model "$T/llama" --type f16 --out "$T/$b.gguf" --broken $b >/dev/null
        if $CC --model "$T/llama" --prompt-tokens 300 --gguf "$T/$b.gguf" >"$T/cc.log" 2>&1; then
            bad "crosscheck misses a GGUF with $b"
            tail -3 "$T/cc.log"
        else
            ok "crosscheck catches a GGUF with $b"
        fi
    done
else
    echo "SKIP llama.cpp cross-check: node-llama-cpp not installed (bench/peer/setup)"
fi

if out=$($PY "$SRC/bench/peer/run" --smoke 2>"$T/run.err"); then
    echo "$out" | sed 's/^/     /'
    rows=$(echo "$out" | grep -c '^| .*g64\|^| bf16')
    if [ "$rows" = 3 ] && echo "$out" | grep -q '^load average'; then
        ok "bench/peer/run --smoke: 3 rows"
    else
        bad "bench/peer/run --smoke: table"
    fi
else
    bad "bench/peer/run --smoke exited $?"
    tail -5 "$T/run.err"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
