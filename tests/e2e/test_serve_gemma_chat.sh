#!/usr/bin/env bash
# test_serve_gemma_chat.sh — Gemma 4's chat format end to end (issue 13 §5):
# a tiny random Gemma 4 model given Gemma 4's control tokens (<|turn>,
# <|channel>, <|tool_call>, <|"|>, … as special tokens) and Google's canonical
# chat template (tests/template/gemma4/gemma4_e2b), served by `kiln serve`,
# driven by the official openai and @anthropic-ai/sdk clients
# (gemma_chat.test.mjs): prompts equal @huggingface/jinja's render, forced
# calls in Gemma 4's syntax come back as tool calls in all three APIs,
# <|tool_response> ends a turn with tools, the thought channel is reasoning.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$E2E_DIR/node_modules/@anthropic-ai/sdk" ] || e2e_skip "no @anthropic-ai/sdk in tests/e2e/node_modules"
PY=/usr/bin/python3
M="$E2E_TMP/gemma4-chat"
"$KILN_SOURCE_DIR/tools/make-test-model" --arch gemma4 --dtype f32 --shape tiny --vocab 640 --out "$M" >/dev/null ||
  e2e_skip "cannot make the test model (python3-numpy missing?)"
# Gemma 4's control tokens as added special tokens after the test tokenizer's ids,
# <turn|> the end of a turn; the canonical template beside them.
$PY - "$M" <<'PY' || exit 1
import json, os, sys
d = sys.argv[1]
SPECIAL = ["<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool>", "<tool|>",
           "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>']
tj = json.load(open(os.path.join(d, "tokenizer.json")))
tc = json.load(open(os.path.join(d, "tokenizer_config.json")))
nxt = 1 + max(max(tj["model"]["vocab"].values()), max(a["id"] for a in tj["added_tokens"]))
ids = {}
for i, t in enumerate(SPECIAL):
    a = {"id": nxt + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
    tj["added_tokens"].append(a)
    tc["added_tokens_decoder"][str(a["id"])] = {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")}
    ids[t] = a["id"]
tc.pop("chat_template", None)
tc["eos_token"] = "<turn|>"
json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
json.dump(tc, open(os.path.join(d, "tokenizer_config.json"), "w"))
for f in ("config.json", "generation_config.json"):
    p = os.path.join(d, f)
    if not os.path.exists(p):
        continue
    c = json.load(open(p))
    for k in ([c, c["text_config"]] if "text_config" in c else [c]):
        k["eos_token_id"] = ids["<turn|>"]
    json.dump(c, open(p, "w"))
assert nxt + len(SPECIAL) <= 640, nxt
PY
cp "$KILN_SOURCE_DIR/tests/template/gemma4/gemma4_e2b/chat_template.jinja" "$M/chat_template.jinja"
e2e_server G --model "$M" --ctx 1024 || exit 1
run_node gemma_chat.test.mjs --url "$G_URL" --template "$M/chat_template.jinja"
check "SIGTERM exits 0" e2e_stop "$G_PID"
e2e_done
