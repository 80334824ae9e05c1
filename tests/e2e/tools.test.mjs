// tools.test.mjs — tool calls through the official clients against a real kiln
// server on a random-weight model with a tool-capable ChatML template.
//   node tools.test.mjs --url URL (tools template) --plain URL (template without tools)
// A random model never writes a tool call by itself, so calls are forced: a
// named tool_choice makes the server open the call for the model
// (`<tool_call>\n{"name": N, "arguments": `) and the grammar of the call
// (docs/structured-output.md) holds the rest to the syntax and the tool's
// schema; logit_bias on "}" makes the arguments `{}` and the length budget
// closes the call in time. The point is protocol shape, not quality.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { test, done, assert, arg, post, vfetch } from "./harness.mjs";
import fs from "node:fs";
import { createRequire } from "node:module";

// @huggingface/jinja (installed for the tokenizer tests), to check the prompt kiln renders
let Template = null;
try { Template = createRequire(import.meta.url)("../tokenizer/node_modules/@huggingface/jinja").Template; } catch { /* skipped */ }
const TEMPLATE = fs.readFileSync(new URL("./tools_template.jinja", import.meta.url), "utf8");
// The ids kiln would prompt with equal the ids of @huggingface/jinja's render of the same conversation.
async function samePromptAsJinja(messages, tools) {
  if (!Template) return;
  const norm = messages.map((m) => m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function,
    arguments: typeof c.function.arguments === "string" ? JSON.parse(c.function.arguments) : c.function.arguments } })) } : m);
  const text = new Template(TEMPLATE).render({ messages: norm, tools, add_generation_prompt: true, bos_token: "", eos_token: "<|im_end|>" });
  const want = await post(`${URL_}/tokenize`, { prompt: text, add_special_tokens: false });
  const got = await post(`${URL_}/tokenize`, { messages, tools });
  assert.deepEqual(got.json.tokens, want.json.tokens, "kiln's prompt differs from @huggingface/jinja's render");
}

const URL_ = arg("--url"), PLAIN = arg("--plain"), THINK = arg("--think");
const oa = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${URL_}/v1`, maxRetries: 0, timeout: 60000 });
const an = new Anthropic({ fetch: vfetch, apiKey: "none", baseURL: URL_, maxRetries: 0, timeout: 60000 });
const TOOLS = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, additionalProperties: false } } }];
const A_TOOLS = [{ name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, additionalProperties: false } }];
let BRACE; // token id of "}"
const force = () => ({ logit_bias: { [BRACE]: 100 }, max_tokens: 40, temperature: 0, parallel_tool_calls: false });
const NAMED = { type: "function", function: { name: "get_weather" } };
// arguments valid under get_weather's schema: an object, at most a string "city"
function validArgs(a) {
  const o = typeof a === "string" ? JSON.parse(a) : a;
  assert.equal(typeof o, "object"); assert.ok(o && !Array.isArray(o), JSON.stringify(o));
  for (const [k, v] of Object.entries(o)) { assert.equal(k, "city"); assert.equal(typeof v, "string"); }
  return o;
}

test("setup: the id of '}'", async () => {
  const r = await post(`${URL_}/tokenize`, { prompt: "}", add_special_tokens: false });
  assert.equal(r.json.count, 1);
  BRACE = r.json.tokens[0];
});

test("chat: a forced call comes back as message.tool_calls", async () => {
  const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Weather in Paris?" }],
    tools: TOOLS, tool_choice: NAMED, ...force() });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  const tc = c.message.tool_calls[0];
  assert.match(tc.id, /^call_[0-9a-f]{24}$/);
  assert.equal(tc.type, "function");
  assert.equal(tc.function.name, "get_weather");
  validArgs(tc.function.arguments);
});

test("chat: streamed tool call deltas (index, id, name, then arguments)", async () => {
  const s = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Weather?" }],
    tools: TOOLS, tool_choice: NAMED, stream: true, ...force() });
  const deltas = []; let finish = null, content = "";
  for await (const ch of s) for (const c of ch.choices) {
    if (c.delta.tool_calls) deltas.push(...c.delta.tool_calls);
    if (c.delta.content) content += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, "tool_calls");
  assert.equal(content, "", "no markup leaks into content");
  assert.equal(deltas[0].index, 0);
  assert.match(deltas[0].id, /^call_/);
  assert.equal(deltas[0].function.name, "get_weather");
  const args = deltas.filter((d) => d.index === 0).map((d) => d.function?.arguments ?? "").join("");
  validArgs(args);
  // the client's own accumulator agrees
  const s2 = oa.beta.chat.completions.stream({ model: "x", messages: [{ role: "user", content: "Weather?" }],
    tools: TOOLS, tool_choice: NAMED, ...force() });
  const final = await s2.finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls[0].function.name, "get_weather");
});

// Without the "}" bias the grammar lets the model write a long "city": its
// arguments must arrive in several fragments, as tokens come, and the
// fragments must concatenate to the arguments of the same request unstreamed.
const long = () => ({ max_tokens: 48, temperature: 0, parallel_tool_calls: false });
test("chat: arguments stream in fragments that concatenate to the unstreamed arguments", async () => {
  const req = { model: "x", messages: [{ role: "user", content: "Weather in a long-named city?" }], tools: TOOLS, tool_choice: NAMED, ...long() };
  const whole = (await oa.chat.completions.create(req)).choices[0].message.tool_calls[0].function.arguments;
  validArgs(whole);
  const s = await oa.chat.completions.create({ ...req, stream: true });
  const frags = [];
  for await (const ch of s) for (const c of ch.choices) for (const d of c.delta.tool_calls ?? []) {
    assert.equal(d.index, 0);
    if (d.function?.arguments) frags.push(d.function.arguments);
  }
  assert.ok(frags.length > 3, `${frags.length} fragments: ${JSON.stringify(frags)}`);
  assert.equal(frags.join(""), whole);
});

test("responses: function_call_arguments.delta fragments, .done and output_item.done carry them whole", async () => {
  const req = { model: "x", input: "Weather in a long-named city?", tools: R_TOOLS, tool_choice: R_NAMED, max_output_tokens: 48,
    temperature: 0, parallel_tool_calls: false };
  const whole = (await oa.responses.create(req)).output.find((o) => o.type === "function_call").arguments;
  const s = await oa.responses.create({ ...req, stream: true });
  const frags = []; let added = null, doneArgs = null, item = null;
  for await (const e of s) {
    if (e.type === "response.output_item.added" && e.item.type === "function_call") added = e.item;
    if (e.type === "response.function_call_arguments.delta") { assert.equal(e.item_id, added.id); frags.push(e.delta); }
    if (e.type === "response.function_call_arguments.done") doneArgs = e.arguments;
    if (e.type === "response.output_item.done" && e.item.type === "function_call") item = e.item;
  }
  assert.equal(added.name, "get_weather"); assert.equal(added.arguments, ""); assert.equal(added.status, "in_progress");
  assert.ok(frags.length > 3, `${frags.length} fragments`);
  assert.equal(frags.join(""), whole); assert.equal(doneArgs, whole);
  assert.equal(item.arguments, whole); assert.equal(item.status, "completed"); assert.equal(item.call_id, added.call_id);
});

test("anthropic: input_json_delta fragments concatenate to the unstreamed input", async () => {
  const req = { model: "x", max_tokens: 48, messages: [{ role: "user", content: "Weather in a long-named city?" }], tools: A_TOOLS,
    tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true }, temperature: 0 };
  const whole = (await an.messages.create(req)).content.find((b) => b.type === "tool_use").input;
  const s = an.messages.stream(req);
  const frags = [];
  s.on("streamEvent", (e) => { if (e.type === "content_block_delta" && e.delta.type === "input_json_delta") frags.push(e.delta.partial_json); });
  const m = await s.finalMessage();
  assert.ok(frags.length > 3, `${frags.length} fragments`);
  assert.deepEqual(JSON.parse(frags.join("")), whole);
  assert.deepEqual(m.content.find((b) => b.type === "tool_use").input, whole);
});

test("chat: three-step loop (call → result → call → answer); each prompt equals @huggingface/jinja's", async () => {
  if (!Template) console.log("  (no @huggingface/jinja in tests/tokenizer/node_modules: prompt comparison skipped)");
  const msgs = [{ role: "system", content: "Use tools." }, { role: "user", content: "Weather in Paris and Rome?" }];
  for (let step = 0; step < 2; step++) {
    await samePromptAsJinja(msgs, TOOLS);
    const r = await oa.chat.completions.create({ model: "x", messages: msgs, tools: TOOLS, tool_choice: NAMED, ...force() });
    const m = r.choices[0].message;
    assert.equal(m.tool_calls.length, 1);
    msgs.push({ role: "assistant", content: null, tool_calls: m.tool_calls });
    msgs.push({ role: "tool", tool_call_id: m.tool_calls[0].id, content: step ? "rainy" : "sunny" });
  }
  // arguments as an object are accepted too (normalised for the template)
  msgs[2].tool_calls = [{ id: "call_x", type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }];
  await samePromptAsJinja(msgs, TOOLS);
  const r = await oa.chat.completions.create({ model: "x", messages: msgs, tools: TOOLS, max_tokens: 4, temperature: 0 });
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.equal(r.choices[0].message.tool_calls, undefined);
  const t = await post(`${URL_}/tokenize`, { messages: msgs, tools: TOOLS });
  assert.ok(t.json.count > 0);
});

test("chat: tool_choice none hides the tools; parallel_tool_calls is accepted", async () => {
  const with_ = await post(`${URL_}/tokenize`, { messages: [{ role: "user", content: "hi" }], tools: TOOLS });
  const none = await post(`${URL_}/tokenize`, { messages: [{ role: "user", content: "hi" }], tools: TOOLS, tool_choice: "none" });
  assert.ok(with_.json.count > none.json.count + 20, `${with_.json.count} vs ${none.json.count}`);
  const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }], tools: TOOLS,
    tool_choice: "auto", parallel_tool_calls: false, max_tokens: 3, temperature: 0 });
  assert.ok(r.choices[0].message);
});

test("chat: bad tool requests are clear 400s", async () => {
  let r = await post(`${URL_}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], tools: TOOLS,
    tool_choice: { type: "function", function: { name: "nope" } } });
  assert.equal(r.status, 400); assert.equal(r.json.error.param, "tool_choice");
  r = await post(`${URL_}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], tools: [{ type: "function" }] });
  assert.equal(r.status, 400); assert.equal(r.json.error.param, "tools");
  r = await post(`${PLAIN}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], tools: TOOLS });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /does not support tools/);
});

test("anthropic: a forced tool_use block, stop_reason tool_use", async () => {
  const m = await an.messages.create({ model: "x", max_tokens: 40, messages: [{ role: "user", content: "Weather?" }],
    tools: A_TOOLS, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true }, temperature: 0,
    logit_bias: { [BRACE]: 100 } });
  assert.equal(m.stop_reason, "tool_use");
  const tu = m.content.find((b) => b.type === "tool_use");
  assert.ok(tu, JSON.stringify(m.content));
  assert.match(tu.id, /^toolu_/);
  assert.equal(tu.name, "get_weather");
  validArgs(tu.input);
});

test("anthropic: streaming input_json_delta and a tool_result round trip", async () => {
  const s = an.messages.stream({ model: "x", max_tokens: 40, messages: [{ role: "user", content: "Weather?" }],
    tools: A_TOOLS, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true }, temperature: 0,
    logit_bias: { [BRACE]: 100 } });
  const types = [];
  s.on("streamEvent", (e) => types.push(e.type === "content_block_delta" ? e.delta.type : e.type));
  const m = await s.finalMessage();
  assert.ok(types.includes("input_json_delta"), types.join(","));
  assert.equal(types[0], "message_start"); assert.equal(types.at(-1), "message_stop");
  const tu = m.content.find((b) => b.type === "tool_use");
  validArgs(tu.input);
  const m2 = await an.messages.create({ model: "x", max_tokens: 3, temperature: 0, tools: A_TOOLS, messages: [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: [{ type: "thinking", thinking: "look it up", signature: "" }, tu] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "sunny" }] }] });
  assert.equal(m2.type, "message");
  assert.ok(["end_turn", "max_tokens"].includes(m2.stop_reason));
});

test("anthropic: count_tokens, image blocks refused", async () => {
  const c = await post(`${URL_}/v1/messages/count_tokens`, { model: "x", messages: [{ role: "user", content: "hi" }], tools: A_TOOLS });
  assert.equal(c.status, 200);
  const t = await post(`${URL_}/tokenize`, { messages: [{ role: "user", content: "hi" }], tools: TOOLS });
  assert.equal(c.json.input_tokens, t.json.count);
  const r = await post(`${URL_}/v1/messages`, { model: "x", max_tokens: 4, messages: [{ role: "user", content: [
    { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] });
  assert.equal(r.status, 400);
  assert.equal(r.json.type, "error");
  assert.match(r.json.error.message, /image/);
});

const R_TOOLS = [{ type: "function", name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, additionalProperties: false } }];
const R_NAMED = { type: "function", name: "get_weather" };
const rforce = () => ({ logit_bias: { [BRACE]: 100 }, max_output_tokens: 40, temperature: 0, parallel_tool_calls: false });

test("responses: text output, usage, and previous_response_id continues the conversation", async () => {
  const r1 = await oa.responses.create({ model: "x", input: "Hello there", instructions: "Be brief.", max_output_tokens: 4, temperature: 0 });
  assert.match(r1.id, /^resp_/);
  assert.equal(r1.object, "response");
  assert.equal(r1.status, "incomplete");
  assert.equal(r1.output[0].type, "message");
  assert.equal(r1.output[0].content[0].type, "output_text");
  assert.equal(typeof r1.output_text, "string");
  assert.equal(r1.usage.output_tokens, 4);
  const r2 = await oa.responses.create({ model: "x", input: [{ role: "user", content: "And then?" }],
    instructions: "Be brief.", previous_response_id: r1.id, max_output_tokens: 2, temperature: 0 });
  assert.equal(r2.previous_response_id, r1.id);
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens, "the follow-up sees the earlier turns");
  assert.ok(r2.usage.input_tokens_details.cached_tokens > 0, "and reuses the prefix cache");
  const st = await (await fetch(`${URL_}/stats`)).json();
  assert.ok(st.responses_store.entries >= 2 && st.responses_store.hits >= 1, JSON.stringify(st.responses_store));
});

test("responses: unknown previous_response_id is a 404", async () => {
  await assert.rejects(oa.responses.create({ model: "x", input: "hi", previous_response_id: "resp_nope", max_output_tokens: 2 }),
    (e) => e.status === 404 && /resp_nope/.test(e.message));
});

test("responses: function_call → function_call_output round trip", async () => {
  const r = await oa.responses.create({ model: "x", input: "Weather?", tools: R_TOOLS, tool_choice: R_NAMED, ...rforce() });
  const fc = r.output.find((o) => o.type === "function_call");
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, "get_weather");
  assert.match(fc.call_id, /^call_/);
  validArgs(fc.arguments);
  const r2 = await oa.responses.create({ model: "x", previous_response_id: r.id, tools: R_TOOLS, max_output_tokens: 2, temperature: 0,
    input: [{ type: "function_call_output", call_id: fc.call_id, output: "sunny" }] });
  assert.equal(r2.object, "response");
  // without the store: the whole conversation as items
  const r3 = await oa.responses.create({ model: "x", store: false, tools: R_TOOLS, max_output_tokens: 2, temperature: 0,
    input: [{ role: "user", content: "Weather?" }, fc, { type: "function_call_output", call_id: fc.call_id, output: "sunny" }] });
  assert.equal(r3.store, false);
});

test("responses: streaming events", async () => {
  const s = await oa.responses.create({ model: "x", input: "Weather?", stream: true, tools: R_TOOLS, tool_choice: R_NAMED, ...rforce() });
  const types = []; let done = null;
  for await (const e of s) { types.push(e.type); if (e.type === "response.completed") done = e.response; }
  assert.deepEqual(types.slice(0, 2), ["response.created", "response.in_progress"]);
  for (const t of ["response.output_item.added", "response.function_call_arguments.delta",
                   "response.function_call_arguments.done", "response.output_item.done"]) assert.ok(types.includes(t), t);
  assert.equal(types.at(-1), "response.completed");
  assert.equal(done.output[0].type, "function_call");
  const s2 = await oa.responses.create({ model: "x", input: "Hi", stream: true, max_output_tokens: 3, temperature: 0 });
  const t2 = []; let text = "";
  for await (const e of s2) { t2.push(e.type); if (e.type === "response.output_text.delta") text += e.delta; if (e.type === "response.output_text.done") assert.equal(e.text, text); }
  for (const t of ["response.content_part.added", "response.output_text.delta", "response.output_text.done"]) assert.ok(t2.includes(t), t);
});

const ot = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${THINK}/v1`, maxRetries: 0, timeout: 60000 });
const at = new Anthropic({ fetch: vfetch, apiKey: "none", baseURL: THINK, maxRetries: 0, timeout: 60000 });

test("thinking: reasoning and reasoning_content, reasoning_tokens counted", async () => {
  const r = await ot.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0 });
  const m = r.choices[0].message;
  assert.ok(m.reasoning.length > 0);
  assert.equal(m.reasoning_content, m.reasoning);
  const d = r.usage.completion_tokens_details.reasoning_tokens;
  assert.ok(d > 0 && d <= r.usage.completion_tokens, JSON.stringify(r.usage));
  const s = await ot.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let a = "", b = "", usage = null;
  for await (const ch of s) { if (ch.usage) usage = ch.usage; for (const c of ch.choices) { a += c.delta.reasoning ?? ""; b += c.delta.reasoning_content ?? ""; } }
  assert.equal(a, m.reasoning); assert.equal(b, m.reasoning);
  assert.equal(usage.completion_tokens_details.reasoning_tokens, d);
});

test("thinking: a forced call after an open <think> block", async () => {
  const r = await ot.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Weather?" }],
    tools: TOOLS, tool_choice: NAMED, ...force() });
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(r.choices[0].message.tool_calls[0].function.name, "get_weather");
});

test("thinking: Anthropic thinking blocks, plain and streamed (thinking_delta)", async () => {
  const m = await at.messages.create({ model: "x", max_tokens: 4, temperature: 0, messages: [{ role: "user", content: "hi" }] });
  assert.equal(m.content[0].type, "thinking");
  const s = at.messages.stream({ model: "x", max_tokens: 4, temperature: 0, messages: [{ role: "user", content: "hi" }] });
  const types = [];
  let thinking = ""; // this SDK version (0.36) predates thinking: collect the deltas ourselves
  s.on("streamEvent", (e) => {
    types.push(e.type === "content_block_delta" ? e.delta.type : e.type);
    if (e.type === "content_block_delta" && e.delta.type === "thinking_delta") thinking += e.delta.thinking;
  });
  await s.finalMessage();
  assert.ok(types.includes("thinking_delta"), types.join(","));
  assert.equal(thinking, m.content[0].thinking);
});

test("thinking: Responses reasoning item and summary deltas", async () => {
  const r = await ot.responses.create({ model: "x", input: "hi", max_output_tokens: 4, temperature: 0 });
  assert.equal(r.output[0].type, "reasoning");
  assert.ok(r.output[0].summary[0].text.length > 0);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  const s = await ot.responses.create({ model: "x", input: "hi", max_output_tokens: 4, temperature: 0, stream: true });
  let text = "";
  for await (const e of s) if (e.type === "response.reasoning_summary_text.delta") text += e.delta;
  assert.equal(text, r.output[0].summary[0].text);
});

await done();
