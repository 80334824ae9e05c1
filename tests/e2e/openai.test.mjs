// openai.test.mjs — the official `openai` client against a real kiln server.
//   node openai.test.mjs --text URL (stories260K, completions) --chat URL (ChatML test model)
import OpenAI from "openai";
import { test, done, assert, arg, sse, post, get, vfetch } from "./harness.mjs";

const TEXT = arg("--text"), CHAT = arg("--chat"), THINK = arg("--think");
const textClient = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${TEXT}/v1`, maxRetries: 0, timeout: 60000 });
const chatClient = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${CHAT}/v1`, maxRetries: 0, timeout: 60000 });
const PROMPT = "Once upon a time, there was a little girl named Lily.";
const MSGS = [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "Tell me a story about a dog." }];

async function streamText(client, params) {
  const s = await client.completions.create({ ...params, stream: true });
  let text = "", finish = null, usage = null, n = 0;
  for await (const c of s) {
    n++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) { text += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
  }
  return { text, finish, usage, n };
}

async function streamChat(client, params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  const out = {};
  let usage = null, first = null;
  for await (const c of s) {
    if (!first) first = c;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      const o = (out[ch.index] ??= { content: "", finish: null, role: null });
      if (ch.delta.role) o.role = ch.delta.role;
      if (ch.delta.content) o.content += ch.delta.content;
      if (ch.finish_reason) o.finish = ch.finish_reason;
    }
  }
  return { out, usage, first };
}

test("models.list shows the served id", async () => {
  const m = await textClient.models.list();
  assert.equal(m.data.length, 1);
  assert.equal(m.data[0].id, "stories260K");
  assert.equal(m.data[0].object, "model");
});

test("models.retrieve: the served id; an unknown id is a 404 in OpenAI's error shape", async () => {
  const list = await textClient.models.list();
  const m = await textClient.models.retrieve("stories260K");
  assert.deepEqual({ ...m }, { ...list.data[0] });
  await assert.rejects(textClient.models.retrieve("no-such-model"), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.error.param, "model");
    assert.match(e.error.message, /no-such-model/);
    assert.equal(typeof e.error.type, "string");
    return true;
  });
  const r = await get(`${TEXT}/v1/models/no-such-model`);
  assert.deepEqual(Object.keys(r.json.error).sort(), ["code", "message", "param", "type"]);
});

test("completions: greedy non-stream", async () => {
  const r = await textClient.completions.create({ model: "x", prompt: PROMPT, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.model, "stories260K");
  assert.match(r.id, /^cmpl-/);
  assert.ok(r.choices[0].text.length > 10, r.choices[0].text);
  assert.equal(r.usage.completion_tokens, 24);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, "number");
});

test("completions: stream equals non-stream, include_usage", async () => {
  const p = { model: "x", prompt: PROMPT, max_tokens: 30, temperature: 0 };
  const a = await textClient.completions.create(p);
  const b = await streamText(textClient, { ...p, stream_options: { include_usage: true } });
  assert.equal(b.text, a.choices[0].text);
  assert.equal(b.finish, "length");
  assert.ok(b.usage, "usage chunk");
  assert.equal(b.usage.completion_tokens, 30);
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
  const c = await streamText(textClient, p);
  assert.equal(c.usage, null, "no usage chunk without include_usage");
});

test("completions: token-array prompt and echo", async () => {
  const tok = await post(`${TEXT}/tokenize`, { prompt: PROMPT });
  assert.equal(tok.status, 200);
  const a = await textClient.completions.create({ model: "x", prompt: PROMPT, max_tokens: 10, temperature: 0 });
  const b = await textClient.completions.create({ model: "x", prompt: tok.json.tokens, max_tokens: 10, temperature: 0 });
  assert.equal(b.choices[0].text, a.choices[0].text);
  const e = await textClient.completions.create({ model: "x", prompt: PROMPT, max_tokens: 10, temperature: 0, echo: true });
  assert.equal(e.choices[0].text, PROMPT + a.choices[0].text);
  const d = await post(`${TEXT}/detokenize`, { tokens: tok.json.tokens });
  assert.ok(d.json.prompt.includes("Once upon a time"), d.text);
});

test("completions: logprobs shape", async () => {
  const r = await textClient.completions.create({ model: "x", prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 8);
  assert.equal(lp.token_logprobs.length, 8);
  assert.equal(lp.top_logprobs.length, 8);
  assert.equal(lp.text_offset.length, 8);
  assert.ok(lp.token_logprobs.every((x) => x <= 0));
  assert.ok(Object.keys(lp.top_logprobs[0]).length >= 1);
  // the engine's detokenizer starts a new text: a leading SentencePiece space may be dropped
  assert.equal(lp.tokens.join("").replace(/^ /, ""), r.choices[0].text.replace(/^ /, ""));
});

test("stop string across a token boundary (non-stream and stream)", async () => {
  const base = { model: "x", prompt: PROMPT, max_tokens: 40, temperature: 0, logprobs: 1 };
  const r = await textClient.completions.create(base);
  const toks = r.choices[0].logprobs.tokens, text = r.choices[0].text;
  // a stop string made of the end of one token and the start of the next
  let k = toks.findIndex((t, i) => i > 3 && t.length >= 2 && toks[i + 1] && toks[i + 1].length >= 2);
  assert.ok(k > 0, "no suitable boundary in " + JSON.stringify(toks));
  const stop = toks[k].slice(-2) + toks[k + 1].slice(0, 2);
  const cut = text.indexOf(stop);
  assert.ok(cut >= 0);
  const a = await textClient.completions.create({ ...base, logprobs: undefined, stop: [stop] });
  assert.equal(a.choices[0].text, text.slice(0, cut));
  assert.equal(a.choices[0].finish_reason, "stop");
  const s = await streamText(textClient, { ...base, logprobs: undefined, stop });
  assert.equal(s.text, text.slice(0, cut));
  assert.equal(s.finish, "stop");
  assert.ok(!s.text.includes(stop));
});

test("max_tokens unset runs to EOS or the context end", async () => {
  const r = await textClient.completions.create({ model: "x", prompt: PROMPT, temperature: 0 });
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens + r.usage.completion_tokens <= 128, JSON.stringify(r.usage));
  const big = await textClient.completions.create({ model: "x", prompt: PROMPT, temperature: 0, max_tokens: 100000 });
  assert.ok(big.usage.prompt_tokens + big.usage.completion_tokens <= 128, "clamped to the context");
});

test("a prompt that fills the context is 400 context_length_exceeded", async () => {
  const ids = Array.from({ length: 200 }, (_, i) => 100 + (i % 50));
  await assert.rejects(textClient.completions.create({ model: "x", prompt: ids, max_tokens: 4 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.code, "context_length_exceeded");
    return true;
  });
});

test("n choices with a seed: choice i equals a single request with seed+i", async () => {
  const p = { model: "x", prompt: PROMPT, max_tokens: 16, temperature: 1.0, seed: 1234 };
  const r = await textClient.completions.create({ ...p, n: 3 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (let i = 0; i < 3; i++) {
    const one = await textClient.completions.create({ ...p, seed: 1234 + i });
    assert.equal(r.choices[i].text, one.choices[0].text, `choice ${i}`);
  }
  assert.equal(r.usage.completion_tokens, 48);
});

test("chat: non-stream", async () => {
  const r = await chatClient.chat.completions.create({ model: "x", messages: MSGS, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 10);
});

test("chat: stream equals non-stream; role chunk first; usage chunk", async () => {
  const p = { model: "x", messages: MSGS, max_tokens: 20, temperature: 0, ignore_eos: true };
  const a = await chatClient.chat.completions.create(p);
  const b = await streamChat(chatClient, { ...p, stream_options: { include_usage: true } });
  assert.equal(b.first.choices[0].delta.role, "assistant");
  assert.equal(b.out[0].content, a.choices[0].message.content);
  assert.equal(b.out[0].finish, a.choices[0].finish_reason);
  assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
});

test("chat: raw SSE framing ends with [DONE]", async () => {
  const frames = await sse(`${CHAT}/v1/chat/completions`, { messages: MSGS, max_tokens: 5, temperature: 0, stream: true, stream_options: { include_usage: true } });
  assert.equal(frames.at(-1), "[DONE]");
  const usage = frames.at(-2);
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.total_tokens > 0);
  const fin = frames.filter((f) => f !== "[DONE]" && f.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.equal(frames[0].object, "chat.completion.chunk");
});

test("chat: logprobs + top_logprobs (greedy picks the top one)", async () => {
  const r = await chatClient.chat.completions.create({ model: "x", messages: MSGS, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true });
  const c = r.choices[0].logprobs.content;
  assert.equal(c.length, r.usage.completion_tokens);
  for (const e of c) {
    assert.equal(typeof e.token, "string");
    assert.ok(e.logprob <= 0);
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
});

test("chat: n=2 stream with seed", async () => {
  const p = { model: "x", messages: MSGS, max_tokens: 8, temperature: 1, seed: 99, ignore_eos: true };
  const s = await streamChat(chatClient, { ...p, n: 2 });
  for (let i = 0; i < 2; i++) {
    const one = await chatClient.chat.completions.create({ ...p, seed: 99 + i });
    assert.equal(s.out[i].content, one.choices[0].message.content, `choice ${i}`);
  }
});

test("chat: content parts and developer role are accepted", async () => {
  const r = await chatClient.chat.completions.create({ model: "x", max_tokens: 3, temperature: 0,
    messages: [{ role: "developer", content: "be nice" }, { role: "user", content: [{ type: "text", text: "Hi " }, { type: "text", text: "there" }] }] });
  assert.equal(r.choices[0].message.role, "assistant");
});

test("chat on a model without a template is 400", async () => {
  await assert.rejects(textClient.chat.completions.create({ model: "x", messages: MSGS }), (e) => e.status === 400);
});

test("errors: bad values are 400 naming the param", async () => {
  await assert.rejects(chatClient.chat.completions.create({ model: "x", messages: MSGS, temperature: 5 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "temperature");
    assert.equal(e.type, "invalid_request_error");
    return true;
  });
  await assert.rejects(chatClient.chat.completions.create({ model: "x", messages: [] }), (e) => e.status === 400 && e.param === "messages");
  await assert.rejects(chatClient.chat.completions.create({ model: "x", messages: [{ role: "robot", content: "x" }] }), (e) => e.status === 400);
  const bad = await post(`${CHAT}/v1/chat/completions`, "{not json");
  assert.equal(bad.status, 400);
  assert.ok(bad.json.error.message.includes("invalid JSON"));
});

test("/stats and /metrics", async () => {
  const s = await get(`${CHAT}/stats`);
  assert.equal(s.status, 200);
  for (const k of ["model", "batch", "kv", "prefix_cache", "admission", "uptime_s"]) assert.ok(k in s.json, k);
  assert.ok(s.json.kv.blocks_total > 0);
  const m = await get(`${CHAT}/metrics`);
  assert.equal(m.status, 200);
  assert.match(m.text, /kiln_requests_total\{route="\/v1\/chat\/completions",status="200"\} \d+/);
  assert.match(m.text, /kiln_time_to_first_token_seconds_bucket/);
  assert.match(m.text, /kiln_kv_blocks_total \d+/);
});

test("reasoning: a prompt that opens <think> sends the output to reasoning", async () => {
  const p = { messages: MSGS, max_tokens: 12, temperature: 0, ignore_eos: true };
  const a = (await post(`${THINK}/v1/chat/completions`, p)).json;
  const m = a.choices[0].message;
  assert.equal(typeof m.reasoning, "string", JSON.stringify(m));
  assert.ok(m.reasoning.length > 0);
  assert.equal(m.content, "");
  const frames = await sse(`${THINK}/v1/chat/completions`, { ...p, stream: true });
  const r = frames.filter((f) => f !== "[DONE]").map((f) => f.choices[0]?.delta?.reasoning ?? "").join("");
  assert.equal(r, m.reasoning);
  const off = (await post(`${THINK}/v1/chat/completions`, { ...p, reasoning_effort: "none" })).json;
  assert.equal(off.choices[0].message.reasoning, undefined, JSON.stringify(off.choices[0].message));
  assert.ok(off.choices[0].message.content.length > 0);
});

// The SDK's structured-output helpers with a zod schema: the schema goes out as
// response_format / text.format json_schema (strict), kiln's grammar holds the
// random model to it, and the SDK parses the answer and checks it with zod.
// zod is loaded when these cases run, so that a tests/e2e/node_modules from
// before zod was added fails only them (naming the fix), not the whole file.
let z, zodResponseFormat, zodTextFormat, Pet;
async function zod() {
  if (Pet) return;
  try { ({ z } = await import("zod")); ({ zodResponseFormat, zodTextFormat } = await import("openai/helpers/zod")); }
  catch (e) { throw new Error(`zod is missing: run npm install in tests/e2e (${e.message})`); }
  // (string lengths as patterns: zod's .max counts UTF-16 units, JSON Schema's
  // maxLength code points, so an astral character would make them disagree)
  Pet = z.object({ name: z.string().regex(/^[A-Za-z][a-z ]{0,11}$/), kind: z.enum(["dog", "cat", "bird"]),
    age: z.number().int().min(0).max(30), tags: z.array(z.string().regex(/^[a-z]{1,8}$/)).max(2),
    vaccinated: z.boolean().nullable() });
}
test("chat.completions.parse with a zod schema: the parsed object validates", async () => {
  await zod();
  const parse = chatClient.chat.completions.parse ? chatClient.chat.completions.parse.bind(chatClient.chat.completions)
    : chatClient.beta.chat.completions.parse.bind(chatClient.beta.chat.completions); // v4: under beta
  for (const seed of [1, 2, 3]) {
    const r = await parse({ model: "x", messages: [{ role: "user", content: "Describe a pet." }], max_tokens: 120, seed,
      response_format: zodResponseFormat(Pet, "pet") });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, "stop", m.content);
    assert.ok(m.parsed, m.content);
    const v = Pet.safeParse(m.parsed);
    assert.ok(v.success, `${m.content}: ${JSON.stringify(v.error?.issues)}`);
    assert.deepEqual(m.parsed, JSON.parse(m.content));
    assert.equal(m.refusal, null);
  }
});

test("responses.parse with zodTextFormat: output_parsed validates", async () => {
  await zod();
  if (!chatClient.responses?.parse) { console.log("  (this openai SDK has no responses.parse)"); return; }
  const r = await chatClient.responses.parse({ model: "x", input: "Describe a pet.", max_output_tokens: 120, seed: 4,
    text: { format: zodTextFormat(Pet, "pet") } });
  assert.equal(r.status, "completed");
  assert.ok(r.output_parsed, r.output_text);
  const v = Pet.safeParse(r.output_parsed);
  assert.ok(v.success, `${r.output_text}: ${JSON.stringify(v.error?.issues)}`);
});

await done();
