#!/usr/bin/python3
"""validate.py SCHEMAS.jsonl EMITTED.jsonl [--min-coverage F] [--report FILE]

Checks what bench_grammar --emit wrote against the schemas it read, with
Debian's python3-jsonschema (a validator nobody here wrote): every generated
text must parse as JSON and validate against its schema (the draft named by
$schema, else 2020-12), with format checking on; a schema kiln refused must
carry an error message. Prints accepted/all (coverage) and exits non-zero on
any invalid output, any unfinished generation, or coverage below
--min-coverage. Schemas the validator itself cannot load (bad regex for
Python, unknown draft) are counted apart and not held against kiln.
"""
import json
import sys

import jsonschema
from jsonschema import validators


def main():
    args = sys.argv[1:]
    min_cov, report = 0.0, None
    if "--min-coverage" in args:
        i = args.index("--min-coverage")
        min_cov = float(args[i + 1])
        del args[i:i + 2]
    if "--report" in args:
        i = args.index("--report")
        report = args[i + 1]
        del args[i:i + 2]
    schemas_path, emitted_path = args
    schemas = []
    with open(schemas_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                schemas.append((o.get("name", str(len(schemas))), o["schema"] if "schema" in o else o))
    emitted = {}
    with open(emitted_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                emitted[o["i"]] = o
    accepted = refused = bad = unfinished = skipped = 0
    refusals = {}
    lines = []
    for i, (name, schema) in enumerate(schemas):
        e = emitted.get(i)
        if e is None:
            print(f"FAIL {name}: no result", file=sys.stderr)
            bad += 1
            continue
        if "error" in e:
            refused += 1
            msg = e["error"]
            key = msg.split(" (at ")[0]
            refusals[key] = refusals.get(key, 0) + 1
            lines.append(f"refused {name}: {msg}")
            if not msg:
                bad += 1
            continue
        accepted += 1
        if not e.get("finished"):
            unfinished += 1
            print(f"FAIL {name}: generation did not finish: {e['text'][:200]!r}", file=sys.stderr)
            continue
        try:
            cls = validators.validator_for(schema, default=validators.Draft202012Validator)
            cls.check_schema(schema)
            v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        except Exception as ex:  # the validator cannot use this schema
            skipped += 1
            lines.append(f"skipped {name}: validator cannot load the schema: {ex}".splitlines()[0])
            continue
        try:
            inst = json.loads(e["text"])
        except Exception as ex:
            bad += 1
            print(f"FAIL {name}: not JSON ({ex}): {e['text'][:300]!r}", file=sys.stderr)
            continue
        try:
            errs = list(v.iter_errors(inst))
        except Exception as ex:  # e.g. a pattern Python's re cannot compile
            skipped += 1
            lines.append(f"skipped {name}: validator failed: {ex}".splitlines()[0])
            continue
        if errs:
            bad += 1
            print(f"FAIL {name}: {errs[0].message[:300]} at {list(errs[0].absolute_path)}; "
                  f"text {e['text'][:300]!r}", file=sys.stderr)
        else:
            lines.append(f"valid {name}")
    total = len(schemas)
    cov = accepted / total if total else 0.0
    print(f"schemas={total} accepted={accepted} refused={refused} coverage={cov:.3f} "
          f"invalid={bad} unfinished={unfinished} validator_skipped={skipped}")
    for k, n in sorted(refusals.items(), key=lambda x: -x[1])[:25]:
        print(f"  refused {n:4d}: {k}")
    if report:
        with open(report, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    if bad or unfinished or cov < min_cov:
        sys.exit(1)


if __name__ == "__main__":
    main()
