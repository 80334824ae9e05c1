#!/usr/bin/python3
"""make_corpus.py PKGDIR OUT.jsonl — the schema corpus from fetch_corpus.sh's
packages: one line {"name", "schema"} per schema, in a fixed order.

Picked: every schema of the JSON-Schema-Test-Suite's draft-4 files (each
test group's schema once; "$schema" set to draft-04 so validators read it
as written), the option schemas of Angular schematics/builders and Nx
executors/generators, markdownlint's, commitlint's, API Extractor's and
Heft's configuration schemas, JSON Resume, the OpenAPI 1.2-3.1 schemas and
AsyncAPI 3.0 definitions and protocol bindings.
"""
import glob
import json
import os
import sys

PICKS = [
    ("@schematics__angular", "package/*/schema.json"),
    ("@schematics__angular", "package/*/*/schema.json"),
    ("@angular-devkit__build-angular", "package/src/**/schema.json"),
    ("@nx__js", "package/src/**/schema.json"),
    ("markdownlint", "package/schema/*.json"),
    ("@commitlint__config-validator", "package/**/*.schema.json"),
    ("@microsoft__api-extractor", "package/lib-commonjs/schemas/*.schema.json"),
    ("@rushstack__heft", "package/lib-commonjs/schemas/*.json"),
    ("@jsonresume__schema", "package/schema.json"),
    ("@apidevtools__openapi-schemas", "package/schemas/**/*.json"),
    ("@asyncapi__specs", "package/definitions/3.0.0/*.json"),
    ("@asyncapi__specs", "package/bindings/**/*.json"),
]


def main():
    pkgdir, out = sys.argv[1], sys.argv[2]
    rows, seen = [], set()

    def add(name, schema):
        key = json.dumps(schema, sort_keys=True)
        if key in seen or not isinstance(schema, (dict, bool)):
            return
        seen.add(key)
        rows.append({"name": name, "schema": schema})

    suite = os.path.join(pkgdir, "json-schema-test-suite/package/tests/draft4")
    for path in sorted(glob.glob(suite + "/*.json") + glob.glob(suite + "/optional/*.json")):
        with open(path, encoding="utf-8") as f:
            groups = json.load(f)
        for i, g in enumerate(groups):
            s = g["schema"]
            if isinstance(s, dict) and "$schema" not in s:
                s = dict(s, **{"$schema": "http://json-schema.org/draft-04/schema#"})
            add(f"suite/draft4/{os.path.relpath(path, suite)}#{i}", s)
    for pkg, pattern in PICKS:
        base = os.path.join(pkgdir, pkg)
        for path in sorted(glob.glob(os.path.join(base, pattern), recursive=True)):
            if os.path.basename(path) == "package.json":
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    s = json.load(f)
            except ValueError:
                continue
            add(f"{pkg.replace('__', '/')}/{os.path.relpath(path, base)}", s)
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(rows)} schemas -> {out}")


if __name__ == "__main__":
    main()
