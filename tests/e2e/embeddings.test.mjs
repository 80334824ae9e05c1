// embeddings.test.mjs — POST /v1/embeddings against a float64 numpy reference
// (embed_ref.py: tools/ref_forward.py's hidden states, pooled and normalised the
// sentence-transformers way) and through the official openai client.
//   node embeddings.test.mjs --url URL --model DIR --pool last|mean|cls [--prompt TEXT]
// DIR is the snapshot the server serves (with modules.json / 1_Pooling / 2_Normalize).
import OpenAI from "openai";
import { execFileSync } from "node:child_process";
import { test, done, assert, arg, post, get, sse, vfetch } from "./harness.mjs";

const URL_ = arg("--url"), MODEL = arg("--model"), POOL = arg("--pool"), PROMPT = arg("--prompt");
const oa = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${URL_}/v1`, maxRetries: 0, timeout: 120000 });
const REF = new URL("./embed_ref.py", import.meta.url).pathname;

function ref(idLists, dims) {
  const a = [REF, "--model", MODEL, "--ids", JSON.stringify(idLists)];
  if (dims) a.push("--dimensions", String(dims));
  return JSON.parse(execFileSync("/usr/bin/python3", a, { encoding: "utf8", maxBuffer: 64 << 20 }));
}
const maxDiff = (a, b) => { assert.equal(a.length, b.length, "lengths"); let m = 0; for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i])); return m; };
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
async function embed(body) {
  const r = await post(`${URL_}/v1/embeddings`, body);
  assert.equal(r.status, 200, r.text);
  return r.json;
}
async function tokenize(text) {
  const r = await post(`${URL_}/tokenize`, { prompt: text });
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}
// deterministic id lists inside the tokenizer's vocabulary
let VOCAB = 0;
function ids(n, seed) {
  const out = [];
  let x = seed * 2654435761 % 4294967296;
  for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; out.push(3 + (x % (VOCAB - 3))); }
  return out;
}

test("setup: vocabulary size from /tokenize", async () => {
  const long = await tokenize("The quick brown fox jumps over the lazy dog. ".repeat(4));
  VOCAB = Math.max(...long) + 1;
  assert.ok(VOCAB > 50, `vocab ${VOCAB}`);
});

test(`${POOL}: token arrays (1, 7, 40 and 300 tokens: past one prefill chunk) match float64 numpy`, async () => {
  const lists = [ids(1, 1), ids(7, 2), ids(40, 3), ids(300, 4)];
  const got = await embed({ input: lists, model: "x" });
  assert.equal(got.object, "list");
  assert.equal(got.data.length, 4);
  assert.equal(got.usage.prompt_tokens, 348);
  assert.equal(got.usage.total_tokens, 348);
  const want = ref(lists);
  got.data.forEach((d, i) => {
    assert.equal(d.index, i);
    assert.equal(d.object, "embedding");
    const m = maxDiff(d.embedding, want[i]);
    assert.ok(m < 2e-4, `input ${i}: max |kiln - numpy| = ${m}`);
  });
  if (POOL !== "mean") got.data.forEach((d) => assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, "normalised"));
});

test(`${POOL}: dimensions truncates (Matryoshka) before normalising`, async () => {
  const lists = [ids(12, 5)];
  const got = await embed({ input: lists, dimensions: 16 });
  assert.equal(got.data[0].embedding.length, 16);
  const m = maxDiff(got.data[0].embedding, ref(lists, 16)[0]);
  assert.ok(m < 2e-4, `max diff ${m}`);
});

test(`${POOL}: a string equals its tokenization (with special tokens) sent as ids`, async () => {
  const text = "Lily found a red ball under the tall tree.";
  const a = await embed({ input: text });
  const b = await embed({ input: await tokenize(text) });
  assert.deepEqual(a.data[0].embedding, b.data[0].embedding);
  assert.equal(a.usage.prompt_tokens, (await tokenize(text)).length);
});

test(`${POOL}: openai SDK embeddings.create (its default base64 and float) agree with each other and the reference`, async () => {
  const input = ["The sun was warm.", "A server answers requests.", "Birds were singing."];
  const b64 = await oa.embeddings.create({ model: "kiln", input });
  const flt = await oa.embeddings.create({ model: "kiln", input, encoding_format: "float" });
  assert.equal(b64.data.length, 3);
  for (let i = 0; i < 3; i++) {
    assert.equal(b64.data[i].index, i);
    // float answers print 9 significant digits: exactly enough to give back every float32
    assert.deepEqual(Array.from(b64.data[i].embedding), flt.data[i].embedding.map(Math.fround),
      "base64 decodes to the same float32s");
  }
  const want = ref(await Promise.all(input.map(tokenize)));
  flt.data.forEach((d, i) => assert.ok(maxDiff(d.embedding, want[i]) < 2e-4));
  assert.ok(flt.usage.prompt_tokens > 0);
});

test(`${POOL}: embeddings do not change with a stream decoding beside them, nor on a repeat (prefix cache)`, async () => {
  const input = [ids(50, 7), ids(20, 8), "Once upon a time there was a girl."];
  const alone = await embed({ input });
  let frames = 0;
  const stream = sse(`${URL_}/v1/completions`, { prompt: "Once upon a time", max_tokens: 60, temperature: 0,
    ignore_eos: true, stream: true }, { onFrame: () => { frames++; } });
  const beside = await embed({ input });
  await stream;
  const again = await embed({ input });
  for (let i = 0; i < input.length; i++) {
    assert.deepEqual(beside.data[i].embedding, alone.data[i].embedding, `input ${i} beside a stream`);
    assert.deepEqual(again.data[i].embedding, alone.data[i].embedding, `input ${i} repeated`);
  }
  assert.ok(frames > 10);
});

test(`${POOL}: 60 inputs in one request (more than the engine queue) all come back, in order`, async () => {
  const lists = Array.from({ length: 60 }, (_, i) => ids(3 + (i % 9), 100 + i));
  const got = await embed({ input: lists });
  assert.equal(got.data.length, 60);
  const want = ref([lists[0], lists[59]]);
  assert.ok(maxDiff(got.data[0].embedding, want[0]) < 2e-4);
  assert.ok(maxDiff(got.data[59].embedding, want[1]) < 2e-4);
  got.data.forEach((d, i) => assert.equal(d.index, i));
});

if (PROMPT) {
  test(`${POOL}: prompt_name prepends the model's named prompt (config_sentence_transformers.json)`, async () => {
    const text = "where is the ball?";
    const a = await embed({ input: text, prompt_name: "query" });
    const b = await embed({ input: PROMPT + text });
    assert.deepEqual(a.data[0].embedding, b.data[0].embedding);
    const c = await embed({ input: text });
    assert.notDeepEqual(a.data[0].embedding, c.data[0].embedding);
  });
}

test(`${POOL}: bad requests get 400 with the field named`, async () => {
  const cases = [
    [{ input: "" }, "input[0]"],
    [{ input: [] }, "input"],
    [{ input: 5 }, "input"],
    [{ input: [[1, -1]] }, "input[0]"],
    [{ input: [[1, 10000000]] }, "input[0]"],
    [{ input: "x", dimensions: 0 }, "dimensions"],
    [{ input: "x", dimensions: 1.5 }, "dimensions"],
    [{ input: "x", encoding_format: "int8" }, "encoding_format"],
    [{ input: "x", prompt_name: "nope" }, "prompt_name"],
  ];
  for (const [body, param] of cases) {
    const r = await post(`${URL_}/v1/embeddings`, body);
    assert.equal(r.status, 400, JSON.stringify(body) + " -> " + r.text);
    assert.equal(r.json.error.param, param, JSON.stringify(body) + " -> " + r.text);
  }
  const tooLong = await post(`${URL_}/v1/embeddings`, { input: [ids(5000, 9)] });
  assert.equal(tooLong.status, 400);
  assert.equal(tooLong.json.error.code, "context_length_exceeded");
  const bad = await post(`${URL_}/v1/embeddings`, "{nope");
  assert.equal(bad.status, 400);
});

test(`${POOL}: /stats counts the embedding requests as finished requests`, async () => {
  const s = await get(`${URL_}/stats`);
  assert.ok(s.json.requests.finished >= 70, JSON.stringify(s.json.requests));
  assert.equal(s.json.requests.failed, 0);
});

await done();
