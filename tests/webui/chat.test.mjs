// chat.test.mjs — kiln's chat page in a real browser: Debian's chromium driven by
// playwright-core (pointed at /usr/bin/chromium; no browser download), against a real
// `kiln serve`. Screenshots go to --shots DIR (kept under the build folder).
//   node chat.test.mjs --url URL --model ID --shots DIR --mode chat|completion [--key KEY]
// chat: a ChatML test model slow enough to stop mid-stream (tests/e2e/test_webui_browser.sh);
// completion: stories260K (no chat template), with an API key.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";
import os from "node:os";
import { test, done, assert, arg, get, post } from "../e2e/harness.mjs";

const URL_ = arg("--url"), MODEL = arg("--model"), SHOTS = arg("--shots"), MODE = arg("--mode", "chat");
const KEY = arg("--key");
const RESTART = MODE === "restart"; // after a server restart: only the reopen checks
const T = RESTART ? () => {} : test;
const AUTH = KEY ? { authorization: `Bearer ${KEY}` } : {};
fs.mkdirSync(SHOTS, { recursive: true });

const udd = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-chromium-"));
const ctx = await chromium.launchPersistentContext(udd, {
  executablePath: process.env.KILN_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  acceptDownloads: true,
  viewport: { width: 1280, height: 820 },
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const page = ctx.pages()[0] || await ctx.newPage();
const foreign = [], dialogs = [], pageErrors = [];
page.on("request", (r) => { const u = r.url(); if (!u.startsWith(URL_) && !u.startsWith("data:") && !u.startsWith("blob:")) foreign.push(u); });
page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
page.on("pageerror", (e) => pageErrors.push(String(e)));
const shot = (name) => page.screenshot({ path: path.join(SHOTS, `${MODE}-${name}.png`), fullPage: false });

const api = (p, body, method) => body === undefined && !method
  ? get(`${URL_}${p}`, AUTH)
  : fetch(`${URL_}${p}`, { method: method || "POST", headers: { "content-type": "application/json", ...AUTH },
    body: body === undefined ? undefined : JSON.stringify(body) }).then(async (r) => ({ status: r.status, json: await r.json().catch(() => null) }));
const stats = async () => (await api("/stats")).json;
const lastAssistant = () => page.locator("#messages .msg.assistant").last();

async function setSetting(id, value) {
  if (await page.locator("#settings").isHidden()) await page.click("#toggle-settings");
  await page.fill(`#set-${id}`, String(value));
}
async function sendMessage(text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}
// The page counts finished answers in body[data-answers]; act(), then wait for one more.
const answers = () => page.evaluate(() => Number(document.body.dataset.answers || 0));
async function answered(act, timeout = 60000) {
  const n = await answers();
  await act();
  await page.waitForFunction((k) => Number(document.body.dataset.answers || 0) > k, n, { timeout });
}

test("the page loads from the binary and finds the model", async () => {
  const r = await fetch(`${URL_}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /text\/html/);
  assert.match(r.headers.get("content-security-policy"), /default-src 'self'/);
  assert.equal(r.headers.get("x-content-type-options"), "nosniff");
  await page.goto(`${URL_}/`);
  if (KEY) {
    await page.waitForSelector("#key-dialog:not([hidden])");
    await shot("00-api-key");
    await page.fill("#key-input", KEY);
    await page.click("#key-form button");
  }
  await page.waitForFunction((m) => {
    const s = document.querySelector('#stats [data-stat="model"]');
    return s && s.textContent.includes(m);
  }, MODEL, { timeout: 20000 });
  const hint = await page.textContent("#mode-hint");
  if (MODE === "completion") assert.match(hint, /completion mode/);
  else if (RESTART) assert.doesNotMatch(hint, /completion mode/);
  else assert.doesNotMatch(hint, /completion mode/);
  await shot("01-start");
});

T("the stats strip shows running / queued / KV / cache hits", async () => {
  for (const k of ["running", "queued", "KV", "cache hits", "tokens"])
    assert.ok(await page.locator(`#stats [data-stat="${k}"]`).count(), k);
});

T("send: tokens stream into the page, then the figures line", async () => {
  await setSetting("max_tokens", MODE === "chat" ? 40 : 120);
  await setSetting("temperature", 0);
  // record every rendering of the streaming answer
  await page.evaluate(() => {
    window.__lens = [];
    new MutationObserver(() => {
      const m = [...document.querySelectorAll("#messages .msg.assistant.pending .body")].pop();
      if (m) window.__lens.push(m.textContent.length);
    }).observe(document.querySelector("#messages"), { subtree: true, childList: true, characterData: true });
  });
  await answered(() => sendMessage(MODE === "chat" ? "Tell me about the sea" : "Once upon a time, there was a little girl"));
  const lens = await page.evaluate(() => window.__lens);
  const distinct = new Set(lens.filter((n) => n > 0)).size;
  if (MODE === "chat") assert.ok(distinct >= 3, `the answer grew over ${distinct} renders: ${lens.slice(0, 20)}`);
  const fig = await lastAssistant().locator(".figures").textContent();
  assert.match(fig, /\d+ prompt/);
  assert.match(fig, /\d+ tokens/);
  assert.match(fig, /TTFT \d+ ms/);
  assert.match(fig, MODE === "chat" ? /length/ : /stop|length/);
  assert.ok((await lastAssistant().locator(".body").textContent()).length > 0);
  await shot("02-answered");
});

if (MODE === "chat") {
  T("stop mid-stream cancels the request on the server", async () => {
    const before = (await stats()).requests.cancelled;
    await setSetting("max_tokens", 3000);
    await setSetting("temperature", 0.8);
    // The random-weight model may draw its end token before the click lands:
    // such an answer is complete (no stop to press), so ask again.
    let n0, stoppable = false;
    for (let attempt = 0; attempt < 6 && !stoppable; attempt++) {
      n0 = await answers();
      await sendMessage("Write a very long story");
      await page.waitForFunction((k) => {
        const m = [...document.querySelectorAll("#messages .msg.assistant.pending .body")].pop();
        return (m && m.textContent.length > 5) || Number(document.body.dataset.answers || 0) > k;
      }, n0, { timeout: 60000 });
      if (attempt === 0) await shot("03-streaming");
      try {
        await page.click("#stop", { timeout: 2000 });
        stoppable = true;
      } catch {
        await page.waitForFunction((k) => Number(document.body.dataset.answers || 0) > k, n0);
        if (/stopped/.test(await lastAssistant().locator(".figures").textContent())) stoppable = true;
      }
    }
    assert.ok(stoppable, "an answer was still streaming when stop was pressed (6 tries)");
    await page.waitForFunction((k) => Number(document.body.dataset.answers || 0) > k, n0);
    assert.match(await lastAssistant().locator(".figures").textContent(), /stopped/);
    let s;
    for (let i = 0; i < 100; i++) {
      s = await stats();
      if (s.requests.cancelled > before && s.batch.active === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(s.requests.cancelled, before + 1, "the server counted the request cancelled");
    assert.equal(s.batch.active, 0, "nothing runs on after the stop");
    assert.ok(await page.locator("#send").isVisible());
  });

  T("regenerate replaces the last answer", async () => {
    await setSetting("max_tokens", 12);
    const n = await page.locator("#messages .msg").count();
    await lastAssistant().hover();
    await answered(() => lastAssistant().locator("button.regenerate").click());
    assert.equal(await page.locator("#messages .msg").count(), n);
    assert.match(await lastAssistant().locator(".figures").textContent(), /\d+ tokens .* (length|stop)$/);
  });

  T("edit-and-resend rewrites from that message on (and the server keeps it)", async () => {
    const users = page.locator("#messages .msg.user");
    await users.first().hover();
    await users.first().locator("button.edit").click();
    await page.fill("#messages .edit-box", "Tell me about the mountains");
    await answered(() => page.click("#messages button.save-send"));
    assert.equal(await page.locator("#messages .msg").count(), 2);
    assert.equal(await page.locator("#messages .msg.user .body").first().textContent(), "Tell me about the mountains");
    const list = (await api("/v1/conversations")).json.data;
    const conv = (await api(`/v1/conversations/${list[0].id}`)).json;
    assert.equal(conv.messages.length, 2);
    assert.equal(conv.messages[0].content, "Tell me about the mountains");
    assert.ok(conv.messages[1].figures.completion_tokens > 0);
  });
}

T("a user message with HTML is shown as text", async () => {
  await setSetting("max_tokens", 4);
  await answered(() => sendMessage('<img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'));
  const u = page.locator("#messages .msg.user .body").last();
  assert.match(await u.textContent(), /<img src=x onerror/);
  assert.equal(await page.locator("#messages img").count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
});

T("reload: the conversation is listed, reopens with its messages and figures", async () => {
  const before = await page.locator("#messages .msg").count();
  await page.reload();
  await page.waitForSelector("#conv-list li.conv");
  const first = page.locator("#conv-list li.conv").first();
  await first.click();
  await page.waitForFunction((n) => document.querySelectorAll("#messages .msg").length === n, before);
  assert.ok(await page.locator("#messages .msg.assistant .figures").count() >= 1);
  await shot("04-reopened");
});

T("model output is rendered inert: no HTML, no javascript: links", async () => {
  const evil = [
    "Here: <img src=x onerror=\"window.__xss=3\"> and <script>window.__xss=4</script>",
    "", "[click me](javascript:window.__xss=5) and [also](  JaVaScRiPt:alert(1)) and [tab](java\tscript:alert(1))",
    "", "![pic](javascript:alert(1)) ![tracker](https://example.com/p.png)",
    "", "[data](data:text/html,<script>alert(1)</script>) <javascript:alert(1)>",
    "", "[safe](https://example.com/a?b=1) <https://example.org> mailto:x [mail](mailto:a@b.c)",
    "", "```html\n<b onclick=\"x()\">bold</b>\n```", "", "**bold** and `code` and ~~gone~~",
    "", "| a | b |", "|---|:-:|", "| <i>1</i> | 2 |",
  ].join("\n");
  const imp = await api("/v1/conversations/import", { title: "xss probe", messages: [
    { role: "user", content: "show me" }, { role: "assistant", content: evil, reasoning: "<img src=x onerror=\"window.__xss=6\">thinking" }] });
  assert.equal(imp.status, 200, JSON.stringify(imp.json));
  await page.reload();
  await page.waitForSelector("#conv-list li.conv");
  await page.locator("#conv-list li.conv", { hasText: "xss probe" }).click();
  await page.waitForSelector("#messages .msg.assistant .body .md");
  const md = page.locator("#messages .msg.assistant .body .md").first();
  assert.equal(await page.locator("#messages img, #messages script, #messages iframe, #messages object").count(), 0);
  const hrefs = await page.$$eval("#messages a", (as) => as.map((a) => a.getAttribute("href")));
  assert.ok(hrefs.length >= 3, JSON.stringify(hrefs));
  for (const h of hrefs) assert.match(h, /^(https?:|mailto:)/, `unsafe href ${h}`);
  assert.deepEqual(hrefs.filter((h) => h.startsWith("https://example.com/a")), ["https://example.com/a?b=1"]);
  const text = await md.textContent();
  assert.match(text, /<img src=x onerror/);
  assert.match(text, /click me/);
  assert.equal(await md.locator("pre code").first().textContent(), '<b onclick="x()">bold</b>');
  assert.equal(await md.locator("strong").first().textContent(), "bold");
  assert.equal(await md.locator("table th").count(), 2);
  const attrs = await page.$$eval("#messages .md *", (els) => [...new Set(els.flatMap((e) => [...e.attributes].map((a) => a.name)))]);
  for (const a of attrs) assert.ok(["href", "title", "target", "rel", "class", "start", "type", "disabled", "checked", "style", "open"].includes(a), `attribute ${a}`);
  await page.locator("#messages details.thinking summary").first().click();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  assert.deepEqual(dialogs, []);
  await shot("05-inert-output");
});

T("markdown.js: a battery of hostile inputs makes no element or attribute beyond its list", async () => {
  const payloads = [
    "<svg onload=alert(1)>", "<a href=\"javascript:alert(1)\">x</a>", "[x](javascript:alert(1))", "[x](JAVASCRIPT:alert(1))",
    "[x](&#106;avascript:alert(1))", "[x](vbscript:msgbox(1))", "[x](//evil.com)", "[x](/relative)", "<http://a.b/\"onmouseover=\"x>",
    "![x](x\"onerror=\"alert(1))", "[x](https://a.b/\" onclick=\"alert(1))", "`<img src=x>`", "~~~\n<img src=x>\n~~~",
    "> <iframe src=javascript:alert(1)>", "- [ ] <b>task</b>\n- [x] done", "| <img> | x |\n|---|---|\n| 1 | 2 |",
    "[a](https://x.y/(nested)) https://bare.example/path).", "*".repeat(5000), "[".repeat(3000) + "x", "\\<img src=x\\>",
  ];
  const res = await page.evaluate(async (ps) => {
    const { render } = await import("/webui/markdown.js");
    const out = [];
    for (const p of ps) {
      const t0 = performance.now();
      const n = render(p);
      const els = [...n.querySelectorAll("*")];
      out.push({ p: p.slice(0, 40), tags: [...new Set(els.map((e) => e.tagName.toLowerCase()))],
        attrs: [...new Set(els.flatMap((e) => [...e.attributes].map((a) => a.name)))],
        hrefs: els.filter((e) => e.hasAttribute("href")).map((e) => e.getAttribute("href")), ms: performance.now() - t0 });
    }
    return out;
  }, payloads);
  const TAGS = new Set(["div", "p", "br", "a", "span", "code", "pre", "em", "strong", "del", "h1", "h2", "h3", "h4", "h5", "h6",
    "ul", "ol", "li", "blockquote", "hr", "table", "thead", "tbody", "tr", "th", "td", "button", "input"]);
  for (const r of res) {
    for (const t of r.tags) assert.ok(TAGS.has(t), `${r.p}: <${t}>`);
    for (const a of r.attrs) assert.ok(["href", "title", "target", "rel", "class", "start", "type", "disabled", "checked", "style"].includes(a), `${r.p}: ${a}`);
    for (const h of r.hrefs) assert.match(h, /^(https?:\/\/|mailto:)[^"\s]*$/, `${r.p}: ${h}`);
    assert.ok(r.ms < 2000, `${r.p}: ${r.ms} ms`);
  }
});

T("thinking is a collapsible block, tool calls are shown as calls", async () => {
  const imp = await api("/v1/conversations/import", { title: "tools probe", messages: [
    { role: "user", content: "weather in Paris?" },
    { role: "assistant", content: "", reasoning: "The user wants **weather**.", tool_calls: [
      { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] }] });
  assert.equal(imp.status, 200);
  await page.reload();
  await page.waitForSelector("#conv-list li.conv");
  await page.locator("#conv-list li.conv", { hasText: "tools probe" }).click();
  const d = page.locator("#messages details.thinking");
  await d.waitFor();
  assert.equal(await d.getAttribute("open"), null, "collapsed when the answer is done");
  assert.match(await d.locator("summary").textContent(), /Thought/);
  await d.locator("summary").click();
  assert.equal(await d.locator("strong").textContent(), "weather");
  assert.match(await page.locator(".tool-call .tool-name").textContent(), /get_weather/);
  assert.match(await page.locator(".tool-call pre").textContent(), /"city": "Paris"/);
  await shot("06-thinking-tools");
});

T("search finds conversations by a word of their messages; rename; delete", async () => {
  await page.fill("#search", MODE === "chat" ? "mountains" : "little girl");
  await page.waitForFunction(() => document.querySelectorAll("#conv-list li.conv").length === 1, null, { timeout: 5000 });
  assert.ok(await page.locator("#conv-list li.conv mark").count() >= 1, "the match is highlighted");
  await shot("07-search");
  await page.fill("#search", "");
  await page.waitForFunction(() => document.querySelectorAll("#conv-list li.conv").length >= 3);
  const item = page.locator("#conv-list li.conv", { hasText: "tools probe" });
  await item.hover();
  await item.locator("button.rename").click();
  await page.fill("#conv-list .rename-input", "renamed probe");
  await page.press("#conv-list .rename-input", "Enter");
  await page.locator("#conv-list li.conv", { hasText: "renamed probe" }).waitFor();
  const list = (await api("/v1/conversations")).json.data;
  const renamed = list.find((c) => c.title === "renamed probe");
  assert.ok(renamed, "the server has the new title");
  const n = list.length;
  const it2 = page.locator("#conv-list li.conv", { hasText: "renamed probe" });
  await it2.hover();
  await it2.locator("button.delete").click();
  await it2.locator("button.delete").click(); // confirm
  await page.waitForFunction((k) => document.querySelectorAll("#conv-list li.conv").length === k, n - 1);
  assert.equal((await api(`/v1/conversations/${renamed.id}`)).status, 404);
});

T("export from the page, import it back through the file picker", async () => {
  const item = page.locator("#conv-list li.conv").first();
  await item.hover();
  const [dl] = await Promise.all([page.waitForEvent("download"), item.locator("button.export").click()]);
  const file = path.join(udd, "export.json");
  await dl.saveAs(file);
  const doc = JSON.parse(fs.readFileSync(file, "utf8"));
  assert.equal(doc.object, "kiln.conversations");
  assert.equal(doc.conversations.length, 1);
  const n = (await api("/v1/conversations")).json.data.length;
  const [chooser] = await Promise.all([page.waitForEvent("filechooser"), page.click("#import-btn")]);
  await chooser.setFiles(file);
  await page.waitForFunction((k) => document.querySelectorAll("#conv-list li.conv").length === k, n + 1);
  assert.match(await page.textContent("#banner"), /imported 1 conversation/);
});

T("settings and the system prompt are kept with the conversation", async () => {
  await page.click("#new-chat");
  await setSetting("system", "You are terse.");
  await setSetting("temperature", 0.3);
  await setSetting("seed", 7);
  await setSetting("max_tokens", 3);
  await answered(() => sendMessage("settings probe"));
  await new Promise((r) => setTimeout(r, 600)); // the PATCH is debounced
  await page.reload();
  await page.waitForSelector("#conv-list li.conv");
  await page.locator("#conv-list li.conv", { hasText: "settings probe" }).click();
  await page.waitForSelector("#messages .msg.assistant");
  assert.equal(await page.inputValue("#set-system"), "You are terse.");
  assert.equal(await page.inputValue("#set-temperature"), "0.3");
  assert.equal(await page.inputValue("#set-seed"), "7");
  const list = (await api("/v1/conversations")).json.data;
  const c = (await api(`/v1/conversations/${list.find((x) => x.title === "settings probe").id}`)).json;
  assert.equal(c.system, "You are terse.");
  assert.equal(c.settings.seed, 7);
});

if (RESTART) test("after a restart: the conversation reopens, and regenerating its last answer finds the prompt cached (SSD tier)", async () => {
  await page.waitForSelector("#conv-list li.conv");
  await page.locator("#conv-list li.conv", { hasText: "Tell me about the sea" }).first().click();
  await page.waitForSelector("#messages .msg.assistant .figures");
  assert.ok(await page.locator("#messages .msg").count() >= 4);
  await setSetting("max_tokens", 6);
  await lastAssistant().hover();
  await answered(() => lastAssistant().locator("button.regenerate").click());
  const fig = await lastAssistant().locator(".figures").textContent();
  const m = /(\d+) prompt · (\d+) cached/.exec(fig);
  assert.ok(m, `figures: ${fig}`);
  assert.ok(Number(m[2]) >= 16, `cached ${m[2]} of ${m[1]} prompt tokens after the restart`);
  const s = await stats();
  assert.ok(s.ssd_cache && s.ssd_cache.hit_tokens >= Number(m[2]), "the cached prefix came from the SSD tier: " + JSON.stringify(s.ssd_cache));
  console.log(`  after the restart: ${fig}; ssd_cache ${JSON.stringify(s.ssd_cache)}; prefix_cache ${JSON.stringify(s.prefix_cache)}`);
  await shot("08-after-restart");
});

test("nothing was fetched from anywhere but this server; no page errors", async () => {
  assert.deepEqual(foreign, []);
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(dialogs, []);
});

await done();
await ctx.close();
fs.rmSync(udd, { recursive: true, force: true });
