// app.js — kiln's chat page: streaming chat against this server's OpenAI API, with
// conversations kept server-side (/v1/conversations, SQLite) so that nothing is lost when
// the browser's storage is. Plain ES module, no framework, no build step, no network but
// this server (CSP connect-src 'self').
//
// Model output is untrusted: it reaches the DOM only through markdown.js (text nodes and
// checked links) or textContent. Nothing here writes innerHTML.
'use strict';

import { render } from './markdown.js';

const $ = (sel) => document.querySelector(sel);

const state = {
  key: localStorage.getItem('kiln.apiKey') || '',
  model: null,       // served model id
  ctx: 0,            // max_model_len
  chat: true,        // the model has a chat template (else: completion mode)
  conv: null,        // {id, title, system, settings, messages: [...]}
  list: [],          // conversation summaries
  stream: null,      // {ctrl, msg} while generating
  storeError: null,  // why /v1/conversations is unavailable, if it is
};

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// ------------------------------------------------------------------ HTTP

async function api(path, opts = {}) {
  const o = Object.assign({}, opts);
  o.headers = Object.assign({}, opts.headers || {});
  if (state.key) o.headers['Authorization'] = 'Bearer ' + state.key;
  if (o.body !== undefined && typeof o.body !== 'string') {
    o.headers['Content-Type'] = 'application/json';
    o.body = JSON.stringify(o.body);
  }
  const r = await fetch(path, o);
  if (r.status === 401) {
    showKeyDialog();
    throw new ApiError(401, 'this server needs an API key');
  }
  return r;
}

async function errorOf(r) {
  let msg = r.status + ' ' + r.statusText;
  try {
    const j = await r.json();
    if (j && j.error && j.error.message) msg = j.error.message;
  } catch { /* not JSON */ }
  return new ApiError(r.status, msg);
}

async function apiJson(path, opts) {
  const r = await api(path, opts);
  if (!r.ok) throw await errorOf(r);
  return r.json();
}

// ------------------------------------------------------------------ banner, key

function banner(text, kind) {
  const b = $('#banner');
  if (!text) { b.hidden = true; return; }
  b.textContent = text;
  b.className = kind || 'info';
  b.hidden = false;
}

function showKeyDialog() {
  $('#key-dialog').hidden = false;
  $('#key-input').focus();
}

$('#key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.key = $('#key-input').value.trim();
  localStorage.setItem('kiln.apiKey', state.key);
  $('#key-dialog').hidden = true;
  $('#forget-key').hidden = !state.key;
  boot();
});

$('#forget-key').addEventListener('click', () => {
  localStorage.removeItem('kiln.apiKey');
  state.key = '';
  $('#forget-key').hidden = true;
});

// ------------------------------------------------------------------ stats strip

function pct(x) {
  return (100 * x).toFixed(x < 0.1 ? 1 : 0) + '%';
}

async function pollStats() {
  if (document.hidden) return;
  try {
    const s = await apiJson('/stats');
    const kv = s.kv || {};
    const used = kv.blocks_total ? (kv.blocks_used || 0) / kv.blocks_total : 0;
    const tk = s.tokens || {};
    const parts = [
      ['model', s.model],
      ['running', (s.batch || {}).active],
      ['queued', (s.batch || {}).queued],
      ['KV', pct(used) + ' used' + (kv.blocks_cached ? ', ' + kv.blocks_cached + ' cached blocks' : '')],
      // prompt tokens served from cache (RAM prefix cache or SSD tier) over all prompt tokens
      ['cache hits', tk.prompt ? pct((tk.cached || 0) / tk.prompt) : '–'],
      ['tokens', ((s.tokens || {}).prompt || 0) + ' in / ' + ((s.tokens || {}).completion || 0) + ' out'],
    ];
    const box = $('#stats');
    box.textContent = '';
    for (const [k, v] of parts) {
      const span = document.createElement('span');
      span.className = 'stat';
      span.dataset.stat = k;
      const kk = document.createElement('b');
      kk.textContent = k + ' ';
      span.appendChild(kk);
      span.appendChild(document.createTextNode(String(v)));
      box.appendChild(span);
    }
  } catch (e) {
    if (e.status !== 401) $('#stats').textContent = 'stats unavailable';
  }
}

// ------------------------------------------------------------------ conversations (server)

function convPath(id, rest) {
  return '/v1/conversations/' + encodeURIComponent(id) + (rest || '');
}

async function loadList(q) {
  const list = $('#conv-list');
  try {
    const url = '/v1/conversations?limit=200' + (q ? '&q=' + encodeURIComponent(q) : '');
    const j = await apiJson(url);
    state.list = j.data || [];
    state.storeError = null;
  } catch (e) {
    state.list = [];
    state.storeError = e.message;
  }
  list.textContent = '';
  if (state.storeError) {
    const li = document.createElement('li');
    li.className = 'empty';
    li.textContent = 'Conversations are not stored: ' + state.storeError;
    list.appendChild(li);
    return;
  }
  if (!state.list.length) {
    const li = document.createElement('li');
    li.className = 'empty';
    li.textContent = q ? 'No match.' : 'No conversations yet.';
    list.appendChild(li);
  }
  for (const c of state.list) list.appendChild(convItem(c));
}

// A snippet from FTS5 marks matches with U+E000 .. U+E001: those become <mark> elements.
function snippetNodes(s) {
  const out = [];
  const parts = String(s).split(/(\uE000[^\uE001]*\uE001)/);
  for (const p of parts) {
    if (p.startsWith('\uE000')) {
      const m = document.createElement('mark');
      m.textContent = p.slice(1, -1);
      out.push(m);
    } else if (p) {
      out.push(document.createTextNode(p));
    }
  }
  return out;
}

function convItem(c) {
  const li = document.createElement('li');
  li.className = 'conv' + (state.conv && state.conv.id === c.id ? ' active' : '');
  li.dataset.id = c.id;
  const title = document.createElement('div');
  title.className = 'conv-name';
  title.textContent = c.title || 'Untitled';
  li.appendChild(title);
  const meta = document.createElement('div');
  meta.className = 'conv-meta';
  if (c.snippet) for (const n of snippetNodes(c.snippet)) meta.appendChild(n);
  else meta.textContent = new Date((c.updated_at || 0) * 1000).toLocaleString() + ' · ' + (c.n_messages || 0) + (c.n_messages === 1 ? ' message' : ' messages');
  li.appendChild(meta);
  const acts = document.createElement('div');
  acts.className = 'conv-actions';
  const mk = (label, cls, fn) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = cls;
    b.textContent = label;
    b.addEventListener('click', (ev) => { ev.stopPropagation(); fn(b); });
    acts.appendChild(b);
  };
  mk('rename', 'rename', () => renameInline(li, c));
  mk('export', 'export', () => exportConvs(c.id));
  mk('delete', 'delete', (b) => {
    if (b.dataset.armed) { deleteConv(c.id); return; }
    b.dataset.armed = '1';
    b.textContent = 'confirm';
    setTimeout(() => { delete b.dataset.armed; b.textContent = 'delete'; }, 3000);
  });
  li.appendChild(acts);
  li.addEventListener('click', () => openConv(c.id));
  return li;
}

function renameInline(li, c) {
  const name = li.querySelector('.conv-name');
  const input = document.createElement('input');
  input.className = 'rename-input';
  input.value = c.title || '';
  name.replaceWith(input);
  input.focus();
  input.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const t = input.value.trim();
    if (save && t && t !== c.title) {
      try {
        await apiJson(convPath(c.id), { method: 'PATCH', body: { title: t } });
        if (state.conv && state.conv.id === c.id) { state.conv.title = t; $('#title').textContent = t; }
      } catch (e) { banner('rename failed: ' + e.message, 'error'); }
    }
    loadList($('#search').value.trim());
  };
  input.addEventListener('click', (ev) => ev.stopPropagation());
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') finish(true);
    if (ev.key === 'Escape') finish(false);
  });
  input.addEventListener('blur', () => finish(true));
}

async function deleteConv(id) {
  try {
    await apiJson(convPath(id), { method: 'DELETE' });
  } catch (e) { banner('delete failed: ' + e.message, 'error'); }
  if (state.conv && state.conv.id === id) newConv();
  loadList($('#search').value.trim());
}

function download(name, text) {
  const blob = new Blob([text], { type: 'application/json' });
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

async function exportConvs(id) {
  try {
    const r = await api(id ? convPath(id, '/export') : '/v1/conversations/export');
    if (!r.ok) throw await errorOf(r);
    download(id ? 'kiln-' + id + '.json' : 'kiln-conversations.json', await r.text());
  } catch (e) { banner('export failed: ' + e.message, 'error'); }
}

$('#export-all').addEventListener('click', () => exportConvs(null));
$('#import-btn').addEventListener('click', () => $('#import-file').click());
$('#import-file').addEventListener('change', async (ev) => {
  const f = ev.target.files && ev.target.files[0];
  ev.target.value = '';
  if (!f) return;
  try {
    const j = await apiJson('/v1/conversations/import', { method: 'POST', body: await f.text(),
      headers: { 'Content-Type': 'application/json' } });
    banner('imported ' + j.imported + ' conversation' + (j.imported === 1 ? '' : 's'), 'info');
    setTimeout(() => banner(null), 3000);
  } catch (e) { banner('import failed: ' + e.message, 'error'); }
  loadList();
});

let searchTimer = 0;
$('#search').addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => loadList($('#search').value.trim()), 250);
});

// ------------------------------------------------------------------ settings

const NUM_FIELDS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];

function readSettings() {
  const s = {};
  for (const k of NUM_FIELDS) {
    const v = $('#set-' + k).value.trim();
    if (v !== '' && Number.isFinite(Number(v))) s[k] = Number(v);
  }
  const th = $('#set-thinking').value;
  if (th) s.thinking = th === 'true';
  const tools = $('#set-tools').value.trim();
  if (tools) s.tools = tools;
  return s;
}

function writeSettings(s, system) {
  s = s || {};
  for (const k of NUM_FIELDS) $('#set-' + k).value = s[k] !== undefined ? String(s[k]) : '';
  $('#set-thinking').value = s.thinking === undefined ? '' : String(s.thinking);
  $('#set-tools').value = s.tools || '';
  $('#set-system').value = system || '';
}

let settingsTimer = 0;
function settingsChanged() {
  if (!state.conv) return;
  state.conv.settings = readSettings();
  state.conv.system = $('#set-system').value;
  if (!state.conv.id) return;
  clearTimeout(settingsTimer);
  const id = state.conv.id;
  settingsTimer = setTimeout(() => {
    apiJson(convPath(id), { method: 'PATCH', body: { settings: state.conv.settings, system: state.conv.system } })
      .catch((e) => banner('saving settings failed: ' + e.message, 'error'));
  }, 400);
}
for (const e of document.querySelectorAll('#settings input, #settings textarea, #settings select'))
  e.addEventListener('input', settingsChanged);

$('#toggle-settings').addEventListener('click', () => { $('#settings').hidden = !$('#settings').hidden; });
$('#toggle-side').addEventListener('click', () => { $('#sidebar').classList.toggle('open'); });

// ------------------------------------------------------------------ messages view

function fmtFigures(f) {
  if (!f) return '';
  const parts = [];
  if (f.prompt_tokens !== undefined) parts.push(f.prompt_tokens + ' prompt');
  if (f.cached_tokens) parts.push(f.cached_tokens + ' cached');
  if (f.completion_tokens !== undefined) parts.push(f.completion_tokens + ' tokens');
  if (f.tok_s) parts.push(f.tok_s.toFixed(1) + ' tok/s');
  if (f.ttft_ms !== undefined) parts.push('TTFT ' + Math.round(f.ttft_ms) + ' ms');
  if (f.finish_reason) parts.push(f.finish_reason);
  return parts.join(' · ');
}

function toolCallNode(tc) {
  const box = document.createElement('div');
  box.className = 'tool-call';
  const head = document.createElement('div');
  head.className = 'tool-name';
  head.textContent = 'tool call: ' + ((tc.function && tc.function.name) || '?');
  box.appendChild(head);
  const pre = document.createElement('pre');
  let args = (tc.function && tc.function.arguments) || '';
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* partial while streaming */ }
  pre.textContent = args;
  box.appendChild(pre);
  return box;
}

function messageNode(m, idx) {
  const div = document.createElement('div');
  div.className = 'msg ' + m.role + (m.pending ? ' pending' : '') + (m.error ? ' failed' : '');
  div.dataset.index = String(idx);
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = m.role === 'user' ? 'You' : m.role === 'assistant' ? (state.model || 'assistant') : m.role;
  div.appendChild(who);
  if (m.reasoning) {
    const d = document.createElement('details');
    d.className = 'thinking';
    if (m.pending && !m.content) d.open = true;
    const s = document.createElement('summary');
    s.textContent = m.pending && !m.content ? 'Thinking…' : 'Thought';
    d.appendChild(s);
    d.appendChild(render(m.reasoning));
    div.appendChild(d);
  }
  const body = document.createElement('div');
  body.className = 'body';
  if (m.role === 'user') {
    body.classList.add('plain');
    body.textContent = m.content;
  } else {
    body.appendChild(render(m.content || ''));
  }
  div.appendChild(body);
  for (const tc of m.tool_calls || []) div.appendChild(toolCallNode(tc));
  if (m.error) {
    const e = document.createElement('div');
    e.className = 'error';
    e.textContent = m.error;
    div.appendChild(e);
  }
  if (m.figures) {
    const f = document.createElement('div');
    f.className = 'figures';
    f.textContent = fmtFigures(m.figures);
    div.appendChild(f);
  }
  if (!m.pending && !state.stream) div.appendChild(actionsFor(m, idx));
  return div;
}

function actionsFor(m, idx) {
  const acts = document.createElement('div');
  acts.className = 'actions';
  const mk = (label, cls, fn) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = cls;
    b.textContent = label;
    b.addEventListener('click', fn);
    acts.appendChild(b);
  };
  const msgs = state.conv.messages;
  if (m.role === 'user') mk('edit', 'edit', () => editInline(idx));
  if (m.role === 'assistant' && idx === msgs.length - 1) mk('regenerate', 'regenerate', () => regenerate());
  mk('copy', 'copy', () => { if (navigator.clipboard) navigator.clipboard.writeText(m.content || ''); });
  return acts;
}

function renderMessages() {
  const box = $('#messages');
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  box.textContent = '';
  const msgs = state.conv ? state.conv.messages : [];
  if (!msgs.length) {
    const e = document.createElement('div');
    e.className = 'empty-chat';
    e.textContent = state.chat ? 'Ask ' + (state.model || 'the model') + ' anything.'
      : (state.model || 'This model') + ' has no chat template: it continues your text (completion mode).';
    box.appendChild(e);
  }
  msgs.forEach((m, i) => box.appendChild(messageNode(m, i)));
  if (atBottom || state.stream) box.scrollTop = box.scrollHeight;
}

// Re-renders only the streaming message (once per animation frame).
let frameQueued = false;
function renderStreaming() {
  if (frameQueued) return;
  frameQueued = true;
  requestAnimationFrame(() => {
    frameQueued = false;
    if (!state.stream || !state.conv) return;
    const idx = state.conv.messages.indexOf(state.stream.msg);
    const old = document.querySelector('#messages .msg[data-index="' + idx + '"]');
    const box = $('#messages');
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    const node = messageNode(state.stream.msg, idx);
    if (old) old.replaceWith(node); else box.appendChild(node);
    if (atBottom) box.scrollTop = box.scrollHeight;
  });
}

function editInline(idx) {
  const m = state.conv.messages[idx];
  const node = document.querySelector('#messages .msg[data-index="' + idx + '"]');
  const body = node.querySelector('.body');
  const ta = document.createElement('textarea');
  ta.className = 'edit-box';
  ta.value = m.content;
  ta.rows = Math.min(12, Math.max(3, m.content.split('\n').length + 1));
  body.replaceWith(ta);
  const acts = node.querySelector('.actions');
  acts.textContent = '';
  const save = document.createElement('button');
  save.type = 'button';
  save.className = 'save-send';
  save.textContent = 'save & send';
  const cancel = document.createElement('button');
  cancel.type = 'button';
  cancel.textContent = 'cancel';
  acts.appendChild(save);
  acts.appendChild(cancel);
  cancel.addEventListener('click', renderMessages);
  save.addEventListener('click', async () => {
    const text = ta.value.trim();
    if (!text) return;
    state.conv.messages = state.conv.messages.slice(0, idx);
    state.conv.messages.push({ role: 'user', content: text });
    renderMessages();
    await saveWhole();
    generate();
  });
  ta.focus();
}

async function regenerate() {
  const msgs = state.conv.messages;
  if (msgs.length && msgs[msgs.length - 1].role === 'assistant') msgs.pop();
  renderMessages();
  await saveWhole();
  generate();
}

// ------------------------------------------------------------------ persistence

function storedMessage(m) {
  const o = { role: m.role, content: m.content || '' };
  if (m.reasoning) o.reasoning = m.reasoning;
  if (m.tool_calls && m.tool_calls.length) o.tool_calls = m.tool_calls;
  if (m.figures) o.figures = m.figures;
  return o;
}

async function ensureConv(firstText) {
  const c = state.conv;
  if (c.id || state.storeError) return;
  const title = firstText.split('\n')[0].slice(0, 60) || 'Conversation';
  try {
    const j = await apiJson('/v1/conversations', { method: 'POST',
      body: { title, system: c.system || '', settings: c.settings || {}, model: state.model } });
    c.id = j.id;
    c.title = j.title;
    $('#title').textContent = c.title;
  } catch (e) {
    banner('this conversation is not being saved: ' + e.message, 'error');
  }
}

async function appendStored(m) {
  const c = state.conv;
  if (!c.id) return;
  try {
    await apiJson(convPath(c.id, '/messages'), { method: 'POST', body: storedMessage(m) });
  } catch (e) { banner('saving the message failed: ' + e.message, 'error'); }
}

async function saveWhole() {
  const c = state.conv;
  if (!c.id) return;
  try {
    await apiJson(convPath(c.id), { method: 'PUT', body: {
      title: c.title, system: c.system || '', settings: c.settings || {},
      messages: c.messages.filter((m) => !m.pending).map(storedMessage) } });
  } catch (e) { banner('saving the conversation failed: ' + e.message, 'error'); }
}

async function openConv(id) {
  if (state.stream) return;
  try {
    const c = await apiJson(convPath(id));
    state.conv = { id: c.id, title: c.title, system: c.system || '', settings: c.settings || {},
      messages: (c.messages || []).map((m) => ({ role: m.role, content: m.content || '', reasoning: m.reasoning || '',
        tool_calls: m.tool_calls || [], figures: m.figures || null })) };
    $('#title').textContent = c.title || 'Untitled';
    writeSettings(state.conv.settings, state.conv.system);
    renderMessages();
    for (const li of document.querySelectorAll('#conv-list li.conv'))
      li.classList.toggle('active', li.dataset.id === id);
    $('#sidebar').classList.remove('open');
  } catch (e) { banner('cannot open the conversation: ' + e.message, 'error'); }
}

function newConv() {
  if (state.stream) return;
  const prev = state.conv;
  state.conv = { id: null, title: '', system: prev ? prev.system : '', settings: prev ? prev.settings : {}, messages: [] };
  $('#title').textContent = 'New conversation';
  writeSettings(state.conv.settings, state.conv.system);
  renderMessages();
  for (const li of document.querySelectorAll('#conv-list li.conv')) li.classList.remove('active');
  $('#input').focus();
}
$('#new-chat').addEventListener('click', newConv);

// ------------------------------------------------------------------ generation

// Completion mode (a model without a chat template): the conversation is one text the
// model continues; each user turn starts a new line, an answer follows directly.
function completionPrompt(c) {
  let p = c.system ? c.system + '\n\n' : '';
  let first = true;
  for (const m of c.messages) {
    if (m.pending || m.error) continue;
    if (m.role === 'user') p += (first ? '' : '\n') + m.content;
    else if (m.role === 'assistant') p += m.content;
    first = false;
  }
  return p;
}

function requestBody(c) {
  const s = c.settings || {};
  const body = { model: state.model, stream: true, stream_options: { include_usage: true } };
  for (const k of NUM_FIELDS) if (s[k] !== undefined) body[k] = s[k];
  if (!state.chat) {
    body.prompt = completionPrompt(c);
    return body;
  }
  const msgs = [];
  if (c.system) msgs.push({ role: 'system', content: c.system });
  for (const m of c.messages) {
    if (m.pending || m.error) continue;
    const o = { role: m.role, content: m.content || '' };
    if (m.role === 'assistant' && m.tool_calls && m.tool_calls.length) o.tool_calls = m.tool_calls;
    msgs.push(o);
  }
  body.messages = msgs;
  if (s.thinking !== undefined) body.chat_template_kwargs = { enable_thinking: s.thinking };
  if (s.tools) {
    try { body.tools = JSON.parse(s.tools); } catch { throw new Error('the tools setting is not valid JSON'); }
  }
  return body;
}

function mergeToolCalls(msg, deltas) {
  for (const d of deltas) {
    const i = d.index || 0;
    const tc = msg.tool_calls[i] || (msg.tool_calls[i] = { id: '', type: 'function', function: { name: '', arguments: '' } });
    if (d.id) tc.id = d.id;
    if (d.function) {
      if (d.function.name) tc.function.name += d.function.name;
      if (d.function.arguments) tc.function.arguments += d.function.arguments;
    }
  }
}

function setBusy(busy) {
  $('#send').hidden = busy;
  $('#stop').hidden = !busy;
  $('#new-chat').disabled = busy;
}

async function generate() {
  const c = state.conv;
  const msg = { role: 'assistant', content: '', reasoning: '', tool_calls: [], figures: null, pending: true };
  c.messages.push(msg);
  const ctrl = new AbortController();
  state.stream = { ctrl, msg };
  setBusy(true);
  renderMessages();
  const t0 = performance.now();
  let tFirst = null;
  let tLast = null;
  let usage = null;
  let finish = null;
  try {
    const body = requestBody(c);
    const r = await api(state.chat ? '/v1/chat/completions' : '/v1/completions',
      { method: 'POST', body, signal: ctrl.signal });
    if (!r.ok) throw await errorOf(r);
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, k);
        buf = buf.slice(k + 2);
        for (const line of frame.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data === '[DONE]') continue;
          let ev;
          try { ev = JSON.parse(data); } catch { continue; }
          if (ev.error) throw new Error(ev.error.message || 'the server reported an error');
          if (ev.usage) usage = ev.usage;
          const ch = ev.choices && ev.choices[0];
          if (!ch) continue;
          const d = ch.delta || {};
          const text = state.chat ? d.content : ch.text;
          const think = d.reasoning_content || d.reasoning;
          if (text || think || d.tool_calls) {
            const now = performance.now();
            if (tFirst === null) tFirst = now;
            tLast = now;
          }
          if (text) msg.content += text;
          if (think) msg.reasoning += think;
          if (d.tool_calls) mergeToolCalls(msg, d.tool_calls);
          if (ch.finish_reason) finish = ch.finish_reason;
        }
        renderStreaming();
      }
    }
  } catch (e) {
    if (ctrl.signal.aborted) finish = 'stopped';
    else msg.error = e.message;
  }
  const f = { finish_reason: finish || (msg.error ? 'error' : 'stopped') };
  if (usage) {
    f.prompt_tokens = usage.prompt_tokens;
    f.completion_tokens = usage.completion_tokens;
    f.cached_tokens = (usage.prompt_tokens_details || {}).cached_tokens || 0;
  }
  if (tFirst !== null) {
    f.ttft_ms = tFirst - t0;
    const n = f.completion_tokens;
    if (n > 1 && tLast > tFirst) f.tok_s = (n - 1) / ((tLast - tFirst) / 1000);
  }
  msg.figures = f;
  msg.pending = false;
  state.stream = null;
  setBusy(false);
  renderMessages();
  if (!msg.error || msg.content) await appendStored(msg);
  // answers finished so far (stored too): lets a script or test wait for the next one
  document.body.dataset.answers = String(Number(document.body.dataset.answers || 0) + 1);
  loadList($('#search').value.trim());
  pollStats();
}

$('#stop').addEventListener('click', () => {
  if (state.stream) state.stream.ctrl.abort();
});

async function send() {
  const input = $('#input');
  const text = input.value.trim();
  if (!text || state.stream || !state.model) return;
  input.value = '';
  const c = state.conv;
  await ensureConv(text);
  const m = { role: 'user', content: text };
  c.messages.push(m);
  renderMessages();
  await appendStored(m);
  await generate();
}

$('#composer').addEventListener('submit', (ev) => { ev.preventDefault(); send(); });
$('#input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); send(); }
});

// ------------------------------------------------------------------ start

async function waitReady() {
  for (let i = 0; ; i++) {
    let r;
    try { r = await fetch('/health'); } catch { r = null; }
    if (r && r.ok) { banner(null); return; }
    let status = 'starting';
    try { status = (await r.json()).status || status; } catch { /* keep */ }
    banner(status === 'loading' ? 'The model is loading…' : 'Waiting for the server (' + status + ')…', 'info');
    const after = r && Number(r.headers.get('Retry-After'));
    await new Promise((res) => setTimeout(res, after > 0 ? Math.min(after, 5) * 1000 : 1000));
  }
}

let statsTimer = 0;
async function boot() {
  $('#forget-key').hidden = !state.key;
  await waitReady();
  try {
    const m = await apiJson('/v1/models');
    const d = (m.data || [])[0] || {};
    state.model = d.id || null;
    state.ctx = d.max_model_len || 0;
    const caps = d.capabilities || ['chat', 'completion'];
    state.chat = caps.includes('chat');
  } catch (e) {
    if (e.status !== 401) banner('cannot reach the model: ' + e.message, 'error');
    return;
  }
  $('#mode-hint').textContent = (state.model || '') + (state.ctx ? ' · context ' + state.ctx + ' tokens' : '') +
    (state.chat ? '' : ' · completion mode (no chat template)');
  if (!state.conv) newConv();
  else renderMessages();
  await loadList();
  clearInterval(statsTimer);
  pollStats();
  statsTimer = setInterval(pollStats, 2000);
}

boot();
