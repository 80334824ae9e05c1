#!/usr/bin/env bash
# setup.sh — installs kiln's build dependencies (Debian/Ubuntu packages) and
# builds build/kiln (Release). Safe to run again: it only installs what is missing.
#   scripts/setup.sh            deps + release build in build/
#   KILN_SKIP_DEPS=1 ...        build only
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev libssl-dev libxxhash-dev
      libsqlite3-dev libedit-dev
      python3-numpy python3-jsonschema curl ca-certificates nodejs npm
      chromium tmux)  # the chat page's browser test (playwright-core drives Debian's chromium); kiln run's tmux test

if [ "${KILN_SKIP_DEPS:-0}" != 1 ] && command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${DEBS[@]}"; do
    # node/npm may come from elsewhere (nvm, NodeSource): accept a working binary.
    case "$p" in nodejs) command -v node >/dev/null && continue ;; npm) command -v npm >/dev/null && continue ;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
echo "setup: built $(pwd)/build/kiln"
