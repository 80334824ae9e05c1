#!/usr/bin/env bash
# test_cli_bad_input.sh — the bad-input table of the engine-core issue: each
# case exits non-zero with a one-line error naming the file and the problem.
set -u
KILN=${KILN_BIN:?}
SHARED=${KILN_SHARED_DIR:-../shared}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
PY=/usr/bin/python3

# expect NAME PATTERN -- command...: non-zero exit, stderr one line matching PATTERN
expect() {
  local name=$1 pat=$2; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  local lines; lines=$(printf '%s\n' "$out" | grep -c .)
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -qE "$pat"; then
    pass=$((pass+1)); echo "ok $name"
  else
    fail=$((fail+1)); echo "not ok $name (rc=$rc): $out"
  fi
}

# a good tiny model to corrupt
SRC=$SHARED/models/stories260K
mk() { rm -rf "$T/$1"; mkdir -p "$T/$1"; cp "$SRC"/*.json "$T/$1/"; }
ST=$SRC/model.safetensors

mk trunc; head -c 1000 "$ST" > "$T/trunc/model.safetensors"
expect truncated 'model.safetensors.*' -- "$KILN" info --model "$T/trunc"

mk hdrlen; $PY - "$T/hdrlen/model.safetensors" <<'PY'
import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<Q', 1<<40) + b'{}')
PY
expect header_length_past_end 'model.safetensors.*header' -- "$KILN" info --model "$T/hdrlen"

# rewrite the header of the real file with a python edit
edit() { # edit DIR PYCODE (h = header dict, data = bytes)
  $PY - "$ST" "$T/$1/model.safetensors" "$2" <<'PY'
import json,struct,sys
src,dst,code=sys.argv[1:4]
b=open(src,'rb').read(); n=struct.unpack('<Q',b[:8])[0]
h=json.loads(b[8:8+n]); data=b[8+n:]
exec(code)
hb=json.dumps(h).encode(); hb+=b' '*((8-len(hb)%8)%8)
open(dst,'wb').write(struct.pack('<Q',len(hb))+hb+data)
PY
}
mk range; edit range 'k="model.norm.weight"; h[k]["data_offsets"]=[len(data)-4, len(data)+1020]'
expect offsets_out_of_range 'model.safetensors.*model.norm.weight' -- "$KILN" info --model "$T/range"
mk overlap; edit overlap 'a=h["model.norm.weight"]; b=h["model.layers.0.input_layernorm.weight"]; b["data_offsets"]=[a["data_offsets"][0], a["data_offsets"][0]+256]'
expect offsets_overlap 'model.safetensors.*overlap' -- "$KILN" info --model "$T/overlap"
mk shape; edit shape 'h["model.norm.weight"]["shape"]=[65]'
expect shape_times_dtype 'model.safetensors.*model.norm.weight' -- "$KILN" info --model "$T/shape"
mk dtype; edit dtype 'h["model.norm.weight"]["dtype"]="Q9"'
expect unknown_dtype 'model.safetensors.*Q9' -- "$KILN" info --model "$T/dtype"
mk missing; edit missing 'del h["model.norm.weight"]'
expect missing_tensor "model.norm.weight" -- "$KILN" info --model "$T/missing"
mk wrongshape; edit wrongshape 'h["model.norm.weight"]["shape"]=[32,2]'
expect wrong_shape_for_config "model.norm.weight.*shape" -- "$KILN" info --model "$T/wrongshape"

mk heads; cp "$ST" "$T/heads/"; $PY - "$T/heads/config.json" <<'PY'
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["num_attention_heads"]=0; json.dump(c,open(p,'w'))
PY
expect zero_heads 'config.json.*head' -- "$KILN" info --model "$T/heads"
mk hdim; cp "$ST" "$T/hdim/"; $PY - "$T/hdim/config.json" <<'PY'
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["num_attention_heads"]=7; del c["head_dim"]; json.dump(c,open(p,'w'))
PY
expect head_dim_not_dividing 'config.json' -- "$KILN" info --model "$T/hdim"
mk qbits; cp "$ST" "$T/qbits/"; $PY - "$T/qbits/config.json" <<'PY'
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["quantization"]={"group_size":64,"bits":7}; json.dump(c,open(p,'w'))
PY
expect quant_bits_unsupported 'config.json.*7' -- "$KILN" info --model "$T/qbits"
mk arch; cp "$ST" "$T/arch/"; $PY - "$T/arch/config.json" <<'PY'
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["architectures"]=["FooForCausalLM"]; c["model_type"]="foo"; json.dump(c,open(p,'w'))
PY
expect unsupported_architecture 'LlamaForCausalLM' -- "$KILN" info --model "$T/arch"
expect token_out_of_range 'token id 9999' -- "$KILN" generate --model "$SRC" --tokens 1,9999 --max-tokens 2 --threads 1
expect unreadable_directory 'nonexistent' -- "$KILN" info --model "$T/nonexistent"
expect bad_flag 'unknown flag' -- "$KILN" generate --model "$SRC" --bogus
expect bad_temperature 'temperature' -- "$KILN" generate --model "$SRC" --tokens 1 --temperature -1 --threads 1

# a chat template that recurses without end, or prints past the output limit:
# one error line naming the limit (never a stack overflow: rc < 128)
printf '%s' "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}" > "$T/rec.jinja"
printf '%s' "{% for i in range(1000000) %}{{ 'x' * 100 }}{% endfor %}" > "$T/big.jinja"
printf '%s' '{"messages": [{"role": "user", "content": "hi"}]}' > "$T/ctx.json"
expect template_recursion 'template recursion deeper than 500 levels' -- "$KILN" template --template "$T/rec.jinja" --context "$T/ctx.json"
expect template_output 'template output exceeds 67108864 bytes' -- "$KILN" template --template "$T/big.jinja" --context "$T/ctx.json"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
