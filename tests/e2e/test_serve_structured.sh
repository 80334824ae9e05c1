#!/usr/bin/env bash
# test_serve_structured.sh — constrained output through the HTTP API on a
# random-weight model (structured.py): response_format json_object/json_schema
# (strict or not, streamed, n=2), llama.cpp's grammar/json_schema fields on
# /v1/completions and chat (GBNF for JSON, arithmetic, lists and C-like code,
# checked by Python and gcc), Responses text.format, the 400s, a thinking
# template, tool_choice required/named in each tool-call family (Hermes/Qwen
# JSON, Qwen3-Coder XML, Llama 3 JSON, Mistral) and Anthropic's `any`, and the
# first schemas of the corpus (tests/grammar, when fetched by cli.grammar_corpus).
. "$(dirname "$0")/lib.sh"
e2e_need
/usr/bin/python3 -c "import jsonschema" 2>/dev/null || e2e_skip "python3-jsonschema is not installed"
command -v gcc >/dev/null || e2e_skip "gcc is not installed"
CHAT_MODEL=$(e2e_chat_model) || exit 1
TOOL_MODEL="$E2E_TMP/tool-model"
mkdir -p "$TOOL_MODEL" && cp "$CHAT_MODEL"/* "$TOOL_MODEL"/ && cp "$E2E_DIR/tools_template.jinja" "$TOOL_MODEL/chat_template.jinja"
THINK_MODEL="$E2E_TMP/think-model"
mkdir -p "$THINK_MODEL" && cp "$CHAT_MODEL"/* "$THINK_MODEL"/
cat > "$THINK_MODEL/chat_template.jinja" <<'JINJA'
{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n' }}{% endif %}
JINJA
e2e_server CHAT --model "$CHAT_MODEL" --ctx 2048 || exit 1
e2e_server THINK --model "$THINK_MODEL" --ctx 2048 || exit 1
e2e_server TOOLS --model "$TOOL_MODEL" --ctx 2048 || exit 1
# the other families: the same template text, parsed and constrained as each family
e2e_server LLAMA --model "$TOOL_MODEL" --ctx 2048 --tool-parser llama3 || exit 1
e2e_server MISTRAL --model "$TOOL_MODEL" --ctx 2048 --tool-parser mistral || exit 1
e2e_server CODER --model "$TOOL_MODEL" --ctx 2048 --tool-parser qwen3_coder || exit 1
CORPUS=()
[ -s "$KILN_BINARY_DIR/grammar-corpus/corpus.jsonl" ] && CORPUS=(--corpus "$KILN_BINARY_DIR/grammar-corpus/corpus.jsonl" --corpus-n 40)
out=$(/usr/bin/python3 "$E2E_DIR/structured.py" --chat "$CHAT_URL" --think "$THINK_URL" --tools "$TOOLS_URL" \
  "llama3=$LLAMA_URL" "mistral=$MISTRAL_URL" "qwen3_coder=$CODER_URL" "${CORPUS[@]}" 2>&1)
echo "$out"
p=$(echo "$out" | tail -n 1 | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\1/p')
f=$(echo "$out" | tail -n 1 | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\2/p')
E2E_PASS=$((E2E_PASS + ${p:-0})); E2E_FAIL=$((E2E_FAIL + ${f:-1}))
for s in CHAT THINK TOOLS LLAMA MISTRAL CODER; do
  pid_var="${s}_PID"
  check "SIGTERM exits 0 ($s)" e2e_stop "${!pid_var}"
done
e2e_done
