#!/usr/bin/env bash
# test_bench_roofline.sh — smoke of bench/roofline (CI never checks speed): on
# stories260K it prints one line with every figure, positive numbers, and a
# fraction equal to decode_tok_s / roofline_tok_s.
set -u
KILN=${KILN_BIN:?}
M=${KILN_SHARED_DIR:?}/models/stories260K
out=$("${KILN_SOURCE_DIR:?}/bench/roofline" --kiln "$KILN" --model "$M" --threads 2 \
    --prompt-tokens 8 --gen-tokens 8 --runs 1) || { echo "not ok run: exit $?"; exit 1; }
echo "$out"
fail=0
for k in bw_gbs bw_before bw_after bytes_per_token roofline_tok_s decode_tok_s prefill_tok_s fraction; do
    v=$(printf '%s\n' "$out" | grep -o " $k=[0-9.]*" | cut -d= -f2)
    if awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }'; then echo "ok $k=$v"; else echo "not ok $k: '$v'"; fail=1; fi
done
d=$(printf '%s\n' "$out" | grep -o ' decode_tok_s=[0-9.]*' | cut -d= -f2)
r=$(printf '%s\n' "$out" | grep -o ' roofline_tok_s=[0-9.]*' | cut -d= -f2)
f=$(printf '%s\n' "$out" | grep -o ' fraction=[0-9.]*' | cut -d= -f2)
if awk -v d="$d" -v r="$r" -v f="$f" 'BEGIN { x = d / r; exit !(x - f < 0.002 && f - x < 0.002) }'; then
    echo "ok fraction"
else
    echo "not ok fraction: $d / $r vs $f"; fail=1
fi
exit $fail
