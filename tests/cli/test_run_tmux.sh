#!/usr/bin/env bash
# test_run_tmux.sh — `kiln run`, the terminal chat, driven as a person would: inside
# tmux (send-keys to type, capture-pane to read the screen). A ChatML test model:
# /system, an answer with its figures line, a follow-up that finds the first turn
# cached, line editing (Ctrl-A then typing), Ctrl-C stops a long answer without
# quitting, /save into the conversation store (read back with sqlite3) and to a
# file, /reset, Ctrl-D quits with 0. Then piped input on the built-in stories260K.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
KILN_SOURCE_DIR="${KILN_SOURCE_DIR:-$HERE/../..}"
KILN_BINARY_DIR="${KILN_BINARY_DIR:-$KILN_SOURCE_DIR/build}"
KILN_BIN="${KILN_BIN:-$KILN_BINARY_DIR/kiln}"
PASS=0; FAIL=0
check() { local n=$1; shift; if "$@"; then PASS=$((PASS+1)); echo "ok   $n"; else FAIL=$((FAIL+1)); echo "FAIL $n"; fi; }
command -v tmux >/dev/null || { echo "FAIL tmux is not installed (scripts/setup.sh installs it)"; echo "0 passed, 1 failed"; exit 1; }
T=$(mktemp -d)
S="kiln-run-$$"
cleanup() { tmux kill-server -L "$S" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
tm() { tmux -L "$S" "$@"; }
screen() { tm capture-pane -p -J -t "$1" -S -300; }
# wait_for SESSION REGEX [SECONDS]: until the screen matches
wait_for() {
  local n=$(( ${3:-60} * 10 ))
  for _ in $(seq 1 "$n"); do screen "$1" | grep -qE "$2" && return 0; sleep 0.1; done
  echo "--- screen of $1 (waited for /$2/):"; screen "$1" | tail -25; return 1
}
count() { screen "$1" | grep -cE "$2"; }

M="$KILN_BINARY_DIR/test-models/webui-slow-512-f32"
if [ ! -f "$M/model.safetensors" ]; then
  mkdir -p "$KILN_BINARY_DIR/test-models"
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch llama --dtype f32 --shape custom --hidden 512 --layers 8 \
    --heads 8 --kv-heads 2 --head-dim 64 --ffn 1536 --out "$M.tmp$$" >/dev/null &&
    { mv -T "$M.tmp$$" "$M" 2>/dev/null || rm -rf "$M.tmp$$"; }
fi
[ -f "$M/model.safetensors" ] || { echo "FAIL cannot make the test model"; echo "0 passed, 1 failed"; exit 1; }

# a tiny ChatML model for the quick turns (the slow one is only for stopping an answer)
Q="$KILN_BINARY_DIR/test-models/e2e-qwen3-tiny-f32"
if [ ! -f "$Q/model.safetensors" ]; then
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch qwen3 --dtype f32 --shape tiny --out "$Q.tmp$$" >/dev/null &&
    { mv -T "$Q.tmp$$" "$Q" 2>/dev/null || rm -rf "$Q.tmp$$"; }
fi

# session A: short answers
tm new-session -d -s A -x 200 -y 50 "'$KILN_BIN' run '$Q' --threads 2 --max-tokens 12 --temperature 0 --data-dir '$T/data'; echo EXITED \$?; sleep 60"
check "the banner names the model and the keys" wait_for A "kiln run: e2e-qwen3-tiny-f32 \(ctx [0-9]+, chat\).*Ctrl-C stops an answer"
tm send-keys -t A "/system You are terse." Enter
check "/system sets the system prompt" wait_for A "system prompt set"
tm send-keys -t A "Hello there" Enter
check "an answer ends with its figures line" wait_for A "^\[12 tokens · [0-9.]+ tok/s · TTFT [0-9]+ ms · prompt [0-9]+ \(0 cached\) · length\]"
tm send-keys -t A "And then" Enter
check "the follow-up finds the first turn in the prefix cache" wait_for A "prompt [0-9]+ \([1-9][0-9]* cached\) · length\]"
# line editing: type, jump to the start of the line (Ctrl-A), type there, send
tm send-keys -t A "orld" C-a "W" Enter
check "line editing: Ctrl-A then typing edits the line" wait_for A "^\[12 tokens.*\]" && [ "$(count A '^\[12 tokens')" -ge 3 ]
tm send-keys -t A "/save" Enter
check "/save keeps the conversation where the chat page finds it" wait_for A "saved as conv_[0-9a-f]+ in .*conversations.sqlite3"
db="$T/data/conversations.sqlite3"
check "... with the system prompt and the six messages, the edited line among them" \
  /usr/bin/python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
sysp, = c.execute('select system from conversations').fetchone()
msgs = [r for r in c.execute('select role, content, figures from messages order by seq')]
ok = sysp == 'You are terse.' and len(msgs) == 6 and [m[0] for m in msgs] == ['user','assistant']*3
ok = ok and msgs[0][1] == 'Hello there' and msgs[4][1] == 'World' and '\"completion_tokens\":12' in msgs[1][2]
sys.exit(0 if ok else 1)" "$db"
tm send-keys -t A "/save $T/export.json" Enter
check "/save FILE writes an export the chat page can import" wait_for A "saved to $T/export.json" && \
  /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['object']=='kiln.conversations' and len(d['conversations'][0]['messages'])==6 else 1)" "$T/export.json"
tm send-keys -t A "/reset" Enter
check "/reset forgets the conversation" wait_for A "conversation cleared"
tm send-keys -t A "/nope" Enter
check "an unknown command is named" wait_for A "unknown command /nope"
tm send-keys -t A C-d
check "Ctrl-D at the prompt quits with 0" wait_for A "^EXITED 0"

# session B: a long answer stopped with Ctrl-C
tm new-session -d -s B -x 200 -y 50 "'$KILN_BIN' run '$M' --threads 2 --max-tokens 3000 --ignore-eos --temperature 0.8 --data-dir '$T/data'; echo EXITED \$?; sleep 60"
wait_for B "kiln run: webui-slow-512-f32" >/dev/null
tm send-keys -t B "Write a very long story" Enter
# --ignore-eos: the random weights cannot end the answer before the Ctrl-C
wait_for B "^>>> Write a very long story" >/dev/null
sleep 0.7
tm send-keys -t B C-c
check "Ctrl-C stops the answer: the figures line says stopped" wait_for B "^\[[0-9]+ tokens.* · stopped\]" 30
n=$(screen B | grep -oE '^\[[0-9]+ tokens' | grep -oE '[0-9]+' | tail -1)
check "... well before max-tokens ($n of 3000)" [ "${n:-3000}" -lt 2000 ]
tm send-keys -t B "Again" Enter
check "... and the chat goes on" bash -c "for i in \$(seq 1 300); do [ \$(tmux -L '$S' capture-pane -p -J -t B -S -300 | grep -cE '^\[[0-9]+ tokens') -ge 2 ] && exit 0; [ \$i = 60 ] && tmux -L '$S' send-keys -t B C-c; sleep 0.1; done; exit 1"
tm send-keys -t B "/quit" Enter
check "/quit leaves with 0" wait_for B "^EXITED 0"

# piped input, no --model: the built-in stories260K in completion mode
out=$(printf 'Once upon a time\n/quit\n' | "$KILN_BIN" run --threads 1 --max-tokens 20 --temperature 0 2>&1); rc=$?
check "piped: the built-in model answers and exits 0" bash -c "[ $rc -eq 0 ] && grep -q 'completion mode' <<<'$out' && grep -qE '^\[20 tokens.*\]' <<<'$out'"
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
