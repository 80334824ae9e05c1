// gemma_chat.test.mjs — Gemma 4's chat format through the official clients
// against a real kiln server on a random-weight Gemma 4 model that has Gemma
// 4's control tokens and Google's canonical chat template.
//   node gemma_chat.test.mjs --url URL --template FILE
// A random model never writes a call or a thought by itself, so both are
// made to happen: a required or named tool_choice makes the server open the
// call (`<|tool_call>call:` / `<|tool_call>call:get_weather`) and a grammar
// holds the rest in Gemma 4's syntax (srv_constraint.c: {key:value,...},
// strings between the <|"|> special token, <tool_call|> as the special token),
// so every reply, greedy or sampled, is a call whose arguments validate against
// the tool's schema (Debian's python3-jsonschema); in auto mode a call the
// model opens (logit_bias on <|tool_call>) is held the same way; a conversation that ends in
// a tool response with thinking on makes the template open the thought
// channel, and logit_bias on "a" makes the reasoning "aaaa". The point is
// protocol shape: markup never reaches content, calls and reasoning reach
// every API.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { test, done, assert, arg, post, vfetch } from "./harness.mjs";
import fs from "node:fs";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";

let Template = null;
try { Template = createRequire(import.meta.url)("../tokenizer/node_modules/@huggingface/jinja").Template; } catch { /* skipped */ }
const URL_ = arg("--url");
const TEMPLATE = fs.readFileSync(arg("--template"), "utf8");
const oa = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${URL_}/v1`, maxRetries: 0, timeout: 60000 });
const an = new Anthropic({ fetch: vfetch, apiKey: "none", baseURL: URL_, maxRetries: 0, timeout: 60000 });
const TOOLS = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } }];
const A_TOOLS = [{ name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } } } }];
const R_TOOLS = [{ type: "function", name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } } } }];
const NAMED = { type: "function", function: { name: "get_weather" } };
const ID = {}; // token ids
const force = () => ({ max_tokens: 120, temperature: 0, parallel_tool_calls: false });
// richer tools for the grammar-held calls: bounds, enums, arrays, nested objects, a
// pattern, a bounded string, a key Gemma 4 must quote ("x:y"), a non-strict tool
const G_TOOLS = [
  { type: "function", function: { name: "get_weather", strict: true, parameters: { type: "object", properties: {
    city: { type: "string", maxLength: 24 }, days: { type: "integer", minimum: 1, maximum: 7 }, unit: { enum: ["c", "f"] },
    tags: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 3 } },
    required: ["city", "days", "unit", "tags"], additionalProperties: false } } },
  { type: "function", function: { name: "add", parameters: { type: "object", properties: {
    a: { type: "number" }, b: { type: "integer", minimum: -50, maximum: 50 } }, required: ["a", "b"] } } },
  { type: "function", function: { name: "book", parameters: { type: "object", properties: {
    when: { type: "string", pattern: "^[0-9]{4}-[0-9]{2}$" },
    guests: { type: "array", minItems: 1, maxItems: 2, items: { type: "object", properties: {
      name: { type: "string", minLength: 1, maxLength: 12 }, vip: { type: "boolean" } }, required: ["name", "vip"],
      additionalProperties: false } },
    note: { type: "string", maxLength: 16 }, "x:y": { type: "boolean" } },
    required: ["when", "guests", "note"], additionalProperties: false } } },
];
const G_SCHEMA = Object.fromEntries(G_TOOLS.map((t) => [t.function.name, t.function.parameters]));
// [schema, arguments JSON text] pairs through python3-jsonschema: the failures' messages
function invalid(pairs) {
  const py = "import json,sys\nfrom jsonschema import validators\nout=[]\n" +
    "for s,a in json.load(sys.stdin):\n" +
    "  try: inst=json.loads(a)\n  except Exception as e: out.append('not JSON: %r' % a); continue\n" +
    "  c=validators.validator_for(s)\n  e=[x.message for x in c(s).iter_errors(inst)]\n" +
    "  e and out.append('%s in %s' % (e[0], a))\nprint(json.dumps(out))\n";
  const r = spawnSync("/usr/bin/python3", ["-c", py], { input: JSON.stringify(pairs), encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}
const CHOICES = [["required", "required"], ["named", { type: "function", function: { name: "book" } }]];
const DRAWS = [[0, 0], [1, 1], [1, 2], [1, 3], [1, 4]]; // [temperature, seed]: greedy and sampled
// a finished tool exchange: with thinking on, the template ends the prompt in an open thought channel
const LOOP = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
    function: { name: "get_weather", arguments: "{\"city\": \"Paris\", \"days\": 2}" } }] },
  { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 18, \"sky\": \"cloudy\"}" },
];
const THINK = { chat_template_kwargs: { enable_thinking: true } };

async function tokens(body) {
  const r = await post(`${URL_}/tokenize`, body);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.tokens;
}

test("setup: token ids (Gemma 4's markers are single special tokens)", async () => {
  for (const t of ["}", "a", "<|tool_response>", "<|tool_call>", "<|channel>", "<|\"|>"]) {
    const ids = await tokens({ prompt: t, add_special_tokens: false });
    assert.equal(ids.length, 1, t);
    ID[t] = ids[0];
  }
});

test("chat: prompts equal @huggingface/jinja's render of Google's template (tools, tool_call_id, thinking)", async () => {
  if (!Template) { console.log("  (no @huggingface/jinja in tests/tokenizer/node_modules: skipped)"); return; }
  for (const [messages, kw] of [[LOOP, { enable_thinking: true }], [LOOP.slice(0, 2), {}],
    [[...LOOP, { role: "assistant", content: "18 and cloudy." }, { role: "user", content: "Thanks" }], { enable_thinking: false }]]) {
    const norm = messages.map((m) => m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c,
      function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m);
    const text = new Template(TEMPLATE).render({ messages: norm, tools: TOOLS, add_generation_prompt: true,
      bos_token: "<|begin_of_text|>", ...kw });
    const want = await tokens({ prompt: text, add_special_tokens: false });
    const got = await tokens({ messages, tools: TOOLS, chat_template_kwargs: kw });
    assert.deepEqual(got, want, "kiln's prompt differs from @huggingface/jinja's render");
  }
});

test("chat: a forced call in Gemma 4's syntax comes back as message.tool_calls", async () => {
  const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Weather in Paris?" }],
    tools: TOOLS, tool_choice: NAMED, ...force() });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  assert.match(c.message.tool_calls[0].id, /^call_/);
  assert.equal(c.message.tool_calls[0].function.name, "get_weather");
  const args = JSON.parse(c.message.tool_calls[0].function.arguments);
  assert.equal(typeof args.city, "string"); // required by the schema: the grammar wrote it
  assert.deepEqual(invalid([[TOOLS[0].function.parameters, c.message.tool_calls[0].function.arguments]]), []);
});

test("chat: tool_choice required / named, greedy and sampled: every reply is a valid Gemma 4 call", async () => {
  const pairs = [];
  for (const [label, choice] of CHOICES) for (const [temperature, seed] of DRAWS) for (const par of [false, true]) {
    const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Plan my day." }],
      tools: G_TOOLS, tool_choice: choice, max_tokens: 160, temperature, seed, parallel_tool_calls: par });
    const c = r.choices[0], why = `${label} t=${temperature} seed=${seed} par=${par}: ${JSON.stringify(c)}`;
    assert.equal(c.finish_reason, "tool_calls", why);
    assert.equal(c.message.content, null, why);
    assert.ok(c.message.tool_calls.length >= 1 && (par || c.message.tool_calls.length === 1), why);
    for (const tc of c.message.tool_calls) {
      assert.ok(label === "required" ? tc.function.name in G_SCHEMA : tc.function.name === "book", why);
      pairs.push([G_SCHEMA[tc.function.name], tc.function.arguments]);
    }
  }
  assert.deepEqual(invalid(pairs), []);
});

test("auto: a call the model opens itself (<|tool_call>) is held the same way, greedy and sampled", async () => {
  // the random model is made to open a call: logit_bias on the <|tool_call> token (the grammar's trigger)
  const pairs = [];
  for (const [temperature, seed] of DRAWS) for (const par of [false, true]) {
    const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Anything." }],
      tools: G_TOOLS, max_tokens: 200, temperature, seed, parallel_tool_calls: par,
      logit_bias: { [ID["<|tool_call>"]]: 100 } });
    const c = r.choices[0], why = `t=${temperature} seed=${seed} par=${par}: ${JSON.stringify(c)}`;
    assert.equal(c.finish_reason, "tool_calls", why);
    assert.ok(c.message.tool_calls.length >= 1 && (par || c.message.tool_calls.length === 1), why);
    for (const tc of c.message.tool_calls) {
      assert.ok(tc.function.name in G_SCHEMA, why);
      pairs.push([G_SCHEMA[tc.function.name], tc.function.arguments]);
    }
  }
  assert.deepEqual(invalid(pairs), []);
  // without the bias the model writes text: the grammar waits for a trigger that never comes
  const t = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Anything." }],
    tools: G_TOOLS, max_tokens: 8, temperature: 0 });
  assert.equal(t.choices[0].finish_reason, "length");
  assert.ok(t.choices[0].message.content.length > 0 && !t.choices[0].message.tool_calls);
});

test("chat: streamed, a grammar-held call's argument fragments concatenate to the unstreamed arguments", async () => {
  const body = { model: "x", messages: [{ role: "user", content: "Book it." }], tools: G_TOOLS, max_tokens: 160,
    tool_choice: "required", temperature: 1, seed: 7, parallel_tool_calls: false };
  const whole = (await oa.chat.completions.create(body)).choices[0].message.tool_calls[0].function;
  const s = await oa.chat.completions.create({ ...body, stream: true });
  const frags = []; let name = null;
  for await (const ch of s) for (const c of ch.choices) for (const d of c.delta.tool_calls ?? []) {
    if (d.function?.name) name = d.function.name;
    if (d.function?.arguments) frags.push(d.function.arguments);
  }
  assert.equal(name, whole.name);
  assert.equal(frags.join(""), whole.arguments);
  assert.ok(frags.length >= 2, JSON.stringify(frags));
  assert.deepEqual(invalid([[G_SCHEMA[name], whole.arguments]]), []);
});

test("batch: grammar-held Gemma 4 calls beside free rows in one step, each equal to itself alone", async () => {
  const reqs = [];
  for (let i = 0; i < 4; i++) reqs.push({ model: "x", messages: [{ role: "user", content: `Task ${i}` }], tools: G_TOOLS,
    tool_choice: i % 2 ? CHOICES[1][1] : "required", max_tokens: 96, temperature: 1, seed: 20 + i, parallel_tool_calls: false });
  for (let i = 0; i < 4; i++) reqs.push({ model: "x", messages: [{ role: "user", content: `Chat ${i}` }],
    max_tokens: 48, temperature: 1, seed: 30 + i });
  const key = (r) => JSON.stringify(r.choices[0].message.tool_calls?.map((t) => t.function) ?? r.choices[0].message.content);
  const alone = [];
  for (const q of reqs) alone.push(key(await oa.chat.completions.create(q)));
  const together = (await Promise.all(reqs.map((q) => oa.chat.completions.create(q)))).map(key);
  assert.deepEqual(together, alone);
  const pairs = [];
  for (const k of alone.slice(0, 4)) for (const f of JSON.parse(k)) pairs.push([G_SCHEMA[f.name], f.arguments]);
  assert.equal(pairs.length, 4);
  assert.deepEqual(invalid(pairs), []);
});

test("chat: streamed, the call arrives as deltas and no markup reaches content", async () => {
  const s = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Weather?" }],
    tools: TOOLS, tool_choice: NAMED, stream: true, ...force() });
  const deltas = []; let finish = null, content = "";
  for await (const ch of s) for (const c of ch.choices) {
    if (c.delta.tool_calls) deltas.push(...c.delta.tool_calls);
    if (c.delta.content) content += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, "tool_calls");
  assert.equal(content, "");
  assert.equal(deltas[0].function.name, "get_weather");
  assert.deepEqual(invalid([[TOOLS[0].function.parameters, deltas.map((d) => d.function?.arguments ?? "").join("")]]), []);
});

test("chat: <|tool_response> ends the turn when the request has tools (and is text without)", async () => {
  const bias = { logit_bias: { [ID["<|tool_response>"]]: 100 }, max_tokens: 3, temperature: 0 };
  const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }], tools: TOOLS, ...bias });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.usage.completion_tokens, 1);
  assert.ok(!r.choices[0].message.content, JSON.stringify(r.choices[0].message));
  const p = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }], ...bias });
  assert.equal(p.choices[0].finish_reason, "length");
  assert.equal(p.choices[0].message.content, "<|tool_response>".repeat(3));
});

test("thinking: after a tool response the thought channel is reasoning, plain and streamed", async () => {
  const body = { model: "x", messages: LOOP, tools: TOOLS, logit_bias: { [ID.a]: 100 }, max_tokens: 4, temperature: 0, ...THINK };
  const r = await oa.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.equal(m.reasoning, "aaaa");
  assert.equal(m.reasoning_content, "aaaa");
  assert.ok(!m.content, JSON.stringify(m));
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 4);
  const s = await oa.chat.completions.create({ ...body, stream: true });
  let reasoning = "", content = "";
  for await (const ch of s) for (const c of ch.choices) { reasoning += c.delta.reasoning ?? ""; content += c.delta.content ?? ""; }
  assert.equal(reasoning, "aaaa");
  assert.equal(content, "");
  // thinking off: the same conversation's prompt does not open the channel, the text is content
  const off = await oa.chat.completions.create({ ...body, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.choices[0].message.content, "aaaa");
  assert.ok(!off.choices[0].message.reasoning);
});

test("thinking: the model's own <|channel>thought\\n…<channel|> block is reasoning, the rest content", async () => {
  // the model writes <|channel> (forced); "thought\n" never comes from a random model, so what follows is reasoning
  const r = await oa.chat.completions.create({ model: "x", messages: [{ role: "user", content: "2+2?" }], ...THINK,
    logit_bias: { [ID["<|channel>"]]: 100 }, max_tokens: 1, temperature: 0 });
  const m = r.choices[0].message;
  assert.ok(!m.content, JSON.stringify(m)); // the tag itself never shows
});

test("anthropic: tool_choice any / tool, greedy and sampled: every tool_use input validates", async () => {
  const tools = G_TOOLS.map((t) => ({ name: t.function.name, input_schema: t.function.parameters }));
  const pairs = [];
  for (const choice of [{ type: "any" }, { type: "tool", name: "get_weather" }]) for (const [temperature, seed] of DRAWS) {
    const m = await an.messages.create({ model: "x", max_tokens: 160, messages: [{ role: "user", content: "Go." }],
      tools, tool_choice: { ...choice, disable_parallel_tool_use: true }, temperature, seed });
    const why = `${choice.type} t=${temperature} seed=${seed}: ${JSON.stringify(m.content)}`;
    assert.equal(m.stop_reason, "tool_use", why);
    const tu = m.content.filter((b) => b.type === "tool_use");
    assert.equal(tu.length, 1, why);
    assert.ok(choice.type === "any" ? tu[0].name in G_SCHEMA : tu[0].name === "get_weather", why);
    pairs.push([G_SCHEMA[tu[0].name], JSON.stringify(tu[0].input)]);
  }
  assert.deepEqual(invalid(pairs), []);
});

test("anthropic: a forced tool_use block and a thinking block after tool_result", async () => {
  const m = await an.messages.create({ model: "x", max_tokens: 120, messages: [{ role: "user", content: "Weather?" }],
    tools: A_TOOLS, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true }, temperature: 0 });
  assert.equal(m.stop_reason, "tool_use");
  const tu = m.content.find((b) => b.type === "tool_use");
  assert.ok(tu, JSON.stringify(m.content));
  assert.equal(tu.name, "get_weather");
  assert.deepEqual(invalid([[A_TOOLS[0].input_schema, JSON.stringify(tu.input)]]), []);
  const m2 = await an.messages.create({ model: "x", max_tokens: 4, temperature: 0, tools: A_TOOLS,
    thinking: { type: "enabled", budget_tokens: 1024 }, logit_bias: { [ID.a]: 100 }, messages: [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: [tu] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "sunny" }] }] });
  assert.equal(m2.content[0].type, "thinking", JSON.stringify(m2.content));
  assert.equal(m2.content[0].thinking, "aaaa");
});

test("responses: a function_call item from Gemma 4's syntax", async () => {
  const r = await oa.responses.create({ model: "x", input: "Weather?", tools: R_TOOLS,
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 120,
    temperature: 0, parallel_tool_calls: false });
  const fc = r.output.find((o) => o.type === "function_call");
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, "get_weather");
  assert.deepEqual(invalid([[R_TOOLS[0].parameters, fc.arguments]]), []);
});

test("responses: tool_choice required / named, greedy and sampled: every function_call validates", async () => {
  const tools = G_TOOLS.map((t) => ({ type: "function", ...t.function }));
  const pairs = [];
  for (const choice of ["required", { type: "function", name: "add" }]) for (const [temperature, seed] of DRAWS) {
    const r = await oa.responses.create({ model: "x", input: "Compute.", tools, tool_choice: choice,
      max_output_tokens: 160, temperature, seed, parallel_tool_calls: false });
    const fc = r.output.filter((o) => o.type === "function_call"), why = `t=${temperature} seed=${seed}: ${JSON.stringify(r.output)}`;
    assert.equal(r.status, "completed", why);
    assert.equal(fc.length, 1, why);
    assert.ok(choice === "required" ? fc[0].name in G_SCHEMA : fc[0].name === "add", why);
    pairs.push([G_SCHEMA[fc[0].name], fc[0].arguments]);
  }
  assert.deepEqual(invalid(pairs), []);
});

await done();
