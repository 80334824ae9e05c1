#!/usr/bin/python3
"""validate_api.py — checks recorded kiln responses and stream events against
the official API schemas in shared/api-spec (OpenAI's OpenAPI components,
Anthropic's Messages spec).

  validate_api.py LOG        LOG: JSON lines {"spec": "openai"|"anthropic",
                             "schema": NAME, "where": TEXT, "body": OBJECT}
                             written by harness.mjs (vfetch); exit 1 and one
                             line per non-conformance when any
  validate_api.py --one SPEC SCHEMA FILE   one JSON file (shell suites)
  validate_api.py --http URL STATUS FILE   what kiln answered on URL with
                             STATUS (a JSON body or an SSE stream), checked
                             against the schema of its route, as harness.mjs
                             does (lib.sh's vcurl)
  validate_api.py --self-test  a conformant object passes and deliberately
                             broken ones are rejected (the check can fail)

Conversion to JSON Schema 2020-12 as the spec's README says: OpenAPI 3.0's
`nullable: true` is "this schema or null"; `discriminator` picks the oneOf /
anyOf branch by the named property (done by validating the branch whose
property enum holds the value, which is what a discriminator means); nothing
else is loosened. Anthropic's spec predates extended thinking: `thinking`
blocks and `thinking_delta` / `signature_delta` events are left out (counted
in the summary). OpenAI's spec has no schema for legacy completions stream
chunks nor for base64 embeddings: see completion_chunk and embedding_b64.
"""
import base64
import json
import os
import struct
import sys

import jsonschema

SPEC_DIR = os.environ.get("KILN_API_SPEC") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "api-spec")


def find_spec_dir():
    for d in (SPEC_DIR, "/work/shared/api-spec"):
        if os.path.exists(os.path.join(d, "openai.schemas.json")):
            return d
    sys.exit("validate_api: no openai.schemas.json (set KILN_API_SPEC)")


def convert(x):
    """OpenAPI 3.0 leftovers to JSON Schema: nullable, discriminator (and the
    Stainless spec's `"type": null`, which constrains nothing)."""
    if isinstance(x, list):
        return [convert(v) for v in x]
    if not isinstance(x, dict):
        return x
    y = {}
    for k, v in x.items():
        if k in ("properties", "patternProperties", "$defs", "definitions") and isinstance(v, dict):
            y[k] = {name: convert(sub) for name, sub in v.items()}  # names, not keywords
        elif k in ("nullable", "discriminator", "example", "x-oaiMeta") or (k == "type" and v is None):
            continue
        else:
            y[k] = convert(v)
    disc = x.get("discriminator")
    if disc and ("oneOf" in y or "anyOf" in y):
        # the branch named by the property's value (a discriminator); left as
        # oneOf/anyOf it would also match branches that merely fit
        key = "oneOf" if "oneOf" in y else "anyOf"
        y["x-discriminator"] = {"propertyName": disc["propertyName"], "mapping": disc.get("mapping", {}),
                                "key": key}
    if x.get("nullable") is True:
        return {"anyOf": [y, {"type": "null"}]}
    return y


class Spec:
    def __init__(self, path):
        doc = json.load(open(path))
        self.components = {"schemas": {n: convert(v) for n, v in doc["components"]["schemas"].items()}}
        self.validators = {}

    def schema(self, name):
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": self.components,
                "$ref": "#/components/schemas/" + name}

    def errors(self, name, body):
        v = self.validators.get(name)
        if not v:
            s = self.schema(name)
            v = self.validators[name] = jsonschema.Draft202012Validator(s, format_checker=None)
        errs = list(v.iter_errors(body))
        if not errs:
            return self.discriminated(self.components["schemas"][name], body, "")
        best = jsonschema.exceptions.best_match(errs)
        # a union: say which branch the object meant (its "type") and why it fails there
        detail = self.discriminated(self.components["schemas"][name], body, "", force=True)
        return detail or ["%s: %s" % ("/".join(str(p) for p in best.absolute_path) or "(root)", best.message[:300])]

    def resolve(self, s):
        while isinstance(s, dict) and "$ref" in s:
            s = self.components["schemas"][s["$ref"].split("/")[-1]]
        return s

    def discriminated(self, s, body, path, force=False):
        """For unions with a discriminator (or branches told apart by a "type"
        enum): the one branch the object names must hold by itself."""
        s = self.resolve(s)
        if not isinstance(s, dict) or not isinstance(body, dict):
            return []
        for key in ("oneOf", "anyOf"):
            branches = s.get(key)
            if not branches:
                continue
            d = s.get("x-discriminator")
            prop = d["propertyName"] if d else "type"
            val = body.get(prop)
            if val is None:
                continue
            named = []
            for b in branches:
                rb = self.resolve(b)
                enum = ((rb.get("properties") or {}).get(prop) or {}).get("enum") if isinstance(rb, dict) else None
                if enum and val in enum:
                    named.append(b)
            if len(named) == 1:
                sch = {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": self.components}
                sch.update(named[0] if "$ref" in named[0] else {"allOf": [named[0]]})
                errs = list(jsonschema.Draft202012Validator(sch).iter_errors(body))
                if errs:
                    e = jsonschema.exceptions.best_match(errs)
                    return ["%s (%s=%s): %s" % (path + "/".join(str(p) for p in e.absolute_path) or "(root)",
                                                prop, val, e.message[:300])]
            elif d and not named:
                return ["%s: %s=%r names no branch" % (path or "(root)", prop, val)]
        return []


THINKING = ("thinking", "redacted_thinking", "thinking_delta", "signature_delta")


def anthropic_body(schema, body):
    """Drops what the Anthropic spec predates (extended thinking); None: skip."""
    if schema == "MessageStreamEvent" and isinstance(body, dict):
        blk = body.get("content_block") or body.get("delta") or {}
        if isinstance(blk, dict) and blk.get("type") in THINKING:
            return None
    if schema == "Message" and isinstance(body, dict) and isinstance(body.get("content"), list):
        body = dict(body, content=[b for b in body["content"] if not (isinstance(b, dict) and b.get("type") in THINKING)])
    return body


def completion_chunk(where, schema, body):
    """OpenAI's spec has no schema for legacy completions stream chunks; they are
    CreateCompletionResponse objects whose finish_reason is null until the last
    one (as OpenAI sends them): that null is the one difference accepted."""
    if schema != "CreateCompletionResponse" or " event " not in where or not isinstance(body, dict):
        return body
    ch = body.get("choices")
    if isinstance(ch, list):
        body = dict(body, choices=[dict(c, finish_reason="stop") if isinstance(c, dict) and c.get("finish_reason") is None
                                   else c for c in ch])
    return body


def embedding_b64(schema, body):
    """encoding_format "base64" (what the openai SDK asks by default): OpenAI
    sends the vector as a base64 string of little-endian float32s, which its
    spec does not model; such a string must decode to whole floats and is
    checked as the array it stands for."""
    if schema != "CreateEmbeddingResponse" or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return body
    data = []
    for e in body["data"]:
        if isinstance(e, dict) and isinstance(e.get("embedding"), str):
            raw = base64.b64decode(e["embedding"], validate=True)
            if len(raw) % 4:
                raise ValueError("base64 embedding of %d bytes is not float32s" % len(raw))
            e = dict(e, embedding=list(struct.unpack("<%df" % (len(raw) // 4), raw)))
        data.append(e)
    return dict(body, data=data)


def schema_for(path, status, stream, body):
    """The official schema of what kiln answered on path (as harness.mjs's
    schemaFor): (spec, name), or None for a kiln-only route."""
    ant = path.startswith("/v1/messages")
    if not path.startswith("/v1/") or path.startswith("/v1/conversations"):
        return None
    is_err = status >= 400 or (stream and isinstance(body, dict) and
                                ((ant and body.get("type") == "error") or (not ant and "error" in body and "type" not in body)))
    if is_err:
        return ("anthropic" if ant else "openai", "ErrorResponse")
    table = {"/v1/chat/completions": "CreateChatCompletionStreamResponse" if stream else "CreateChatCompletionResponse",
             "/v1/completions": "CreateCompletionResponse", "/v1/models": "ListModelsResponse",
             "/v1/embeddings": "CreateEmbeddingResponse",
             "/v1/responses": "ResponseStreamEvent" if stream else "Response",
             "/v1/messages": "MessageStreamEvent" if stream else "Message",
             "/v1/messages/count_tokens": "BetaCountMessageTokensResponse"}
    if path.startswith("/v1/models/"):
        return ("openai", "Model")
    name = table.get(path)
    return (("anthropic" if ant else "openai"), name) if name else None


class Recorder:
    """For Python e2e suites: record(path, status, stream, bodies) per answer,
    then check() → (ok, report) over everything recorded."""

    def __init__(self):
        self.lines = []

    def record(self, method, path, status, stream, bodies):
        for i, b in enumerate(bodies if stream else [bodies]):
            s = schema_for(path, status, stream, b)
            if s:
                where = "%s %s%s" % (method, path, " event %d" % i if stream else "")
                self.lines.append(json.dumps({"spec": s[0], "schema": s[1], "where": where, "body": b}))

    def check(self):
        import io
        import tempfile
        from contextlib import redirect_stdout
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("\n".join(self.lines) + "\n")
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                rc = check_log(f.name)
        finally:
            os.unlink(f.name)
        return rc == 0, out.getvalue().rstrip()


def http_records(url, status, text):
    """Records (as harness.mjs writes them) of one answer: a JSON body, or
    each data frame of an SSE stream."""
    from urllib.parse import urlparse
    path = urlparse(url).path
    out = []
    if text.lstrip().startswith(("data:", "event:")):
        n = 0
        for block in text.replace("\r\n", "\n").split("\n\n"):
            event = data = None
            for line in block.split("\n"):
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    d = line[5:].lstrip(" ") if line[5:6] == " " else line[5:]
                    data = d if data is None else data + "\n" + d
            if data is None or data == "[DONE]":
                continue
            where = "%s event %d%s" % (path, n, " " + event if event else "")
            n += 1
            try:
                body = json.loads(data)
            except ValueError:
                out.append({"spec": "openai", "schema": "(not JSON)", "where": where, "body": data})
                continue
            s = schema_for(path, status, True, body)
            if s:
                out.append({"spec": s[0], "schema": s[1], "where": where, "body": body})
        return out
    try:
        body = json.loads(text)
    except ValueError:
        return [{"spec": "openai", "schema": "(not JSON)", "where": path, "body": text[:200]}]
    s = schema_for(path, status, False, body)
    return [{"spec": s[0], "schema": s[1], "where": path, "body": body}] if s else []


def check_log(path, records=None):
    spec_dir = find_spec_dir()
    specs = {"openai": Spec(os.path.join(spec_dir, "openai.schemas.json")),
             "anthropic": Spec(os.path.join(spec_dir, "anthropic.schemas.json"))}
    n = skipped = 0
    bad = []
    lines = records if records is not None else (json.loads(l) for l in open(path) if l.strip())
    for r in lines:
        if r["schema"] in ("(not JSON)", "(unreadable)"):
            bad.append((r["schema"], "%s: %s %s" % (r["where"], r["schema"], str(r["body"])[:200])))
            continue
        body = r["body"]
        if r["spec"] == "anthropic":
            body = anthropic_body(r["schema"], body)
            if body is None:
                skipped += 1
                continue
        body = completion_chunk(r["where"], r["schema"], body)
        try:
            body = embedding_b64(r["schema"], body)
        except ValueError as e:
            bad.append((str(e), "%s: %s" % (r["where"], e)))
            continue
        n += 1
        for e in specs[r["spec"]].errors(r["schema"], body):
            bad.append(("%s %s: %s" % (r["where"].split(" event ")[0], r["schema"], e),
                        "%s %s: %s\n    %s" % (r["where"], r["schema"], e, json.dumps(body)[:400])))
    # one line per distinct failure (a stream repeats the same one per event)
    seen, out = set(), []
    for k, b in bad:
        if k not in seen:
            seen.add(k)
            out.append(b)
    for b in out[:40]:
        print("NONCONFORMANT " + b)
    print("validate_api: %d objects checked against the official schemas, %d not conformant (%d distinct), "
          "%d thinking events skipped" % (n, len(bad), len(out), skipped))
    return 1 if bad else 0


def self_test():
    spec_dir = find_spec_dir()
    oa = Spec(os.path.join(spec_dir, "openai.schemas.json"))
    an = Spec(os.path.join(spec_dir, "anthropic.schemas.json"))
    good = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "hi", "refusal": None}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    assert oa.errors("CreateChatCompletionResponse", good) == [], oa.errors("CreateChatCompletionResponse", good)
    no_refusal = json.loads(json.dumps(good))
    del no_refusal["choices"][0]["message"]["refusal"]
    assert oa.errors("CreateChatCompletionResponse", no_refusal), "a message without refusal passed"
    bad_finish = json.loads(json.dumps(good))
    bad_finish["choices"][0]["finish_reason"] = "cancelled"
    assert oa.errors("CreateChatCompletionResponse", bad_finish), "an unknown finish_reason passed"
    ev = {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0,
          "delta": "{", "sequence_number": 3}
    assert oa.errors("ResponseStreamEvent", ev) == [], oa.errors("ResponseStreamEvent", ev)
    ev_bad = dict(ev)
    del ev_bad["sequence_number"]
    errs = oa.errors("ResponseStreamEvent", ev_bad)
    assert errs and "sequence_number" in errs[0], errs
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
           "stop_sequence": None, "content": [{"type": "text", "text": "hi"}],
           "usage": {"input_tokens": 1, "output_tokens": 1}}
    assert an.errors("Message", msg) == [], an.errors("Message", msg)
    assert an.errors("Message", dict(msg, stop_reason="done")), "an unknown stop_reason passed"
    print("validate_api self-test: conformant objects pass; a message without refusal, an unknown "
          "finish_reason, an event without sequence_number and an unknown stop_reason are rejected")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        spec = Spec(os.path.join(find_spec_dir(), sys.argv[2] + ".schemas.json"))
        errs = spec.errors(sys.argv[3], json.load(open(sys.argv[4])))
        for e in errs:
            print("NONCONFORMANT %s %s: %s" % (sys.argv[2], sys.argv[3], e))
        sys.exit(1 if errs else 0)
    if len(sys.argv) == 5 and sys.argv[1] == "--http":
        sys.exit(check_log(None, http_records(sys.argv[2], int(sys.argv[3]),
                                              open(sys.argv[4], encoding="utf-8", errors="replace").read())))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(check_log(sys.argv[1]))
