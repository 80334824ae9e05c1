// markdown.js — renders untrusted Markdown (model output) into DOM nodes.
//
// Safety contract: no string ever reaches innerHTML, outerHTML, insertAdjacentHTML or
// document.write. Every piece of text becomes a Text node (textContent); raw HTML in the
// input is shown as text, inert. The only attribute taken from the input is a link's href,
// and only after new URL() parsed it as an absolute http:, https: or mailto: URL (the
// parsed, normalised href is what is set, so what was checked is what the browser follows).
// Images are never loaded (offline, no tracking pixels): ![alt](url) becomes a link.
//
// Supported: fenced code (``` and ~~~, an unclosed fence runs to the end: streaming),
// indented code, ATX headings, paragraphs (single newlines kept as line breaks),
// blockquotes, nested ordered/unordered lists, task boxes, GFM pipe tables, thematic
// breaks; inline code, **strong**, *em*, ~~del~~, [links](url), <autolinks>, bare
// http(s):// URLs, backslash escapes.
'use strict';

const SAFE_SCHEMES = new Set(['http:', 'https:', 'mailto:']);

// The normalised href when raw is an absolute URL with a safe scheme, else null.
export function safeHref(raw) {
  if (typeof raw !== 'string') return null;
  const s = raw.trim();
  if (!s || s.length > 4096) return null;
  let u;
  try {
    u = new URL(s); // no base: relative URLs throw and are not links
  } catch {
    return null;
  }
  return SAFE_SCHEMES.has(u.protocol) ? u.href : null;
}

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function textNode(s) {
  return document.createTextNode(s);
}

function link(href, children) {
  const a = el('a');
  a.setAttribute('href', href);
  a.setAttribute('target', '_blank');
  a.setAttribute('rel', 'noopener noreferrer nofollow');
  for (const c of children) a.appendChild(c);
  return a;
}

// ------------------------------------------------------------------ inline

const ESCAPABLE = '\\`*_{}[]()#+-.!|~<>"\'';

// Finds the closing ")" of a link destination starting at i (after "("), honouring
// nested parentheses and <...> destinations. Returns [url, title, end] or null.
function linkDest(s, i) {
  let j = i;
  while (s[j] === ' ') j++;
  let url = '';
  if (s[j] === '<') {
    const k = s.indexOf('>', j);
    if (k < 0) return null;
    url = s.slice(j + 1, k);
    j = k + 1;
  } else {
    let depth = 0;
    const start = j;
    while (j < s.length) {
      const c = s[j];
      if (c === '\\' && j + 1 < s.length) { j += 2; continue; }
      if (c === '(') depth++;
      else if (c === ')') { if (depth === 0) break; depth--; }
      else if (c === ' ' || c === '\n') break;
      j++;
    }
    url = s.slice(start, j);
  }
  while (s[j] === ' ') j++;
  let title = null;
  if (s[j] === '"' || s[j] === "'") {
    const q = s[j];
    const k = s.indexOf(q, j + 1);
    if (k < 0) return null;
    title = s.slice(j + 1, k);
    j = k + 1;
    while (s[j] === ' ') j++;
  }
  if (s[j] !== ')') return null;
  return [url, title, j + 1];
}

// Index of the "]" closing the bracket opened at i, or -1.
function closeBracket(s, i) {
  let depth = 0;
  for (let j = i; j < s.length; j++) {
    const c = s[j];
    if (c === '\\') { j++; continue; }
    if (c === '`') { // code spans hide brackets
      const n = runLength(s, j, '`');
      const k = s.indexOf('`'.repeat(n), j + n);
      if (k > 0) { j = k + n - 1; continue; }
    }
    if (c === '[') depth++;
    else if (c === ']') { depth--; if (depth === 0) return j; }
  }
  return -1;
}

function runLength(s, i, ch) {
  let n = 0;
  while (s[i + n] === ch) n++;
  return n;
}

const BARE_URL = /^https?:\/\/[^\s<>"'`]+/;

// Renders inline markdown of s into an array of nodes.
export function inline(s, depth = 0) {
  const out = [];
  let buf = '';
  const flush = () => { if (buf) { out.push(textNode(buf)); buf = ''; } };
  if (depth > 8) return [textNode(s)];
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === '\\' && i + 1 < s.length && ESCAPABLE.includes(s[i + 1])) {
      buf += s[i + 1];
      i += 2;
      continue;
    }
    if (c === '\n') { // a line break inside a paragraph
      flush();
      out.push(el('br'));
      i++;
      continue;
    }
    if (c === '`') {
      const n = runLength(s, i, '`');
      const k = s.indexOf('`'.repeat(n), i + n);
      if (k >= 0 && s[k + n] !== '`') {
        flush();
        const code = el('code');
        let t = s.slice(i + n, k).replace(/\n/g, ' ');
        if (t.length > 2 && t[0] === ' ' && t[t.length - 1] === ' ') t = t.slice(1, -1);
        code.textContent = t;
        out.push(code);
        i = k + n;
        continue;
      }
      buf += '`'.repeat(n);
      i += n;
      continue;
    }
    if (c === '[' || (c === '!' && s[i + 1] === '[')) {
      const img = c === '!';
      const open = img ? i + 1 : i;
      const close = closeBracket(s, open);
      if (close > 0 && s[close + 1] === '(') {
        const d = linkDest(s, close + 2);
        if (d) {
          const label = s.slice(open + 1, close);
          const href = safeHref(d[0].replace(/\\(.)/g, '$1'));
          flush();
          const kids = img ? [textNode('image: ' + (label || 'untitled'))] : inline(label, depth + 1);
          if (href) {
            const a = link(href, kids);
            if (d[1]) a.setAttribute('title', d[1]);
            if (img) a.className = 'md-img';
            out.push(a);
          } else {
            // unsafe or relative destination: the label stays, inert, and the URL is shown
            const span = el('span', 'md-unsafe-link');
            for (const k of kids) span.appendChild(k);
            span.setAttribute('title', 'link not followed: ' + d[0].slice(0, 200));
            out.push(span);
          }
          i = d[2];
          continue;
        }
      }
    }
    if (c === '<') {
      const m = /^<([a-zA-Z][a-zA-Z0-9+.-]{1,31}:[^\s<>]*)>/.exec(s.slice(i, i + 4200));
      if (m) {
        const href = safeHref(m[1]);
        if (href) {
          flush();
          out.push(link(href, [textNode(m[1])]));
          i += m[0].length;
          continue;
        }
      }
      buf += c; // raw HTML stays text
      i++;
      continue;
    }
    if (c === 'h' && (i === 0 || /[\s(*_~]/.test(s[i - 1]))) {
      const m = BARE_URL.exec(s.slice(i, i + 4200));
      if (m) {
        let u = m[0].replace(/[.,;:!?)\]]+$/, '');
        const href = safeHref(u);
        if (href) {
          flush();
          out.push(link(href, [textNode(u)]));
          i += u.length;
          continue;
        }
      }
    }
    if (c === '*' || c === '_' || c === '~') {
      const n = runLength(s, i, c);
      const leftOk = i + n < s.length && !/\s/.test(s[i + n]);
      // _ inside a word is not emphasis (snake_case)
      const intraword = c === '_' && i > 0 && /[A-Za-z0-9]/.test(s[i - 1]);
      if (leftOk && !intraword && (c !== '~' || n === 2)) {
        const want = c === '~' ? 2 : Math.min(n, 3);
        const delim = c.repeat(want);
        let k = i + want;
        let found = -1;
        while ((k = s.indexOf(delim, k)) >= 0) {
          if (!/\s/.test(s[k - 1]) && !(c === '_' && /[A-Za-z0-9]/.test(s[k + want] || ''))) {
            found = k;
            break;
          }
          k += 1;
        }
        if (found > i + want) {
          flush();
          const inner = inline(s.slice(i + want, found), depth + 1);
          let node, into;
          if (c === '~') node = into = el('del');
          else if (want === 1) node = into = el('em');
          else if (want === 2) node = into = el('strong');
          else { node = el('strong'); into = el('em'); node.appendChild(into); }
          for (const x of inner) into.appendChild(x);
          out.push(node);
          i = found + want;
          continue;
        }
      }
      buf += c.repeat(n);
      i += n;
      continue;
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}

// ------------------------------------------------------------------ blocks

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const LIST_ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const TABLE_SEP = /^ *\|? *:?-{1,}:? *(\| *:?-{1,}:? *)*\|? *$/;

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') { cur += '|'; i++; continue; }
    if (s[i] === '|') { cells.push(cur.trim()); cur = ''; continue; }
    cur += s[i];
  }
  cells.push(cur.trim());
  return cells;
}

function codeBlock(text, lang) {
  const wrap = el('div', 'md-code');
  const bar = el('div', 'md-code-bar');
  const label = el('span', 'md-code-lang');
  label.textContent = lang || 'text';
  const copy = el('button', 'md-copy');
  copy.type = 'button';
  copy.textContent = 'copy';
  copy.addEventListener('click', () => {
    const done = () => { copy.textContent = 'copied'; setTimeout(() => { copy.textContent = 'copy'; }, 1200); };
    if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, () => {});
  });
  bar.appendChild(label);
  bar.appendChild(copy);
  const pre = el('pre');
  const code = el('code');
  if (lang && /^[A-Za-z0-9_+#.-]{1,32}$/.test(lang)) code.className = 'language-' + lang;
  code.textContent = text;
  pre.appendChild(code);
  wrap.appendChild(bar);
  wrap.appendChild(pre);
  return wrap;
}

// Parses lines[i..] as one list; returns [node, next index].
function parseList(lines, i, depth) {
  const first = LIST_ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const baseIndent = first[1].length;
  const list = el(ordered ? 'ol' : 'ul');
  if (ordered) {
    const start = parseInt(first[2], 10);
    if (start !== 1 && Number.isFinite(start)) list.setAttribute('start', String(start));
  }
  while (i < lines.length) {
    const m = LIST_ITEM.exec(lines[i]);
    if (!m || m[1].length !== baseIndent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[4]];
    const contIndent = baseIndent + m[2].length + 1;
    i++;
    // continuation: indented lines, or nested items, until a blank line followed by no indent
    while (i < lines.length) {
      const l = lines[i];
      if (l.trim() === '') {
        if (i + 1 < lines.length && /^\s+\S/.test(lines[i + 1]) &&
            lines[i + 1].search(/\S/) >= contIndent - 1) { body.push(''); i++; continue; }
        break;
      }
      const sub = LIST_ITEM.exec(l);
      if (sub && sub[1].length <= baseIndent) break;
      if (!sub && !/^\s/.test(l)) { body.push(l); i++; continue; } // lazy continuation
      body.push(l.slice(Math.min(contIndent, l.search(/\S/))));
      i++;
    }
    const li = el('li');
    let content = body.join('\n');
    const task = /^\[([ xX])\][ \t]+/.exec(content);
    if (task) {
      const box = el('input');
      box.type = 'checkbox';
      box.disabled = true;
      box.checked = task[1] !== ' ';
      li.appendChild(box);
      li.classList.add('md-task');
      content = content.slice(task[0].length);
    }
    const kids = blocks(content.split('\n'), depth + 1, true);
    for (const k of kids) li.appendChild(k);
    list.appendChild(li);
    while (i < lines.length && lines[i].trim() === '' && i + 1 < lines.length && LIST_ITEM.test(lines[i + 1]) &&
           LIST_ITEM.exec(lines[i + 1])[1].length === baseIndent) i++;
  }
  return [list, i];
}

// Block-level parse of lines into nodes. tight: a single paragraph renders bare (list items).
function blocks(lines, depth, tight) {
  const out = [];
  if (depth > 12) { const p = el('p'); p.textContent = lines.join('\n'); return [p]; }
  let i = 0;
  let para = [];
  const endPara = () => {
    if (!para.length) return;
    const text = para.join('\n');
    para = [];
    if (tight && out.length === 0 && i >= lines.length) {
      for (const n of inline(text)) out.push(n);
      return;
    }
    const p = el('p');
    for (const n of inline(text)) p.appendChild(n);
    out.push(p);
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      endPara();
      const fence = m[1];
      const lang = m[2];
      const body = [];
      i++;
      while (i < lines.length && !new RegExp('^ {0,3}' + fence[0] + '{' + fence.length + ',}\\s*$').test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or past the end)
      out.push(codeBlock(body.join('\n'), lang));
      continue;
    }
    if (line.trim() === '') { endPara(); i++; continue; }
    if ((m = HEADING.exec(line))) {
      endPara();
      const h = el('h' + m[1].length);
      for (const n of inline(m[2] || '')) h.appendChild(n);
      out.push(h);
      i++;
      continue;
    }
    if (HR.test(line) && !(para.length && /^ {0,3}-+\s*$/.test(line))) {
      endPara();
      out.push(el('hr'));
      i++;
      continue;
    }
    if (para.length && /^ {0,3}(=+|-+)\s*$/.test(line)) { // setext heading
      const h = el(line.trim()[0] === '=' ? 'h1' : 'h2');
      for (const n of inline(para.join('\n'))) h.appendChild(n);
      para = [];
      out.push(h);
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      endPara();
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) { body.push(m[1]); i++; }
      const q = el('blockquote');
      for (const n of blocks(body, depth + 1, false)) q.appendChild(n);
      out.push(q);
      continue;
    }
    if (LIST_ITEM.test(line) && (LIST_ITEM.exec(line)[4] !== '' || !para.length)) {
      endPara();
      const [list, next] = parseList(lines, i, depth);
      out.push(list);
      i = next;
      continue;
    }
    if (!para.length && /^( {4}|\t)/.test(line)) { // indented code
      const body = [];
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || lines[i].trim() === '')) {
        body.push(lines[i].replace(/^( {4}|\t)/, ''));
        i++;
      }
      while (body.length && body[body.length - 1].trim() === '') body.pop();
      out.push(codeBlock(body.join('\n'), ''));
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const head = splitRow(line);
      const aligns = splitRow(lines[i + 1]).map((c) =>
        c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '');
      if (aligns.length === head.length) {
        endPara();
        const wrap = el('div', 'md-table');
        const table = el('table');
        const thead = el('thead');
        const tr = el('tr');
        head.forEach((c, k) => {
          const th = el('th');
          if (aligns[k]) th.style.textAlign = aligns[k];
          for (const n of inline(c)) th.appendChild(n);
          tr.appendChild(th);
        });
        thead.appendChild(tr);
        table.appendChild(thead);
        const tbody = el('tbody');
        i += 2;
        while (i < lines.length && lines[i].includes('|') && lines[i].trim() !== '') {
          const cells = splitRow(lines[i]);
          const r = el('tr');
          for (let k = 0; k < head.length; k++) {
            const td = el('td');
            if (aligns[k]) td.style.textAlign = aligns[k];
            for (const n of inline(cells[k] || '')) td.appendChild(n);
            r.appendChild(td);
          }
          tbody.appendChild(r);
          i++;
        }
        table.appendChild(tbody);
        wrap.appendChild(table);
        out.push(wrap);
        continue;
      }
    }
    para.push(line.replace(/^ {1,3}/, ''));
    i++;
  }
  endPara();
  return out;
}

// Renders markdown text into a new <div class="md"> element.
export function render(text) {
  const root = el('div', 'md');
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  for (const n of blocks(lines, 0, false)) root.appendChild(n);
  return root;
}
