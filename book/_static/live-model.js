// Chapters 7, 12 and 13: the book's own models, run in the page by ONNX Runtime Web.
//
// A chapter places <div class="live-model" data-model="NAME" data-mode="MODE"></div>; this
// module (loaded only on such pages, book/_ext/live_model.py) turns it into a small form:
//   generate  Chapter 7: a prompt, temperature, top-k, top-p, a seed; tokens appear one by
//             one with the probability each was drawn with, by generate's sampler rules.
//   inside    Chapter 13: each head's attention pattern over the reader's text, and the
//             logit lens (each block's read-out of the next token).
//   chat      Chapter 12: the assistant, in chat.py's format, answering greedily.
// The models are the ONNX files `make live-models` writes (<site>/models/NAME.onnx, and
// NAME-inside.onnx for the inside mode); "Load your own model" takes a file that
// `python -m gpt_from_scratch.export` wrote. ONNX Runtime Web (<site>/ort/, one thread) is
// imported only when the reader presses Run. scripts/browser_live.py checks the page's
// numbers against PyTorch's.

const SITE = new URL('../', import.meta.url);  // this file is <site>/_static/live-model.js
const ORT_URL = new URL('ort/ort.wasm.min.mjs', SITE);
const FORMAT = 'gpt_from_scratch.onnx/1';  // gpt_from_scratch/export.py's FORMAT and KEY
const KEY = 'gpt_from_scratch.';
const EXPORT = 'python -m gpt_from_scratch.export CHECKPOINT OUT.onnx';
const CHAT = ['<|user|>', '<|assistant|>', '<|end|>', '<|pad|>'];  // chat.SPECIAL_TOKENS
const CHAT_ROOM = 16;  // chat.py's chat(): room left for the answer
const CHAT_NEW_TOKENS = 60;  // chat.py's respond(): max_new_tokens
const NO_WASM = 'This live model needs WebAssembly with SIMD, which this browser lacks or '
  + 'has turned off: the outputs printed in this chapter show the same model at work.';
// The smallest module with a SIMD instruction (wasm-feature-detect's): ONNX Runtime Web's
// wasm build needs SIMD, so a browser with WebAssembly that refuses this one cannot run it.
const SIMD_MODULE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3,
                                    2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11]);
// A phone's keyboard sends Enter with no Shift: there Enter types a new line, Run runs.
const TOUCH = typeof matchMedia === 'function' && matchMedia('(pointer: coarse)').matches;

// ---- ONNX Runtime, imported on the first Run -------------------------------------------
let ortPromise = null;
function loadOrt() {
  ortPromise ??= import(ORT_URL.href).then(ort => {
    ort.env.wasm.wasmPaths = new URL('ort/', SITE).href;  // the book's copy, never a CDN
    ort.env.wasm.numThreads = 1;  // GitHub Pages sends no cross-origin isolation headers
    return ort;
  }, err => {
    ortPromise = null;  // a later Run tries again
    throw err;
  });
  return ortPromise;
}

// ---- the file's own description: ModelProto.metadata_props, read from the protobuf ---
function varint(bytes, pos) {
  let value = 0;
  for (let shift = 0; shift < 64; shift += 7) {
    if (pos >= bytes.length) throw new Error('the file ends inside a number');
    const b = bytes[pos++];
    value += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) return [value, pos];
  }
  throw new Error('a number longer than 10 bytes');
}

// Each (field number, bytes) of length-delimited fields, the others skipped; throws where
// the bytes are not a protobuf message (a file cut short, another kind of file).
function* fields(bytes) {
  let pos = 0;
  while (pos < bytes.length) {
    const [tag, start] = varint(bytes, pos);
    const field = Math.floor(tag / 8), wire = tag % 8;
    if (field === 0) throw new Error('field number 0');
    if (wire === 0) pos = varint(bytes, start)[1];
    else if (wire === 1) pos = start + 8;
    else if (wire === 5) pos = start + 4;
    else if (wire === 2) {
      const [length, body] = varint(bytes, start);
      pos = body + length;
      if (pos > bytes.length) throw new Error('the file ends inside a field');
      yield [field, bytes.subarray(body, pos)];
    } else throw new Error(`wire type ${wire}`);
    if (pos > bytes.length) throw new Error('the file ends inside a field');
  }
}

const utf8 = new TextDecoder('utf-8', {fatal: true});

function metadataProps(bytes) {
  const props = {};
  let graph = false;
  for (const [field, body] of fields(bytes)) {
    graph ||= field === 7;  // ModelProto.graph
    if (field !== 14) continue;  // ModelProto.metadata_props: StringStringEntryProto
    const entry = {};
    for (const [f, text] of fields(body)) entry[f] = utf8.decode(text);
    if (entry[1] !== undefined) props[entry[1]] = entry[2] ?? '';
  }
  if (!graph) throw new Error('no graph');
  return props;
}

class ReaderError extends Error {}  // its message tells the reader what to do

// What an export_onnx file says about itself (read_onnx_metadata's checks), or a
// ReaderError whose message tells the reader what is wrong and what to do.
export function describeModel(bytes, name) {
  let props;
  try {
    props = metadataProps(bytes);
  } catch (err) {
    throw new ReaderError(`${name} is not a complete ONNX file (${err.message}): it was `
      + `cut short or is another kind of file. Write one with ${EXPORT}.`);
  }
  const get = key => props[KEY + key];
  if (get('format') !== FORMAT) {
    throw new ReaderError(`${name} is an ONNX file but not one of the book's models (no `
      + `${KEY}format = ${FORMAT} in its metadata). Write one with ${EXPORT}.`);
  }
  try {
    const config = JSON.parse(get('config'));
    const meta = {model: get('model'), config, vocab: get('vocab'),
                  outputs: JSON.parse(get('outputs')),
                  special: JSON.parse(get('special') ?? '[]'),
                  chars: get('vocab') === 'char' ? JSON.parse(get('chars')) : null};
    const V = config.vocab_size, n = config.context_length;
    if (!Number.isInteger(V) || !Number.isInteger(n) || n < 1) throw new Error('config');
    if (meta.chars && meta.chars.length + meta.special.length !== V) {
      throw new Error('vocab');
    }
    return meta;
  } catch (err) {
    throw new ReaderError(`${name}: the book's metadata in it is damaged `
      + `(${err.message}); export the model again.`);
  }
}

// Why a described model cannot serve `mode`, or null.
function unfit(meta, mode) {
  if (meta.vocab !== 'char') {
    return 'This model reads GPT-2\'s BPE tokens, which this page cannot tokenize (it '
      + 'reads characters): load a character-level model.';
  }
  if (mode === 'inside' && !(meta.outputs.includes('attention')
                             && meta.outputs.includes('lens'))) {
    return 'This file has no attention patterns or logit lens: export it with --internals '
      + '--lens.';
  }
  if (mode === 'chat' && meta.special.join() !== CHAT.join()) {
    return 'This model has no chat tokens: export a Chapter 12 model with --chat.';
  }
  return null;
}

// ---- tokens ---------------------------------------------------------------------------
function encode(meta, text) {
  const index = new Map(meta.chars.map((c, i) => [c, i]));
  const unknown = [...new Set([...text].filter(c => !index.has(c)))];
  if (unknown.length) {
    const shown = unknown.slice(0, 8).map(c => JSON.stringify(c)).join(', ');
    const what = unknown.length === 1 ? 'the character' : 'these characters';
    throw new ReaderError(`The model does not know ${what}: ${shown}`
      + `${unknown.length > 8 ? ' …' : ''}. Its vocabulary is `
      + `the ${meta.chars.length} characters it was trained on: remove or replace them.`);
  }
  return [...text].map(c => index.get(c));
}

const show = (meta, id) => id < meta.chars.length ? meta.chars[id]
  : meta.special[id - meta.chars.length];

// ---- generate's sampler (gpt_from_scratch/generate.py: next_token) ---------------------
// A seeded PRNG (mulberry32): the same seed gives the same tokens in the page, every run;
// they are not torch.multinomial's draws, which follow torch's own generator.
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function softmax(logits) {
  const max = Math.max(...logits);
  const e = logits.map(x => Math.exp(x - max));  // -inf -> 0
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map(x => x / sum);
}

const argmax = xs => xs.reduce((best, x, i) => (x > xs[best] ? i : best), 0);

// top_k_filter: keep the k largest (ties with the k-th kept), the others -inf.
function topK(logits, k) {
  if (!k || k >= logits.length) return logits;
  const kth = [...logits].sort((a, b) => b - a)[k - 1];
  return logits.map(x => (x < kth ? -Infinity : x));
}

// top_p_filter: keep the most likely tokens while the mass before each is below p.
function topP(logits, p) {
  if (!p || p >= 1) return logits;
  const sorted = [...logits].sort((a, b) => b - a);
  const probs = softmax(sorted);
  let before = 0, kept = 0;
  for (const q of probs) {
    if (before >= p) break;
    before += q;
    kept += 1;
  }
  const threshold = sorted[kept - 1];
  return logits.map(x => (x < threshold ? -Infinity : x));
}

// The distribution next_token draws from, in its order: top-k, then (logits - max) /
// temperature in float32, then top-p, then softmax.
export function samplingProbs(logits, {temperature, topk, topp}) {
  let x = topK(Array.from(logits), topk);
  // next_token's min(max(t, tiny), max) for float32: a temperature float32 cannot hold
  // would give 0/0 or inf/inf.
  const t = Math.min(Math.max(Math.fround(temperature), 1.1754943508222875e-38),
                     3.4028234663852886e38);
  const max = Math.max(...x);
  x = x.map(v => Math.fround(Math.fround(v - max) / t));
  return softmax(topP(x, topp));
}

// next_token: greedy (temperature 0) takes the arg-max; else one draw from samplingProbs.
// Returns the token and its probability.
export function nextToken(logits, options) {
  const broken = logits.some(x => Number.isNaN(x) || x === Infinity)
    || logits.every(x => x === -Infinity);
  if (broken) {
    throw new ReaderError('The model\'s logits are not finite (NaN or infinity), as '
      + 'generate refuses them: its weights are broken; export a checkpoint whose weights '
      + 'are finite.');
  }
  if (!(options.temperature > 0)) {
    const row = Array.from(logits), token = argmax(row);
    return {token, p: softmax(row)[token]};
  }
  const probs = samplingProbs(logits, options);
  const u = options.random();
  let sum = 0, token = argmax(probs);  // rounding: the most likely token
  for (let i = 0; i < probs.length; i++) {
    sum += probs[i];
    if (probs[i] > 0 && u < sum) {
      token = i;
      break;
    }
  }
  return {token, p: probs[token]};
}

// ---- the model ------------------------------------------------------------------------
async function openModel(bytes, name) {
  const meta = describeModel(bytes, name);
  const ort = await loadOrt();
  let session;
  try {
    session = await ort.InferenceSession.create(bytes, {executionProviders: ['wasm']});
  } catch (err) {
    throw new ReaderError(`${name} has the book's metadata, but ONNX Runtime cannot `
      + `read its graph (${String(err.message || err).slice(0, 120)}): export it again.`);
  }
  return {meta, session, ort, name};
}

// Every output of the model on `ids` (at most context_length of them).
async function forward(model, ids) {
  const {ort, session} = model;
  const idx = new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]);
  return session.run({idx});
}

// Let the page draw and take a click: a task, not setTimeout(0), which Chromium clamps to
// 4 ms after five nested calls (that would cap the tokens per second it measures).
const channel = new MessageChannel();
const pause = () => new Promise(resolve => {
  channel.port1.onmessage = () => resolve();
  channel.port2.postMessage(null);
});

// ---- the widget -----------------------------------------------------------------------
let widgets = 0;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

function field(id, label, input) {
  input.id = id;
  return el('span', {class: 'live-field'}, el('label', {for: id, text: label}), input);
}

class LiveModel {
  constructor(root) {
    this.root = root;
    this.mode = root.dataset.mode || 'generate';
    const suffix = this.mode === 'inside' ? '-inside' : '';
    this.url = new URL(`models/${root.dataset.model}${suffix}.onnx`, SITE);
    this.model = null;
    this.running = false;
    this.stats = null;  // the last run's timings, shown in the page (and read by the test)
    this.trace = [];  // each step's window and last-position logits (the browser test's)
    this.n = ++widgets;
    root.liveModel = this;
    this.build();
  }

  id(name) {
    return `live-${this.n}-${name}`;
  }

  build() {
    const r = this.root;
    r.replaceChildren();
    this.form = el('form', {class: 'live-form'});
    this.status = el('p', {class: 'live-status', role: 'status', 'aria-live': 'polite'});
    this.output = el('div', {class: 'live-output'});  // the status line is announced
    this.run = el('button', {type: 'submit', class: 'live-run'});
    this.stop = el('button', {type: 'button', class: 'live-stop', text: 'Stop'});
    this.stop.disabled = true;
    this.stop.addEventListener('click', () => { this.stopped = true; });
    this.form.addEventListener('submit', event => {
      event.preventDefault();
      if (!this.running) this.start();
    });
    if (this.mode === 'chat') this.buildChat();
    else if (this.mode === 'inside') this.buildInside();
    else this.buildGenerate();
    this.file = el('input', {type: 'file', accept: '.onnx,application/octet-stream'});
    this.file.addEventListener('change', () => this.loadFile());
    const own = el('details', {class: 'live-own'},
      el('summary', {text: 'Load your own model'}),
      el('p', {text: `A file written by ${EXPORT} (character-level`
        + (this.mode === 'inside' ? ', with --internals --lens' : '')
        + (this.mode === 'chat' ? ', with --chat' : '') + '). It stays on this device.'}),
      field(this.id('file'), 'ONNX file', this.file));
    r.append(this.form, this.status, this.output, own);
  }

  buttons() {
    return el('span', {class: 'live-buttons'}, this.run, this.stop);
  }

  buildGenerate() {
    const num = (name, value, attrs) => el('input', {type: 'number', name, value,
                                                     inputmode: 'decimal', ...attrs});
    this.prompt = el('textarea', {rows: 2, name: 'prompt', spellcheck: 'false'});
    this.prompt.value = 'ROMEO:\n';
    this.prompt.setAttribute('enterkeyhint', TOUCH ? 'enter' : 'go');
    this.prompt.addEventListener('keydown', event => {  // Ctrl+Enter runs, and Enter on a
      const runs = event.ctrlKey || event.metaKey || (!TOUCH && !event.shiftKey);  // desk
      if (event.key === 'Enter' && runs && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    this.temperature = num('temperature', '0.8', {min: 0, max: 5, step: 'any'});
    this.topk = num('top_k', '0', {min: 0, step: 1, inputmode: 'numeric'});
    this.topp = num('top_p', '0.95', {min: 0.01, max: 1, step: 'any'});
    this.seed = num('seed', '1337', {min: 0, step: 1, inputmode: 'numeric'});
    this.count = num('tokens', '200', {min: 1, max: 2000, step: 1, inputmode: 'numeric'});
    this.run.textContent = 'Run';
    this.form.append(
      field(this.id('prompt'), TOUCH ? 'Prompt (Enter: a new line)'
        : 'Prompt (Enter runs; Shift+Enter: a new line)', this.prompt),
      el('span', {class: 'live-row'},
        field(this.id('temperature'), 'Temperature (0: greedy)', this.temperature),
        field(this.id('topk'), 'Top-k (0: all)', this.topk),
        field(this.id('topp'), 'Top-p (1: all)', this.topp),
        field(this.id('seed'), 'Seed', this.seed),
        field(this.id('count'), 'New tokens', this.count)),
      this.buttons());
  }

  buildInside() {
    this.text = el('input', {type: 'text', name: 'text', spellcheck: 'false'});
    this.text.value = 'ROMEO: Is the day so young?';
    this.layer = el('select', {name: 'layer'});
    this.head = el('select', {name: 'head'});
    this.query = el('select', {name: 'position'});
    for (const s of [this.layer, this.head, this.query]) {
      s.disabled = true;  // empty until the first run fills them
      s.addEventListener('change', () => this.drawInside());
    }
    this.run.textContent = 'Run';
    this.form.append(field(this.id('text'), 'Your text (Enter runs)', this.text),
                     this.buttons(),
                     el('span', {class: 'live-row'},
                        field(this.id('layer'), 'Layer', this.layer),
                        field(this.id('head'), 'Head', this.head),
                        field(this.id('query'), 'Position', this.query)));
  }

  buildChat() {
    this.history = [];
    this.message = el('input', {type: 'text', name: 'message', spellcheck: 'false'});
    this.message.value = 'Last word: The quality of mercy is not strain\'d';
    this.reset = el('button', {type: 'button', class: 'live-reset',
                               text: 'New conversation'});
    this.reset.addEventListener('click', () => {
      this.history = [];
      this.output.replaceChildren();
      this.say('A new conversation.');
    });
    this.run.textContent = 'Send';
    this.form.append(field(this.id('message'), 'Your message (Enter sends)', this.message),
                     el('span', {class: 'live-buttons'}, this.run, this.stop, this.reset));
  }

  submit() {
    if (this.form.requestSubmit) this.form.requestSubmit();
    else if (!this.running) this.start();
  }

  say(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle('live-error', error);
  }

  async bookModel() {
    if (this.model) return this.model;
    const response = await fetch(this.url);
    if (!response.ok) {
      throw new ReaderError(`The book's model is not on this site `
        + `(${this.url.pathname}: HTTP ${response.status}); \`make book\` writes it.`);
    }
    const bytes = new Uint8Array(await response.arrayBuffer());
    this.model = await openModel(bytes, this.url.pathname.split('/').pop());
    return this.model;
  }

  async loadFile() {
    const file = this.file.files[0];
    if (!file) return;
    this.say(`Reading ${file.name} …`);
    try {
      const bytes = new Uint8Array(await file.arrayBuffer());
      const meta = describeModel(bytes, file.name);  // before loading ONNX Runtime
      const why = unfit(meta, this.mode);
      if (why) throw new ReaderError(`${file.name}: ${why}`);
      this.model = await openModel(bytes, file.name);
      if (this.mode === 'chat') {  // its ids mean other characters under another model
        this.history = [];
        this.output.replaceChildren();
      }
      const c = meta.config;
      this.say(`Loaded ${file.name}: a ${meta.model} of ${c.n_layers} layers, `
        + `${meta.chars.length} characters, a context of ${c.context_length}. `
        + 'Run uses it.');
    } catch (err) {
      this.say(message(err), true);
    }
  }

  async start() {
    this.running = true;
    this.stopped = false;
    this.run.disabled = true;
    this.stop.disabled = this.mode === 'inside';  // one pass: nothing to stop
    this.file.disabled = true;  // the model stays the one this run reads
    if (this.reset) this.reset.disabled = true;  // the history stays this run's
    const pressed = performance.now();
    this.loadedNow = !this.model;
    try {
      if (!this.model) this.say('Loading ONNX Runtime and the model …');
      const model = await this.bookModel();
      const why = unfit(model.meta, this.mode);
      if (why) throw new ReaderError(why);
      if (this.mode === 'chat') await this.chat(model, pressed);
      else if (this.mode === 'inside') await this.inside(model, pressed);
      else await this.generate(model, pressed);
    } catch (err) {
      this.say(message(err), true);
    } finally {
      this.running = false;
      this.run.disabled = false;
      this.stop.disabled = true;
      this.file.disabled = false;
      if (this.reset) this.reset.disabled = false;
    }
  }

  // generate's loop without the cache: each step runs the newest context_length tokens
  // (the same tokens as the cache gives) and picks from the last position's logits.
  async decode(model, ids, count, pick, onToken) {
    const {config} = model.meta, n = config.context_length, V = config.vocab_size;
    this.trace = [];
    const start = performance.now();
    let first = null;
    for (let i = 0; i < count && !this.stopped; i++) {
      const window = ids.slice(-n);
      const out = await forward(model, window);
      const logits = out.logits.data.subarray((window.length - 1) * V, window.length * V);
      if (this.trace.length < 1000) this.trace.push({window, logits: Array.from(logits)});
      const {token, p} = pick(logits);
      ids.push(token);
      first ??= performance.now();
      if (onToken(token, p) === false) break;
      await pause();
    }
    const end = performance.now();
    return {tokens: this.trace.length, start, first, end};
  }

  timing(pressed, {tokens, first, end}) {
    const rate = tokens > 1 ? (tokens - 1) / ((end - first) / 1000) : NaN;
    this.stats = {firstTokenMs: first === null ? NaN : first - pressed,
                  tokensPerSecond: rate, tokens};
    if (first === null) return 'No token yet.';
    const loading = this.loadedNow ? ' (loading included)' : '';
    const head = `${tokens} token${tokens === 1 ? '' : 's'}; the first `
      + `${Math.round(first - pressed)} ms after you pressed the button${loading}`;
    return tokens > 1 ? `${head}, then ${rate.toFixed(0)} tokens per second on this device.`
      : `${head}.`;
  }

  async generate(model, pressed) {
    const {meta} = model, n = meta.config.context_length;
    const text = this.prompt.value;
    if (!text) {
      throw new ReaderError('Type a prompt first: the model continues a text of at '
        + 'least one character (e.g. ROMEO: and a new line).');
    }
    const ids = encode(meta, text);
    const fields = {Temperature: this.temperature, 'Top-k': this.topk, 'Top-p': this.topp,
                    Seed: this.seed, 'New tokens': this.count};
    const empty = Object.entries(fields)
      .filter(([, input]) => input.value.trim() === '' || input.validity?.badInput)
      .map(([name]) => name);
    if (empty.length) {
      throw new ReaderError(`Fill in ${empty.join(', ')} with a number: an empty or `
        + 'unreadable field is not taken as 0.');
    }
    const temperature = Number(this.temperature.value), topk = Number(this.topk.value);
    const topp = Number(this.topp.value), seed = Number(this.seed.value);
    const count = Number(this.count.value);
    const bad = [[!(temperature >= 0 && Number.isFinite(temperature)), 'temperature ≥ 0'],
                 [!Number.isInteger(topk) || topk < 0, 'top-k a whole number ≥ 0'],
                 [!(topp > 0 && topp <= 1), 'top-p in (0, 1]'],
                 [!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32,
                  'the seed a whole number from 0 to 4294967295'],
                 [!Number.isInteger(count) || count < 1 || count > 2000,
                  'new tokens a whole number from 1 to 2000']].filter(([b]) => b);
    if (bad.length) throw new ReaderError(`Set ${bad.map(([, w]) => w).join(', ')}.`);
    const cropped = ids.length > n ? ` Your prompt is ${ids.length} characters; the model `
      + `reads the newest ${n} (its context), as generate crops it.` : '';
    const shown = el('pre', {class: 'live-text'});
    shown.append(el('span', {class: 'live-prompt', text}));
    shown.addEventListener('click', event => {  // a tap shows what a hover shows
      const token = event.target.closest('.live-token');
      if (token) this.say(`${JSON.stringify(token.textContent)}: ${token.title}.`);
    });
    this.output.replaceChildren(shown);
    this.say(`Generating …${cropped}`);
    const random = mulberry32(seed);
    const options = {temperature, topk: topk || null, topp, random};
    const pick = logits => nextToken(logits, options);
    const timing = await this.decode(model, ids, count, pick, (token, p) => {
      shown.append(el('span', {class: 'live-token', title: `p = ${p.toFixed(3)}`,
                               'data-p': p.toFixed(4), text: show(meta, token)}));
    });
    this.say(`${this.stopped ? 'Stopped: ' : ''}${this.timing(pressed, timing)} Each `
      + 'token\'s probability shows when you hover over it or tap it.' + cropped);
  }

  async chat(model, pressed) {
    const {meta} = model, n = meta.config.context_length, base = meta.chars.length;
    const [user, assistant, end] = [0, 1, 2].map(i => base + i);
    const text = this.message.value;
    if (!text) throw new ReaderError('Type a message first (e.g. Repeat: and a line).');
    for (const marker of CHAT) {
      if (text.includes(marker)) {
        throw new ReaderError(`Your message contains the chat marker ${marker}: markers `
          + 'come from the chat format, never from the text of a message.');
      }
    }
    const body = encode(meta, text);
    const messages = [...this.history, {role: 'user', ids: body, text}];
    const render = ms => [...ms.flatMap(m => [m.role === 'user' ? user : assistant,
                                              ...m.ids, end]), assistant];
    let seen = messages;
    while (seen.length > 1 && render(seen).length + CHAT_ROOM > n) seen = seen.slice(2);
    const ids = render(seen);
    if (ids.length >= n) {
      throw new ReaderError(`Your message is ${ids.length} tokens with its markers; the `
        + `model reads ${n}: write a shorter one.`);
    }
    const dropped = messages.length - seen.length;
    this.output.append(el('p', {class: 'live-user'}, el('b', {text: 'You: '}), text));
    const answer = el('span');
    this.output.append(el('p', {class: 'live-assistant'}, el('b', {text: 'Assistant: '}),
                           answer));
    this.say('Answering …');
    const reply = [];
    const count = Math.min(CHAT_NEW_TOKENS, n - ids.length);  // the window never slides
    const timing = await this.decode(model, ids, count,
      logits => ({token: argmax(Array.from(logits)), p: 1}), token => {
        if (token === end) return false;
        reply.push(token);
        if (token < base) answer.append(meta.chars[token]);
        return true;
      });
    const stopped = ids[ids.length - 1] === end;
    this.history = [...messages, {role: 'assistant', ids: reply,
                                  text: answer.textContent}];
    this.message.value = '';
    const unended = this.stopped ? 'Stopped. '
      : 'The answer did not end its turn within its tokens. ';
    this.say(`Assistant: ${answer.textContent || '(nothing)'} `  // announced: aria-live
      + (stopped ? '' : unended)
      + (dropped ? `The model read only the newest exchange (${n} characters of context). `
        : '') + this.timing(pressed, timing));
  }

  async inside(model, pressed) {
    const {meta} = model, n = meta.config.context_length;
    const text = this.text.value;
    if (!text) throw new ReaderError('Type a text first: at least one character.');
    let ids = encode(meta, text);
    const cropped = ids.length > n;
    ids = ids.slice(-n);
    this.say('Running …');
    const out = await forward(model, ids);
    const done = performance.now();
    const [L, , H, T] = out.attention.dims;
    this.insideData = {ids, attention: out.attention.data, lens: out.lens.data, L, H, T,
                       V: meta.config.vocab_size, meta};
    const fill = (select, count, label, selected) => {
      select.disabled = false;
      select.replaceChildren(...Array.from({length: count}, (_, i) =>
        el('option', {value: i, text: label(i)})));
      select.value = String(selected);
    };
    const layer = Math.min(Number(this.layer.value) || 0, L - 1);
    const head = Math.min(Number(this.head.value) || 0, H - 1);
    fill(this.layer, L, i => `${i + 1} of ${L}`, layer);
    fill(this.head, H, i => `${i + 1} of ${H}`, head);
    fill(this.query, T, i => `${i}: ${JSON.stringify(show(meta, ids[i]))}`, T - 1);
    this.stats = {firstTokenMs: done - pressed};
    this.drawInside();
    this.say(`${T} characters${cropped ? ` (the newest ${n}: the model's context)` : ''}, `
      + `read in ${Math.round(done - pressed)} ms after you pressed Run.`);
  }

  drawInside() {
    const d = this.insideData;
    if (!d) return;
    const layer = Number(this.layer.value), head = Number(this.head.value);
    const q = Number(this.query.value), {T, V, meta, ids} = d;
    // attention (L, 1, H, T, T): query i's weight on key j
    const at = (i, j) => d.attention[((layer * d.H + head) * T + i) * T + j];
    const size = Math.min(320, Math.max(this.root.clientWidth - 16, 160));
    const cell = size / T;
    const canvas = el('canvas', {class: 'live-attention', width: size, height: size,
                                 role: 'img'});
    const g = canvas.getContext('2d');
    g.fillStyle = '#fff';  // the blues read on white in the light and the dark theme
    g.fillRect(0, 0, size, size);
    for (let i = 0; i < T; i++) {
      for (let j = 0; j <= i; j++) {
        const w = at(i, j);
        g.fillStyle = `rgba(31, 97, 141, ${Math.sqrt(w)})`;
        g.fillRect(j * cell, i * cell, Math.ceil(cell), Math.ceil(cell));
      }
    }
    g.strokeStyle = '#c0392b';
    g.strokeRect(0, q * cell, size, cell);
    const row = Array.from({length: q + 1}, (_, j) => at(q, j));
    const best = row.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 3);
    const char = i => JSON.stringify(show(meta, ids[i]));
    const summary = `Layer ${layer + 1}, head ${head + 1}: position ${q} (${char(q)}) `
      + 'attends most to ' + best.map(([w, j]) => `${j} (${char(j)}, ${w.toFixed(2)})`)
        .join(', ') + '.';
    canvas.setAttribute('aria-label', `The attention pattern, queries down, keys across. `
      + summary);
    const lens = el('table', {class: 'live-lens'});
    lens.append(el('caption', {text: `The logit lens at position ${q}: what each block's `
      + 'residual stream reads out as the next character'}));
    lens.append(el('tr', {}, el('th', {text: 'after block'}), el('th', {text: 'top 3'})));
    for (let l = 0; l < d.L; l++) {
      const start = (l * T + q) * V;
      const probs = softmax(Array.from(d.lens.subarray(start, start + V)));
      const top = probs.map((p, i) => [p, i]).sort((a, b) => b[0] - a[0]).slice(0, 3);
      lens.append(el('tr', {}, el('td', {text: String(l + 1)}),
        el('td', {text: top.map(([p, i]) => `${JSON.stringify(show(meta, i))} `
          + `${p.toFixed(2)}`).join('  ')})));
    }
    const said = el('p', {class: 'live-summary', text: summary});
    this.output.replaceChildren(canvas, said, lens);
  }
}

function message(err) {
  if (err instanceof ReaderError) return err.message;
  return `Something went wrong: ${String(err && err.message || err).slice(0, 200)}. `
    + 'Reload the page to try again.';
}

function init() {
  for (const root of document.querySelectorAll('div.live-model')) {
    if (root.liveModel) continue;
    if (typeof WebAssembly !== 'object' || !WebAssembly.validate(SIMD_MODULE)) {
      root.replaceChildren(el('p', {class: 'live-status live-error', text: NO_WASM}));
      root.liveModel = {unavailable: true};
      continue;
    }
    new LiveModel(root);
  }
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
else init();
