// soak.mjs — N streaming clients against one running kiln server, through the
// official openai and @anthropic-ai/sdk clients, over /v1/chat/completions,
// /v1/completions, /v1/responses and /v1/messages, a fraction of them hanging
// up mid-stream. Afterwards the server must be back where it was:
//
//   node tests/soak/soak.mjs --url URL --pid PID [--clients 64] [--duration 600]
//        [--warmup 20] [--disconnect 0.3] [--rss-tolerance 0.10] [--seed 1]
//
// Phases: warm-up (all clients, --warmup s), then idle: the baseline is read
// (RSS, open fds and threads of PID from /proc, /stats); then the soak
// (--duration s); then the clients stop and the server is given up to 180 s to
// settle (nothing running, the SSD tier's write queue written out). Checks (each printed "ok"/"FAIL"; exit status 1 on any failure):
//   - every stream that was not hung up on ended well-formed (per API: the
//     terminal event, finish reason, text deltas == the final text, usage);
//   - no request failed inside the server (/stats requests.failed unchanged),
//     no HTTP error but 429/503 back-pressure (counted, must stay under 1 %);
//   - hung-up streams were cancelled by the server (requests.cancelled grew);
//   - afterwards: KV blocks in use 0, nothing running or queued, no HTTP
//     request in flight; open fds and threads back to the baseline; RSS
//     within --rss-tolerance of the baseline;
//   - the server still answers a chat request with text.
// Last line: one JSON object with the figures (for docs/testing.md).
import fs from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";

const require = createRequire(new URL("../e2e/package.json", import.meta.url));
const OpenAI = require("openai");
const Anthropic = require("@anthropic-ai/sdk");

const argv = process.argv;
const arg = (k, d) => { const i = argv.indexOf(k); return i >= 0 ? argv[i + 1] : d; };
const URL_ = arg("--url"), PID = Number(arg("--pid"));
const CLIENTS = Number(arg("--clients", 64)), DURATION = Number(arg("--duration", 600));
const WARMUP = Number(arg("--warmup", 20)), DISCONNECT = Number(arg("--disconnect", 0.3));
const RSS_TOL = Number(arg("--rss-tolerance", 0.10));
let seed = Number(arg("--seed", 1)) >>> 0;
if (!URL_ || !PID) { console.error("usage: soak.mjs --url URL --pid PID [...]"); process.exit(2); }

// A small deterministic PRNG (xorshift32): the same seed gives the same mix.
const rand = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 4294967296; };
const pick = (a) => a[Math.floor(rand() * a.length)];

// No keep-alive: every request opens and closes its own connection, so the
// server's connection table and threads churn, and nothing of ours stays open
// when the fds are counted.
const agent = new http.Agent({ keepAlive: false });
const oa = new OpenAI({ apiKey: "none", baseURL: `${URL_}/v1`, maxRetries: 0, timeout: 120000, httpAgent: agent });
const an = new Anthropic({ apiKey: "none", baseURL: URL_, maxRetries: 0, timeout: 120000, httpAgent: agent });

// ---------------------------------------------------------------- process figures
const proc = () => {
  const st = fs.readFileSync(`/proc/${PID}/status`, "utf8");
  const kb = (k) => Number((st.match(new RegExp(`^${k}:\\s+(\\d+)`, "m")) || [0, 0])[1]);
  return { rss_kb: kb("VmRSS"), hwm_kb: kb("VmHWM"), threads: kb("Threads"), fds: fs.readdirSync(`/proc/${PID}/fd`).length };
};
const stats = async () => (await fetch(`${URL_}/stats`, { headers: { connection: "close" } })).json();
const kvActive = (s) => s.kv.groups.reduce((n, g) => n + g.active, 0);
// Nothing running or queued, and the SSD tier's write queue written out.
const idle = (s) => kvActive(s) === 0 && s.batch.active === 0 && s.batch.queued === 0 &&
  s.batch.http_in_flight <= 1 && (!s.ssd_cache || s.ssd_cache.pending === 0);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- one request
const PREFIXES = ["You are a careful assistant. ", "Answer in one short paragraph. ", "Tell a story about a fox. ", ""];
const WORDS = ["river", "stone", "lamp", "cloud", "apple", "window", "train", "garden", "paper", "violin"];
const prompt = () => pick(PREFIXES) + Array.from({ length: 3 + Math.floor(rand() * 20) }, () => pick(WORDS)).join(" ");

const tally = { started: 0, completed: 0, hung_up: 0, malformed: 0, backpressure: 0, http_errors: 0, other_errors: 0, by_api: {} };
const problems = [];
const bad = (api, why) => { tally.malformed++; if (problems.length < 20) problems.push(`${api}: ${why}`); };

// Streams one request; when hangAt > 0, aborts after that many events.
async function one(api, hangAt) {
  const ctl = new AbortController();
  const max = 8 + Math.floor(rand() * 56);
  const text = prompt();
  let n = 0, hung = false;
  const tick = () => { if (hangAt && ++n >= hangAt) { hung = true; ctl.abort(); return true; } return false; };
  const opts = { signal: ctl.signal };
  try {
    if (api === "chat") {
      const s = await oa.chat.completions.create({ model: "m", messages: [{ role: "user", content: text }], max_tokens: max,
        temperature: 0.8, stream: true, stream_options: { include_usage: true } }, opts);
      let out = "", finish = null, usage = null, id = null;
      for await (const c of s) {
        if (tick()) break;
        if (c.object !== "chat.completion.chunk") return bad(api, `object ${c.object}`);
        if (id && c.id !== id) return bad(api, "id changed"); id = c.id;
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) { out += ch.delta?.content ?? ""; if (ch.finish_reason) { if (finish) return bad(api, "two finish reasons"); finish = ch.finish_reason; } }
      }
      if (hung) return "hung";
      if (!["stop", "length"].includes(finish)) return bad(api, `finish ${finish}`);
      if (!usage || usage.completion_tokens < 1 || usage.completion_tokens > max) return bad(api, `usage ${JSON.stringify(usage)}`);
    } else if (api === "completions") {
      const s = await oa.completions.create({ model: "m", prompt: text, max_tokens: max, temperature: 0.8, stream: true,
        stream_options: { include_usage: true } }, opts);
      let finish = null, usage = null;
      for await (const c of s) {
        if (tick()) break;
        if (c.object !== "text_completion") return bad(api, `object ${c.object}`);
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) if (ch.finish_reason) finish = ch.finish_reason;
      }
      if (hung) return "hung";
      if (!["stop", "length"].includes(finish)) return bad(api, `finish ${finish}`);
      if (!usage || usage.completion_tokens > max) return bad(api, `usage ${JSON.stringify(usage)}`);
    } else if (api === "responses") {
      const s = await oa.responses.create({ model: "m", input: text, max_output_tokens: max, temperature: 0.8, stream: true, store: false }, opts);
      let first = null, last = null, seq = -1, deltas = "";
      for await (const e of s) {
        if (tick()) break;
        if (!first) first = e.type;
        if (e.sequence_number <= seq) return bad(api, "sequence_number not increasing"); seq = e.sequence_number;
        if (e.type === "response.output_text.delta") deltas += e.delta;
        last = e;
      }
      if (hung) return "hung";
      if (first !== "response.created") return bad(api, `first event ${first}`);
      if (!last || !["response.completed", "response.incomplete"].includes(last.type)) return bad(api, `last event ${last?.type}`);
      const final = (last.response.output || []).filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
      if (final !== deltas) return bad(api, "deltas != final text");
      if (last.response.usage.output_tokens > max) return bad(api, "usage over max_output_tokens");
    } else {
      const s = await an.messages.create({ model: "m", max_tokens: max, temperature: 0.8, stream: true,
        messages: [{ role: "user", content: text }] }, opts);
      const types = []; let deltas = "", stop = null, usage = null, open = 0;
      for await (const e of s) {
        if (tick()) break;
        types.push(e.type);
        if (e.type === "content_block_start") open++;
        if (e.type === "content_block_stop") open--;
        if (e.type === "content_block_delta" && e.delta.type === "text_delta") deltas += e.delta.text;
        if (e.type === "message_delta") { stop = e.delta.stop_reason; usage = e.usage; }
      }
      if (hung) return "hung";
      if (types[0] !== "message_start" || types[types.length - 1] !== "message_stop") return bad(api, `events ${types[0]}..${types[types.length - 1]}`);
      if (open !== 0) return bad(api, "unbalanced content blocks");
      if (!["end_turn", "max_tokens", "stop_sequence"].includes(stop)) return bad(api, `stop_reason ${stop}`);
      if (!usage || usage.output_tokens > max) return bad(api, `usage ${JSON.stringify(usage)}`);
      void deltas;
    }
    return "ok";
  } catch (e) {
    if (hung || ctl.signal.aborted) return "hung";
    if (e.status === 429 || e.status === 503) return "backpressure";
    if (e.status) { if (problems.length < 20) problems.push(`${api}: HTTP ${e.status} ${e.message}`); return "http"; }
    if (problems.length < 20) problems.push(`${api}: ${e.message}`);
    return "other";
  }
}

const APIS = ["chat", "completions", "responses", "messages"];
async function client(until) {
  while (Date.now() < until) {
    const api = pick(APIS);
    const hangAt = rand() < DISCONNECT ? 1 + Math.floor(rand() * 6) : 0;
    tally.started++;
    const r = await one(api, hangAt);
    const b = (tally.by_api[api] ??= { ok: 0, hung: 0, other: 0 });
    if (r === "ok") { tally.completed++; b.ok++; }
    else if (r === "hung") { tally.hung_up++; b.hung++; }
    else if (r === "backpressure") { tally.backpressure++; b.other++; await sleep(200); }
    else if (r === "http") { tally.http_errors++; b.other++; }
    else if (r === "other") { tally.other_errors++; b.other++; }
    else b.other++; // malformed (counted in bad())
  }
}
const run = (secs) => Promise.all(Array.from({ length: CLIENTS }, () => client(Date.now() + secs * 1000)));

// Polls until f() is true or ms pass; returns the last value of f().
async function settle(f, ms) {
  const end = Date.now() + ms;
  let v = await f();
  while (!v && Date.now() < end) { await sleep(250); v = await f(); }
  return v;
}

// ---------------------------------------------------------------- main
let fails = 0;
const check = (name, ok, detail = "") => { console.log(`${ok ? "ok  " : "FAIL"} ${name}${detail ? ` (${detail})` : ""}`); if (!ok) fails++; };
const t0 = Date.now();
console.log(`soak: ${CLIENTS} clients, warm-up ${WARMUP} s, soak ${DURATION} s, ${Math.round(DISCONNECT * 100)} % hang up`);
await run(WARMUP);
// idle baseline: wait until nothing runs and our connections are gone
await settle(async () => idle(await stats()), 180000);
await sleep(1000);
const s0 = await stats();
const base = proc();
console.log(`baseline after warm-up: RSS ${(base.rss_kb / 1024).toFixed(1)} MiB, ${base.fds} fds, ${base.threads} threads`);
const warm = { ...tally };
for (const k of Object.keys(tally)) if (typeof tally[k] === "number") tally[k] = 0;
tally.by_api = {};

let peakRss = 0;
const sampler = setInterval(() => { try { peakRss = Math.max(peakRss, proc().rss_kb); } catch { /* exited: checked below */ } }, 500);
await run(DURATION);
clearInterval(sampler);
const tSoak = (Date.now() - t0) / 1000;

// settle: nothing running, KV free, connections and threads gone
const quiet = await settle(async () => idle(await stats()), 180000);
const backToBase = await settle(() => { const p = proc(); return p.fds <= base.fds && p.threads <= base.threads; }, 60000);
await sleep(1000);
const after = proc();
const s1 = await stats();

check("streams were run", tally.started > CLIENTS, `${tally.started} requests`);
check("every stream not hung up on ended well-formed", tally.malformed === 0, `${tally.malformed} malformed`);
check("no HTTP or transport error", tally.http_errors === 0 && tally.other_errors === 0, `${tally.http_errors} HTTP, ${tally.other_errors} other`);
check("back-pressure (429/503) under 1 %", tally.backpressure <= tally.started / 100, `${tally.backpressure}`);
check("no request failed in the server", s1.requests.failed === s0.requests.failed, `failed ${s0.requests.failed} -> ${s1.requests.failed}`);
check("hung-up streams were cancelled by the server", DISCONNECT === 0 || s1.requests.cancelled > s0.requests.cancelled,
  `cancelled ${s0.requests.cancelled} -> ${s1.requests.cancelled}, ${tally.hung_up} hung up`);
check("idle afterwards: nothing running or queued, SSD queue written", quiet,
  `active ${s1.batch.active}, queued ${s1.batch.queued}, in flight ${s1.batch.http_in_flight}, ssd pending ${s1.ssd_cache?.pending}`);
check("KV blocks active == 0", kvActive(s1) === 0, `${kvActive(s1)} active, ${s1.kv.blocks_cached} cached`);
check("open fds back to the baseline", after.fds <= base.fds, `${base.fds} -> ${after.fds}`);
check("threads back to the baseline", after.threads <= base.threads, `${base.threads} -> ${after.threads}`);
check("RSS back within the tolerance of the baseline", after.rss_kb <= base.rss_kb * (1 + RSS_TOL),
  `${(base.rss_kb / 1024).toFixed(1)} -> ${(after.rss_kb / 1024).toFixed(1)} MiB, peak ${(peakRss / 1024).toFixed(1)} MiB, tolerance ${RSS_TOL * 100} %`);
check("request memory account back to 0", s1.request_memory.used === 0, `${s1.request_memory.used} bytes`);
void backToBase;
try {
  const r = await oa.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hello" }], max_tokens: 4 });
  check("the server still answers", r.choices[0].message.content.length > 0 || r.usage.completion_tokens > 0);
} catch (e) { check("the server still answers", false, e.message); }
for (const p of problems) console.log(`  ${p}`);
const fig = { clients: CLIENTS, warmup_s: WARMUP, soak_s: DURATION, wall_s: Math.round(tSoak), disconnect: DISCONNECT,
  requests: tally.started, completed: tally.completed, hung_up: tally.hung_up, backpressure: tally.backpressure,
  malformed: tally.malformed, by_api: tally.by_api, warmup_requests: warm.started,
  server_cancelled: s1.requests.cancelled - s0.requests.cancelled, server_finished: s1.requests.finished - s0.requests.finished,
  rss_base_mib: +(base.rss_kb / 1024).toFixed(1), rss_after_mib: +(after.rss_kb / 1024).toFixed(1), rss_peak_mib: +(peakRss / 1024).toFixed(1),
  fds: [base.fds, after.fds], threads: [base.threads, after.threads], prefix_hits: s1.prefix_cache.hits - s0.prefix_cache.hits,
  ssd_written: s1.ssd_cache ? s1.ssd_cache.written - s0.ssd_cache.written : null,
  ssd_dropped: s1.ssd_cache ? s1.ssd_cache.dropped - s0.ssd_cache.dropped : null };
console.log(`${fails ? "FAILED" : "passed"}: ${JSON.stringify(fig)}`);
process.exitCode = fails ? 1 : 0;
