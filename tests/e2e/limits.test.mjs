// limits.test.mjs — request depth limits and chat-template render limits
// (docs/server.md, Limits) through the official clients and raw HTTP:
//   node limits.test.mjs --url URL (tools template) --tmpl URL (limits_template.jinja)
// Every refusal is a 400 in the endpoint's error shape whose message names the
// limit and its value; the same request at the limit is served.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { test, done, assert, arg, post, get } from "./harness.mjs";

const URL_ = arg("--url"), TURL = arg("--tmpl");
const oa = new OpenAI({ apiKey: "none", baseURL: `${URL_}/v1`, maxRetries: 0, timeout: 60000 });
const an = new Anthropic({ apiKey: "none", baseURL: URL_, maxRetries: 0, timeout: 60000 });
const toa = new OpenAI({ apiKey: "none", baseURL: `${TURL}/v1`, maxRetries: 0, timeout: 60000 });
const tan = new Anthropic({ apiKey: "none", baseURL: TURL, maxRetries: 0, timeout: 60000 });
const nest = (n) => { let v = 1; for (let i = 0; i < n; i++) v = { a: v }; return v; };
const deepArrays = (n) => "[".repeat(n) + "]".repeat(n);
const USER = [{ role: "user", content: "Hello" }];
const BODY = 128, VALUE = 64; // SRV_JSON_MAX_DEPTH, SRV_VALUE_MAX_DEPTH

// The SDK call must fail with a 400 whose message matches re; returns the error.
async function refused(promise, re) {
  try { await promise; } catch (e) {
    assert.equal(e.status, 400, `status ${e.status}: ${e.message}`);
    assert.match(e.message, re);
    return e;
  }
  assert.fail("the request was served");
}
const openaiShape = (j, param) => {
  assert.deepEqual(Object.keys(j.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(j.error.type, "invalid_request_error");
  assert.equal(j.error.param, param);
};
const anthropicShape = (j) => { assert.equal(j.type, "error"); assert.equal(j.error.type, "invalid_request_error"); };

test("a 10,000-deep JSON array body: 400 naming the limit on every endpoint", async () => {
  const body = deepArrays(10000);
  for (const path of ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/tokenize"]) {
    const r = await post(`${URL_}${path}`, body);
    assert.equal(r.status, 400, `${path}: ${r.text.slice(0, 200)}`);
    openaiShape(r.json, null);
    assert.match(r.json.error.message, /more than 128 levels/, path);
  }
  for (const path of ["/v1/messages", "/v1/messages/count_tokens"]) {
    const r = await post(`${URL_}${path}`, body);
    assert.equal(r.status, 400, path);
    anthropicShape(r.json);
    assert.match(r.json.error.message, /more than 128 levels/, path);
  }
});

test("a body nested exactly 128 levels is served, 129 is refused", async () => {
  const at = JSON.stringify({ model: "m", messages: USER, max_tokens: 1, extra: JSON.parse(deepArrays(BODY - 1)) });
  const r = await post(`${URL_}/v1/chat/completions`, at);
  assert.equal(r.status, 200, r.text.slice(0, 300));
  const over = JSON.stringify({ model: "m", messages: USER, max_tokens: 1, extra: JSON.parse(deepArrays(BODY)) });
  assert.equal((await post(`${URL_}/v1/chat/completions`, over)).status, 400);
});

test("openai: a tool schema 65 levels deep is a 400 on 'tools'; 64 is served", async () => {
  const tool = (n) => [{ type: "function", function: { name: "deep", parameters: nest(n) } }];
  const e = await refused(oa.chat.completions.create({ model: "m", messages: USER, tools: tool(VALUE + 1), max_tokens: 1 }),
    /tool 'deep' nests arrays\/objects more than 64 levels/);
  assert.equal(e.param, "tools");
  const ok = await oa.chat.completions.create({ model: "m", messages: USER, tools: tool(VALUE), max_tokens: 1, tool_choice: "none" });
  assert.equal(ok.choices.length, 1);
});

test("anthropic: an input_schema or a tool_use input 65 levels deep is a 400", async () => {
  const e = await refused(an.messages.create({ model: "m", max_tokens: 1, messages: USER,
    tools: [{ name: "deep", input_schema: nest(VALUE + 1) }] }), /more than 64 levels/);
  assert.equal(e.error.type, "error");
  assert.equal(e.error.error.type, "invalid_request_error");
  const hist = (n) => [{ role: "user", content: "Weather?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "w", input: nest(n) }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] }];
  await refused(an.messages.create({ model: "m", max_tokens: 1, messages: hist(VALUE + 1) }), /tool call 0 of message 1 nests arrays\/objects more than 64 levels/);
  const ok = await an.messages.create({ model: "m", max_tokens: 1, messages: hist(VALUE) });
  assert.equal(ok.type, "message");
});

test("openai: tool-call arguments in the history 65 levels deep are a 400 on 'messages'", async () => {
  const hist = (args) => [{ role: "user", content: "Weather?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "w", arguments: args } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny" }];
  const e = await refused(oa.chat.completions.create({ model: "m", messages: hist(JSON.stringify(nest(VALUE + 1))), max_tokens: 1 }),
    /more than 64 levels/);
  assert.equal(e.param, "messages");
  // the arguments string may be far deeper than the body: 10,000 levels inside a string
  await refused(oa.chat.completions.create({ model: "m", messages: hist(deepArrays(10000)), max_tokens: 1 }), /more than 64 levels/);
  const ok = await oa.chat.completions.create({ model: "m", messages: hist(JSON.stringify(nest(VALUE))), max_tokens: 1 });
  assert.equal(ok.choices.length, 1);
});

test("responses: function_call arguments and a tool schema past the limit are 400s", async () => {
  const input = (args) => [{ role: "user", content: "Weather?" },
    { type: "function_call", call_id: "call_1", name: "w", arguments: args },
    { type: "function_call_output", call_id: "call_1", output: "sunny" }];
  const e = await refused(oa.responses.create({ model: "m", input: input(deepArrays(10000)), max_output_tokens: 1 }), /more than 64 levels/);
  assert.equal(e.param, "input");
  await refused(oa.responses.create({ model: "m", input: "x", max_output_tokens: 1,
    tools: [{ type: "function", name: "deep", parameters: nest(VALUE + 1) }] }), /more than 64 levels/);
  const ok = await oa.responses.create({ model: "m", input: input(JSON.stringify(nest(VALUE))), max_output_tokens: 1 });
  assert.equal(ok.object, "response");
});

test("chat_template_kwargs and a response_format schema past the limit are 400s naming the field", async () => {
  let e = await refused(oa.chat.completions.create({ model: "m", messages: USER, max_tokens: 1, chat_template_kwargs: { k: nest(VALUE) } }),
    /'chat_template_kwargs' nests arrays\/objects more than 64 levels/);
  assert.equal(e.param, "chat_template_kwargs");
  e = await refused(oa.chat.completions.create({ model: "m", messages: USER, max_tokens: 1,
    response_format: { type: "json_schema", json_schema: { name: "s", schema: nest(VALUE + 1) } } }), /the JSON schema nests arrays\/objects more than 64 levels/);
  assert.equal(e.param, "response_format");
  const ok = await oa.chat.completions.create({ model: "m", messages: USER, max_tokens: 1, chat_template_kwargs: { k: nest(VALUE - 1) } });
  assert.equal(ok.choices.length, 1);
});

test("template: recursion driven by a message stops at the depth limit (400), shallow is served", async () => {
  const ok = await toa.chat.completions.create({ model: "m", messages: [{ role: "user", content: "deep" + "x".repeat(10) }], max_tokens: 1 });
  assert.equal(ok.choices.length, 1);
  await refused(toa.chat.completions.create({ model: "m", messages: [{ role: "user", content: "deep" + "x".repeat(1000) }], max_tokens: 1 }),
    /template recursion deeper than 500 levels/);
  const e = await refused(tan.messages.create({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "deep" + "x".repeat(1000) }] }),
    /template recursion deeper than 500 levels/);
  assert.equal(e.error.error.type, "invalid_request_error");
});

test("template: output past the render limit (--request-memory) is a 400 naming the bytes", async () => {
  // 20,000 bytes printed 1,000 times = 20 MB > the 16 MiB default
  await refused(toa.chat.completions.create({ model: "m", messages: [{ role: "user", content: "repeat" + "y".repeat(20000) }], max_tokens: 1 }),
    /template output exceeds 16777216 bytes|template needs more than \d+ bytes of memory, more than --request-memory holds/);
  const r = await get(`${TURL}/health`);
  assert.equal(r.status, 200);
  const ok = await toa.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hello" }], max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

await done();
