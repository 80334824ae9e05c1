#!/usr/bin/python3
"""structured.py — constrained output through kiln's HTTP API on a random-weight
model (whose free output is never JSON), checked by tools nobody here wrote:
Debian's python3-jsonschema for schemas, Python's json/ast for JSON and
arithmetic, gcc -fsyntax-only for C-like code.

  structured.py --chat URL --think URL --tools URL [--families NAME=URL ...]
                [--corpus FILE.jsonl [--corpus-n N]]

Prints "ok NAME" / "FAIL NAME: why" per check and "N passed, M failed" last.
"""
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from jsonschema import validators

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validate_api import Recorder  # noqa: E402  (every answer checked against the official schemas)

PASS, FAIL = 0, 0
API = Recorder()


def check(name, cond, why=""):
    global PASS, FAIL
    if cond:
        PASS += 1
        print(f"ok   {name}")
    else:
        FAIL += 1
        print(f"FAIL {name}: {why}"[:2000])


def post(url, path, body, stream=False):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            data = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        data, status = e.read().decode(), e.code
    if stream and status == 200:
        events = [json.loads(l[6:]) for l in data.splitlines() if l.startswith("data: ") and l[6:] != "[DONE]"]
        API.record("POST", path, status, True, events)
        return status, events
    body = json.loads(data) if data else None
    if body is not None:
        API.record("POST", path, status, False, body)
    return status, body


def validate(schema, text):
    try:
        inst = json.loads(text)
    except ValueError as e:
        return f"not JSON ({e}): {text[:300]!r}"
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    errs = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(inst))
    return f"{errs[0].message[:300]} in {text[:300]!r}" if errs else None


def chat(url, schema, strict=False, **kw):
    body = {"messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": 300,
            "temperature": 1.0, "seed": 11,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": strict}}}
    body.update(kw)
    return post(url, "/v1/chat/completions", body)


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                      "email": {"type": "string", "format": "email"},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"when": {"type": "string", "format": "date"},
                                                                 "ok": {"type": "boolean"}}, "required": ["when"]},
     "minItems": 1, "maxItems": 3},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
                                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                        "required": ["v"]}}, "$ref": "#/$defs/node"},
    {"anyOf": [{"type": "string", "pattern": "^[a-z]{2,5}-[0-9]{3}$"}, {"type": "null"}]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
               {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer"}}, "required": ["kind", "side"]}]},
]

ARITH = r'''
root   ::= expr
expr   ::= term (ws ("+" | "-") ws term)*
term   ::= factor (ws ("*" | "/") ws factor)*
factor ::= [0-9]{1,3} | "(" ws expr ws ")"
ws     ::= " "?
'''
JSONG = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}"
array  ::= "[" ws ( value ("," ws value)* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]{1,10})? ([eE] [-+]? [0-9]{1,3})?
ws     ::= [ \t\n]{0,4}
'''
LIST = r'''
root ::= item{1,6}
item ::= "- " [A-Za-z][A-Za-z ]{0,30} "\n"
'''
CLIKE = r'''
root  ::= "int f(int a, int b) {\n  int t = 0;\n" stmt{1,5} "  return " expr ";\n}\n"
stmt  ::= "  " ( assign | cond | loop ) "\n"
assign ::= var " = " expr ";"
cond  ::= "if (" expr " < " expr ") { " assign " } else { " assign " }"
loop  ::= "while (" var " > " [0-9]{1,3} ") { " var " = " var " - 1; }"
expr  ::= term ((" + " | " - " | " * ") term){0,3}
term  ::= var | [0-9]{1,4} | "(" expr ")"
var   ::= "a" | "b" | "t"
'''


def arith_ok(s):
    try:
        tree = ast.parse(s, mode="eval")
    except SyntaxError:
        return False
    return all(isinstance(n, (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div))
               for n in ast.walk(tree))


def gcc_ok(code):
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(code)
        path = f.name
    try:
        r = subprocess.run(["gcc", "-fsyntax-only", "-Wno-unused", path], capture_output=True, text=True)
        return r.returncode == 0, r.stderr
    finally:
        os.unlink(path)


def test_schemas(url):
    for i, s in enumerate(SCHEMAS):
        for strict in (False, True):
            st, r = chat(url, s, strict=strict, seed=100 + i)
            text = r["choices"][0]["message"]["content"] if st == 200 else ""
            check(f"chat json_schema #{i} strict={strict}", st == 200 and r["choices"][0]["finish_reason"] == "stop"
                  and validate(s, text) is None, f"{st} {validate(s, text) if st == 200 else r}")


def test_json_object_and_n(url):
    st, r = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 200,
                                               "temperature": 1.0, "seed": 3, "n": 2, "response_format": {"type": "json_object"}})
    ok = st == 200 and len(r["choices"]) == 2
    for c in (r["choices"] if ok else []):
        try:
            ok = ok and isinstance(json.loads(c["message"]["content"]), dict)
        except ValueError:
            ok = False
    check("chat json_object, n=2: both objects", ok, json.dumps(r)[:500])


def test_stream(url):
    s = SCHEMAS[0]
    st, ev = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 200, "temperature": 1,
                                                "seed": 5, "stream": True,
                                                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}}, stream=True)
    text = "".join((c["delta"].get("content") or "") for e in ev for c in e.get("choices", [])) if st == 200 else ""
    check("chat streamed json_schema: deltas concatenate to a valid value", st == 200 and validate(s, text) is None,
          validate(s, text) if st == 200 else ev)


def test_gbnf(url):
    for name, g, ok in (("arithmetic", ARITH, arith_ok), ("json", JSONG, lambda t: isinstance(json.loads(t), dict)),
                        ("list", LIST, lambda t: re.fullmatch(r"(- [A-Za-z][A-Za-z ]{0,30}\n){1,6}", t) is not None)):
        for seed in (1, 2):
            st, r = post(url, "/v1/completions", {"prompt": "Once upon a time", "grammar": g, "max_tokens": 250,
                                                  "temperature": 1.0, "seed": seed})
            text = r["choices"][0]["text"] if st == 200 else ""
            try:
                good = st == 200 and ok(text)
            except ValueError:
                good = False
            check(f"completions grammar {name} seed {seed}: parses", good, f"{st} {text[:300]!r} {r if st != 200 else ''}")
    for seed in (1, 2, 3):
        st, r = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "code"}], "grammar": CLIKE,
                                                   "max_tokens": 300, "temperature": 1.0, "seed": seed})
        code = r["choices"][0]["message"]["content"] if st == 200 else ""
        good, err = gcc_ok(code) if st == 200 else (False, str(r))
        check(f"chat grammar C-like seed {seed}: gcc -fsyntax-only accepts it", good, f"{err} {code!r}")


def test_completions_json_schema(url):
    s = SCHEMAS[1]
    st, r = post(url, "/v1/completions", {"prompt": "x", "json_schema": s, "max_tokens": 250, "temperature": 1, "seed": 9})
    text = r["choices"][0]["text"] if st == 200 else ""
    check("completions json_schema (llama.cpp field)", st == 200 and validate(s, text) is None, validate(s, text) if st == 200 else r)


def test_responses(url):
    s = SCHEMAS[0]
    st, r = post(url, "/v1/responses", {"input": "JSON", "max_output_tokens": 250, "temperature": 1, "seed": 4,
                                        "text": {"format": {"type": "json_schema", "name": "p", "schema": s, "strict": True}}})
    text = "".join(p.get("text", "") for o in (r.get("output", []) if st == 200 else []) if o["type"] == "message"
                   for p in o["content"])
    check("responses text.format json_schema", st == 200 and validate(s, text) is None, validate(s, text) if st == 200 else r)


def test_errors(url):
    st, r = chat(url, {"type": "object", "properties": {"a": {"not": {"minimum": 3}}}})
    check("unsupported keyword: 400 naming it", st == 400 and "'not'" in r["error"]["message"] and
          r["error"]["param"] == "response_format", r)
    st, r = chat(url, {"type": "string", "minLength": 99999, "maxLength": 100000})
    check("over the compile limit: 400 naming the field", st == 400 and r["error"]["param"] == "response_format" and
          "grammar compile exceeded" in r["error"]["message"], r)
    # thousands of object copies: ~12 s of CPU to compile without a limit; the
    # default --grammar-compile-ms 500 (thread CPU time) stops it
    blow = {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"},
            "b": {"type": "string", "maxLength": 20}}, "required": ["a", "b"]}, "minItems": 3000, "maxItems": 6000}
    t0 = time.time()
    st, r = chat(url, blow)
    dt = time.time() - t0
    check(f"a schema built to blow up: 400 'grammar compile exceeded 500 ms' ({dt:.1f} s)",
          st == 400 and "grammar compile exceeded 500 ms" in r["error"]["message"] and
          r["error"]["param"] == "response_format" and dt < 30, r)
    st, r = post(url, "/v1/completions", {"prompt": "x", "max_tokens": 4,
                                          "grammar": 'root ::= ("a" | "b")* "a" ("a" | "b"){18}'})
    check("a GBNF grammar over the limits: 400 naming 'grammar'", st == 400 and r["error"]["param"] == "grammar" and
          "grammar compile exceeded" in r["error"]["message"], r)
    st, r = post(url, "/v1/completions", {"prompt": "x", "grammar": "root ::= foo", "max_tokens": 4})
    check("bad GBNF: 400 naming the rule", st == 400 and r["error"]["param"] == "grammar" and "foo" in r["error"]["message"], r)
    st, r = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"a\"",
                                               "response_format": {"type": "json_object"}, "max_tokens": 4})
    check("two formats at once: 400", st == 400, r)
    st, r = post(url, "/v1/responses", {"input": "x", "max_output_tokens": 4,
                                        "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object", "if": {}}}}})
    check("responses: the error names 'text'", st == 400 and r["error"]["param"] == "text", r)


def get_json(url, path):
    with urllib.request.urlopen(url + path, timeout=60) as r:
        return json.loads(r.read().decode())


def test_cache(url):
    """The compile cache: an identical request compiles nothing and writes the
    same output; another option (strict) is another entry."""
    def cache():
        return get_json(url, "/stats")["engine"]["grammar"]["cache"]
    s = dict(SCHEMAS[0], title="cache-test")  # an annotation: a key no other check uses
    c0 = cache()
    st1, r1 = chat(url, s, seed=5)
    c1 = cache()
    st2, r2 = chat(url, s, seed=5)
    c2 = cache()
    check("cache: the first request compiles (one miss, one new entry)",
          st1 == 200 and c1["misses"] == c0["misses"] + 1 and c1["hits"] == c0["hits"] and
          c1["entries"] == c0["entries"] + 1 and 0 < c1["bytes"] <= c1["max_bytes"], (c0, c1))
    check("cache: the identical second request compiles zero times (one hit)",
          st2 == 200 and c2["misses"] == c1["misses"] and c2["hits"] == c1["hits"] + 1, (c1, c2))
    t1 = r1["choices"][0]["message"]["content"] if st1 == 200 else None
    t2 = r2["choices"][0]["message"]["content"] if st2 == 200 else None
    check("cache: identical output, valid", t1 is not None and t1 == t2 and validate(s, t2) is None, (t1, t2))
    st3, _ = chat(url, s, strict=True, seed=5)
    c3 = cache()
    check("cache: strict is another entry (a miss)", st3 == 200 and c3["misses"] == c2["misses"] + 1, (c2, c3))


def test_thinking(url):
    s = SCHEMAS[0]
    st, r = chat(url, s, seed=21, max_tokens=400)
    m = r["choices"][0]["message"] if st == 200 else {}
    check("thinking model: reasoning first, then valid JSON content", st == 200 and validate(s, m.get("content") or "") is None
          and len(m.get("reasoning") or "") > 0, f"{st} {m}")


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string", "maxLength": 24},
                                             "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                             "unit": {"enum": ["c", "f"]}},
                                             "required": ["city", "days"], "additionalProperties": False}}}
TOOL2 = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}}


def test_tools(name, url):
    schemas = {"get_weather": TOOL["function"]["parameters"], "add": TOOL2["function"]["parameters"]}
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        label = "required" if choice == "required" else "named"
        for seed in (1, 2):
            st, r = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Weather?"}], "tools": [TOOL, TOOL2],
                                                       "tool_choice": choice, "max_tokens": 200, "temperature": 1, "seed": seed,
                                                       "parallel_tool_calls": False})
            c = r["choices"][0] if st == 200 else {}
            calls = (c.get("message") or {}).get("tool_calls") or []
            good = st == 200 and c.get("finish_reason") == "tool_calls" and len(calls) == 1
            why = json.dumps(r)[:600]
            if good:
                f = calls[0]["function"]
                good = f["name"] in schemas and (label == "required" or f["name"] == "get_weather")
                v = validate(schemas.get(f["name"], {}), f["arguments"]) if good else "bad name"
                good = good and v is None
                why = v or why
            check(f"{name}: tool_choice {label} seed {seed}: arguments validate", good, why)
    # streamed: argument fragments, as the call is written, concatenate to a
    # valid object equal to the same request's unstreamed arguments
    req = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [TOOL], "tool_choice": "required",
           "max_tokens": 200, "temperature": 1, "seed": 8, "parallel_tool_calls": False}
    st, ev = post(url, "/v1/chat/completions", dict(req, stream=True), stream=True)
    frags = [(tc.get("function") or {}).get("arguments") or "" for e in (ev if st == 200 else [])
             for c in e.get("choices", []) for tc in (c["delta"].get("tool_calls") or [])]
    args = "".join(frags)
    check(f"{name}: streamed tool call arguments validate", st == 200 and validate(TOOL["function"]["parameters"], args) is None,
          validate(TOOL["function"]["parameters"], args) if st == 200 else ev)
    st2, r2 = post(url, "/v1/chat/completions", req)
    whole = ((r2["choices"][0].get("message") or {}).get("tool_calls") or [{}])[0].get("function", {}).get("arguments") \
        if st2 == 200 else None
    n = len([f for f in frags if f])
    check(f"{name}: {n} streamed fragments concatenate to the unstreamed arguments", n >= 2 and args == whole,
          f"{frags} vs {whole!r}")


def test_anthropic(url):
    st, r = post(url, "/v1/messages", {"model": "x", "max_tokens": 200, "temperature": 1,
                                       "messages": [{"role": "user", "content": "Weather?"}],
                                       "tools": [{"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}],
                                       "tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
    tu = [b for b in (r.get("content", []) if st == 200 else []) if b["type"] == "tool_use"]
    check("anthropic tool_choice any: input validates", st == 200 and r["stop_reason"] == "tool_use" and len(tu) == 1
          and validate(TOOL["function"]["parameters"], json.dumps(tu[0]["input"])) is None, json.dumps(r)[:500])


def test_corpus(url, path, n):
    rows = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()][:n]
    acc = ref = 0
    for i, row in enumerate(rows):
        st, r = chat(url, row["schema"], seed=i, max_tokens=256)
        if st == 400:
            ref += 1
            check(f"corpus {row['name']}: refused with a message", bool(r["error"]["message"]), r)
            continue
        acc += 1
        text = r["choices"][0]["message"]["content"] if st == 200 else ""
        v = validate(row["schema"], text) if st == 200 else f"status {st}: {r}"
        check(f"corpus {row['name']}: valid", st == 200 and v is None, v)
    print(f"corpus through the API: {acc} accepted, {ref} refused of {len(rows)}")


def main():
    a = sys.argv[1:]
    opt = lambda k: a[a.index(k) + 1] if k in a else None
    chat_url, think, tools = opt("--chat"), opt("--think"), opt("--tools")
    test_schemas(chat_url)
    test_json_object_and_n(chat_url)
    test_stream(chat_url)
    test_gbnf(chat_url)
    test_completions_json_schema(chat_url)
    test_responses(chat_url)
    test_errors(chat_url)
    test_cache(chat_url)
    if think:
        test_thinking(think)
    if tools:
        test_tools("hermes", tools)
        test_anthropic(tools)
    for fam in [x for x in a if "=" in x and not x.startswith("--")]:
        name, url = fam.split("=", 1)
        test_tools(name, url)
    if opt("--corpus"):
        test_corpus(chat_url, opt("--corpus"), int(opt("--corpus-n") or 40))
    ok, report = API.check()
    print(report)
    check(f"every response and stream event ({len(API.lines)}) validates against the official schemas", ok)
    print(f"{PASS} passed, {FAIL} failed")
    sys.exit(1 if FAIL else 0)


if __name__ == "__main__":
    main()
