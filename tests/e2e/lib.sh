# lib.sh — shared helpers for the e2e scripts: build test models, start a real
# `kiln serve` on 127.0.0.1 with a free port, wait for /health, always stop it.
#   . "$(dirname "$0")/lib.sh"
#   e2e_server SRV --model DIR [flags...]     # sets SRV_PID, SRV_URL, SRV_LOG
#   check "name" cmd...                       # counts a pass or a fail
#   vcurl ARGS...                             # curl -s, the answer checked against the official schema
#   e2e_done                                  # prints "N passed, M failed", exit status
set -uo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KILN_SOURCE_DIR="${KILN_SOURCE_DIR:-$(cd "$E2E_DIR/../.." && pwd)}"
KILN_BINARY_DIR="${KILN_BINARY_DIR:-$KILN_SOURCE_DIR/build}"
KILN_BIN="${KILN_BIN:-$KILN_BINARY_DIR/kiln}"
KILN_SHARED_DIR="${KILN_SHARED_DIR:-$KILN_SOURCE_DIR/../shared}"
STORIES="$KILN_SHARED_DIR/models/stories260K"
E2E_PASS=0
E2E_FAIL=0
E2E_PIDS=()
E2E_TMP="$(mktemp -d)"
export NODE_PATH="$E2E_DIR/node_modules"
# servers keep conversations under $XDG_DATA_HOME/kiln by default: never the tester's own
export XDG_DATA_HOME="$E2E_TMP/xdg-data"

e2e_cleanup() {
  for p in "${E2E_PIDS[@]:-}"; do
    [ -n "$p" ] && kill -TERM "$p" 2>/dev/null
  done
  for p in "${E2E_PIDS[@]:-}"; do
    [ -n "$p" ] && wait "$p" 2>/dev/null
  done
  rm -rf "$E2E_TMP"
}
trap e2e_cleanup EXIT

e2e_skip() { echo "SKIP: $*"; echo "0 passed, 0 failed"; exit 0; }

# Prints the path of the shared llama "small" f32 test model, generating it once
# per build dir (atomically: concurrent tests race on the rename, not the files);
# skips the test when it cannot be made.
e2e_small_model() {
  local m="$KILN_BINARY_DIR/test-models/e2e-llama-small-f32"
  if [ ! -f "$m/model.safetensors" ]; then
    mkdir -p "$KILN_BINARY_DIR/test-models"
    "$KILN_SOURCE_DIR/tools/make-test-model" --arch llama --dtype f32 --shape small --out "$m.tmp$$" >/dev/null &&
      { mv -T "$m.tmp$$" "$m" 2>/dev/null || rm -rf "$m.tmp$$"; }
  fi
  [ -f "$m/model.safetensors" ] || return 1
  echo "$m"
}

# The small model's first two layers (the same seed: the same tensors), a
# draft model for it (--draft-model), made once per build dir.
e2e_small_drafter() {
  local m="$KILN_BINARY_DIR/test-models/e2e-llama-small-f32-2layers"
  if [ ! -f "$m/model.safetensors" ]; then
    mkdir -p "$KILN_BINARY_DIR/test-models"
    "$KILN_SOURCE_DIR/tools/make-test-model" --arch llama --dtype f32 --shape small --layers 2 \
      --out "$m.tmp$$" >/dev/null && { mv -T "$m.tmp$$" "$m" 2>/dev/null || rm -rf "$m.tmp$$"; }
  fi
  [ -f "$m/model.safetensors" ] || return 1
  echo "$m"
}

e2e_need() {
  [ -x "$KILN_BIN" ] || e2e_skip "no kiln binary at $KILN_BIN"
  command -v curl >/dev/null || e2e_skip "curl is not installed"
  if [ "${1:-}" = node ]; then
    command -v node >/dev/null || e2e_skip "node is not installed"
    [ -d "$E2E_DIR/node_modules/openai" ] || e2e_skip "run npm install in tests/e2e (scripts/test.sh does)"
  fi
}

# A tiny qwen3 test model with a ChatML template (made once per build dir).
e2e_chat_model() {
  local out="$KILN_BINARY_DIR/test-models/e2e-qwen3-tiny-f32"
  if [ ! -f "$out/model.safetensors" ]; then
    mkdir -p "$KILN_BINARY_DIR/test-models"
    "$KILN_SOURCE_DIR/tools/make-test-model" --arch qwen3 --dtype f32 --shape tiny --out "$out.tmp$$" >/dev/null &&
      { mv -T "$out.tmp$$" "$out" 2>/dev/null || rm -rf "$out.tmp$$"; }
  fi
  [ -f "$out/model.safetensors" ] || e2e_skip "cannot make the test model (python3-numpy missing?)"
  echo "$out"
}

e2e_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# e2e_server NAME [kiln serve flags...]: starts the server and waits for /health.
e2e_server() {
  local name=$1; shift
  local port; port=$(e2e_free_port)
  local log="$E2E_TMP/$name.log"
  "$KILN_BIN" serve --host 127.0.0.1 --port "$port" --threads "${E2E_THREADS:-2}" "$@" >"$log" 2>&1 &
  local pid=$!
  E2E_PIDS+=("$pid")
  printf -v "${name}_PID" '%s' "$pid"
  printf -v "${name}_URL" '%s' "http://127.0.0.1:$port"
  printf -v "${name}_LOG" '%s' "$log"
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not become healthy:"; cat "$log"
  return 1
}

e2e_stop() { # e2e_stop PID: SIGTERM, wait, returns the exit status
  kill -TERM "$1" 2>/dev/null
  local rc=0
  wait "$1" || rc=$?
  return $rc
}

check() {
  local name=$1; shift
  if "$@"; then
    E2E_PASS=$((E2E_PASS + 1)); echo "ok   $name"
  else
    E2E_FAIL=$((E2E_FAIL + 1)); echo "FAIL $name"
  fi
}

# run_node FILE URL [args]: a node test file prints "N passed, M failed" on its last line.
run_node() {
  local out; out=$(cd "$E2E_DIR" && node "$@" 2>&1); local rc=$?
  echo "$out"
  local p f
  p=$(echo "$out" | tail -n 1 | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\1/p')
  f=$(echo "$out" | tail -n 1 | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\2/p')
  E2E_PASS=$((E2E_PASS + ${p:-0})); E2E_FAIL=$((E2E_FAIL + ${f:-0}))
  if [ $rc -ne 0 ] && [ "${f:-0}" = 0 ]; then E2E_FAIL=$((E2E_FAIL + 1)); fi
}

# vcurl ARGS...: `curl -s ARGS` — the body on stdout (or in -o FILE), -w's
# %{http_code} honoured, curl's status — and what kiln answered on an API
# route (/v1/...: JSON or an SSE stream, read whole; error answers too) checked
# against the official schema of that route (validate_api.py --http, as the
# node suites' vfetch does). A non-conformant answer is remembered in a file
# (vcurl often runs in $(...) or bash -c) and fails the suite at e2e_done.
vcurl() {
  local f out="" fmt="" url="" st rc args=()
  f=$(mktemp "$E2E_TMP/vcurl.XXXXXX")
  while [ $# -gt 0 ]; do
    case $1 in
      -o) out=$2; shift 2 ;;
      -w) fmt=$2; shift 2 ;;
      *) case $1 in http://* | https://*) url=$1 ;; esac; args+=("$1"); shift ;;
    esac
  done
  st=$(curl -s "${args[@]}" -o "$f" -w '%{http_code}'); rc=$?
  if [ -n "$out" ]; then cat "$f" > "$out"; else cat "$f"; fi
  [ -n "$fmt" ] && printf '%b' "${fmt//'%{http_code}'/$st}"
  if [ $rc -eq 0 ] && [ -n "$url" ] && [ "$st" != 000 ]; then
    echo "$url" >> "$E2E_TMP/vcurl.checked"
    if ! /usr/bin/python3 "$E2E_DIR/validate_api.py" --http "$url" "$st" "$f" > "$f.why" 2>&1; then
      { echo "NONCONFORMANT answer to $url ($st):"; grep -v '^validate_api:' "$f.why"; } >> "$E2E_TMP/nonconformant"
    fi
  fi
  rm -f "$f" "$f.why"
  return $rc
}
export -f vcurl
export E2E_TMP E2E_DIR

e2e_done() {
  if [ -s "$E2E_TMP/nonconformant" ]; then
    cat "$E2E_TMP/nonconformant"
    E2E_FAIL=$((E2E_FAIL + 1)); echo "FAIL every API answer conforms to the official schemas (vcurl)"
  elif [ -s "$E2E_TMP/vcurl.checked" ]; then
    E2E_PASS=$((E2E_PASS + 1))
    echo "ok   every API answer conforms to the official schemas ($(wc -l < "$E2E_TMP/vcurl.checked") checked by vcurl)"
  fi
  echo "$E2E_PASS passed, $E2E_FAIL failed"
  [ "$E2E_FAIL" -eq 0 ]
}
