// The callhook web phone (docs/webphone.md): a call from the browser over a
// (Past 600 lines: one page's whole script, the call and its picture, served as it is:
// no build step.)
// WebSocket whose binary messages are RTP packets (G.711 µ-law, RFC 4733
// digits), and the call drawn as it happens from its call-log lines; and,
// signed in as a client id, calls to it (connect to webrtc:ID) rung, answered
// and rejected here.
"use strict";

const $ = (id) => document.getElementById(id);
const PCMU = 0;
const TELEPHONE_EVENT = 101;
const EVENT_CODES = { "0": 0, "1": 1, "2": 2, "3": 3, "4": 4, "5": 5, "6": 6, "7": 7, "8": 8, "9": 9, "*": 10, "#": 11 };

// --- G.711 µ-law (ITU-T G.711) ------------------------------------------------------------

function ulawEncode(sample) {
  // sample: -1..1 float. Standard 14-bit µ-law with bias 0x84.
  let s = Math.max(-32768, Math.min(32767, Math.round(sample * 32767)));
  const sign = s < 0 ? 0x80 : 0;
  if (s < 0) s = -s;
  s = Math.min(s + 0x84, 32767);
  let exponent = 7;
  for (let mask = 0x4000; (s & mask) === 0 && exponent > 0; mask >>= 1) exponent--;
  const mantissa = (s >> (exponent + 3)) & 0x0f;
  return ~(sign | (exponent << 4) | mantissa) & 0xff;
}

const ULAW_DECODE = new Float32Array(256);
for (let i = 0; i < 256; i++) {
  const u = ~i & 0xff;
  const t = (((u & 0x0f) << 3) + 0x84) << ((u & 0x70) >> 4);
  ULAW_DECODE[i] = ((u & 0x80) ? 0x84 - t : t - 0x84) / 32768;
}

// --- RTP (RFC 3550) -------------------------------------------------------------------------

class RtpSender {
  constructor() {
    this.seq = Math.floor(Math.random() * 65536);
    this.ts = Math.floor(Math.random() * 2 ** 31);
    this.ssrc = Math.floor(Math.random() * 2 ** 32) >>> 0;
    this.event = null; // the RFC 4733 event being sent
    this.digits = [];
  }

  packet(pt, marker, timestamp, payload) {
    const p = new Uint8Array(12 + payload.length);
    const v = new DataView(p.buffer);
    p[0] = 0x80;
    p[1] = (marker ? 0x80 : 0) | pt;
    v.setUint16(2, this.seq);
    this.seq = (this.seq + 1) & 0xffff;
    v.setUint32(4, timestamp >>> 0);
    v.setUint32(8, this.ssrc);
    p.set(payload, 12);
    return p.buffer;
  }

  // The packets of the next 20 ms: the microphone's frame, or an RFC 4733 event's packet
  // while a digit is being sent (RFC 4733 §2.5: the event replaces the audio).
  frame(samples) {
    const out = [];
    if (this.event === null && this.digits.length) {
      this.event = { code: EVENT_CODES[this.digits.shift()], start: this.ts, n: 0 };
    }
    if (this.event !== null) {
      const e = this.event;
      e.n++;
      const tone = 5; // 100 ms of tone, then the end packet three times (§2.5.1.4)
      const end = e.n > tone;
      const duration = Math.min(e.n, tone) * 160;
      const payload = new Uint8Array([e.code, (end ? 0x80 : 0) | 10, duration >> 8, duration & 0xff]);
      const repeats = end ? 3 : 1;
      for (let i = 0; i < repeats; i++) out.push(this.packet(TELEPHONE_EVENT, e.n === 1, e.start, payload));
      if (end) this.event = null;
    } else {
      const payload = new Uint8Array(samples.length);
      for (let i = 0; i < samples.length; i++) payload[i] = ulawEncode(samples[i]);
      out.push(this.packet(PCMU, false, this.ts, payload));
    }
    this.ts = (this.ts + 160) >>> 0;
    return out;
  }
}

function rtpPayload(buffer) {
  const p = new Uint8Array(buffer);
  if (p.length < 12 || (p[0] >> 6) !== 2) return null;
  let offset = 12 + (p[0] & 0x0f) * 4;
  if (p[0] & 0x10) {
    if (p.length < offset + 4) return null;
    offset += 4 + ((p[offset + 2] << 8) | p[offset + 3]) * 4;
  }
  let end = p.length;
  if (p[0] & 0x20) end -= p[end - 1];
  if (offset > end) return null;
  return { pt: p[1] & 0x7f, payload: p.subarray(offset, end) };
}

// --- the call log's lines -------------------------------------------------------------------

// "2026-11-21T10:15:02.114Z +3.260 kind text" -> {t, kind, text}
function parseLine(line) {
  const m = /^(\S+) \+([0-9.]+) (\S+) ?(.*)$/.exec(line);
  if (!m) return null;
  return { wall: m[1], t: parseFloat(m[2]), kind: m[3], text: m[4] };
}

// What a call's picture needs, built from its log lines (and, live, its page events).
class CallModel {
  constructor() {
    this.lines = [];
    this.pages = [];
    this.end = 0;
    this.live = false;
    this.startedAt = performance.now();
  }

  add(line) {
    const l = parseLine(line);
    if (!l) return null;
    this.lines.push(l);
    this.end = Math.max(this.end, l.t);
    return l;
  }

  now() {
    return this.live ? Math.max(this.end, (performance.now() - this.startedAt) / 1000) : this.end;
  }

  // Spans and marks for the picture.
  shapes() {
    const now = this.now();
    const prompts = [], actions = [], voice = [], timers = [], marks = [], levels = [];
    const timerNames = []; // in the order they first ran (a row each)
    const openPrompts = {};
    let openAction = null, voiceOn = null, running = [];
    const closeTimers = (t) => {
      for (const r of running) {
        const expired = t >= r.expires - 0.0005;
        timers.push({ name: r.name, from: r.from, to: Math.min(t, r.expires), expires: r.expires, expired });
      }
      running = [];
    };
    for (const l of this.lines) {
      const id = (/^#(\d+)/.exec(l.text) || [])[1];
      switch (l.kind) {
        case "prompt_start":
          openPrompts[id] = { from: l.t, text: l.text.replace(/^#\d+ /, "") };
          break;
        case "prompt_end":
        case "prompt_stop":
          if (openPrompts[id]) {
            prompts.push({ ...openPrompts[id], to: l.t, stopped: l.kind === "prompt_stop" });
            delete openPrompts[id];
          }
          break;
        case "action_start":
          openAction = { from: l.t, text: l.text.replace(/^\[\d+\] /, "") };
          break;
        case "action_end":
          if (openAction) actions.push({ ...openAction, to: l.t, result: l.text });
          openAction = null;
          break;
        case "voice":
          if (l.text === "on") voiceOn = l.t;
          else if (voiceOn !== null) { voice.push({ from: voiceOn, to: l.t }); voiceOn = null; }
          break;
        case "timers": {
          // The set running from now: a timer in it with the same start and expiry runs on;
          // any other one stopped (or expired) now.
          const next = [];
          if (l.text !== "none") {
            for (const part of l.text.split("; ")) {
              const m = /^(.*) ([0-9.]+)\.\.([0-9.]+)$/.exec(part);
              if (m) next.push({ name: m[1], from: parseFloat(m[2]), expires: parseFloat(m[3]) });
              if (m && !timerNames.includes(m[1])) timerNames.push(m[1]);
            }
          }
          const same = (a, b) => a.name === b.name && a.from === b.from && a.expires === b.expires;
          const stopped = running.filter((r) => !next.some((n) => same(n, r)));
          const kept = running.filter((r) => next.some((n) => same(n, r)));
          running = stopped;
          closeTimers(l.t);
          running = kept.concat(next.filter((n) => !kept.some((r) => same(n, r))));
          break;
        }
        case "levels": {
          const n = l.text.length;
          for (let i = 0; i < n; i++) levels.push({ t: l.t - (n - i) * 0.1, ch: l.text[i] });
          break;
        }
        case "digit":
          marks.push({ t: l.t, cls: "digit", text: l.text.split(" ")[0] });
          break;
        case "speech":
          marks.push({ t: l.t, cls: "speech", text: l.text });
          break;
        case "page_request":
          marks.push({ t: l.t, cls: "page", text: "page" });
          break;
      }
    }
    for (const id in openPrompts) prompts.push({ ...openPrompts[id], to: now, open: true });
    if (openAction) actions.push({ ...openAction, to: now, open: true });
    if (voiceOn !== null) voice.push({ from: voiceOn, to: now });
    for (const r of running) timers.push({ name: r.name, from: r.from, to: Math.min(now, r.expires), expires: r.expires, running: true });
    return { prompts, actions, voice, timers, timerNames, marks, levels, now };
  }
}

// --- drawing ----------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
const PX = 60; // pixels a second
const AXIS = 20; // the seconds' row, at the bottom
const PITCH = { min: 28, max: 64 }; // a row's height: what the box's height gives, within these

function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// Text widths, measured in the picture's font (a canvas measures without drawing).
const measure = document.createElement("canvas").getContext("2d");
measure.font = "11px system-ui, sans-serif";
const textWidth = (text) => measure.measureText(text).width;

// `text` cut to fit `width` pixels, with an ellipsis when cut ("" when nothing fits).
function fit(text, width) {
  if (textWidth(text) <= width) return text;
  let n = text.length;
  while (n > 0 && textWidth(text.slice(0, n) + "…") > width) n--;
  return n > 0 ? text.slice(0, n) + "…" : "";
}

// The rows, top to bottom: each with its label; a row per timer the call ran.
function rows(s) {
  const list = [
    { key: "action", label: "actions" },
    { key: "prompt", label: "prompts" },
    { key: "level", label: "caller level" },
    { key: "voice", label: "voice (VAD)" },
    { key: "marks", label: "digits, speech" },
  ];
  if (!s.timerNames.length) list.push({ key: "timers", label: "timers" });
  for (const name of s.timerNames) list.push({ key: `timer ${name}`, label: `timer: ${name}` });
  return list;
}

// The picture drawn last, drawn again when the window's size changes.
let drawn = null;
window.addEventListener("resize", () => drawn && draw(drawn));

function draw(model) {
  drawn = model;
  const svg = $("picture");
  const labels = $("picture-labels");
  const s = model.shapes();
  const list = rows(s);
  // The rows share the box's height (the page's, less the title and the timeline).
  const box = $("picture-box");
  const scrollbar = 16; // the time axis's own scroll bar, below the picture
  const room = box.clientHeight - AXIS - scrollbar - 4;
  const pitch = Math.max(PITCH.min, Math.min(PITCH.max, Math.floor(room / list.length)));
  const bar = Math.round(pitch * 0.62);
  const top = {};
  list.forEach((r, i) => { top[r.key] = i * pitch + Math.round((pitch - bar) / 2); });
  const height = list.length * pitch + AXIS;
  const width = Math.max(10, Math.ceil(s.now + 1)) * PX + 20;
  const labelWidth = Math.ceil(Math.max(...list.map((r) => textWidth(r.label)))) + 12;
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  labels.setAttribute("width", labelWidth);
  labels.setAttribute("height", height);
  svg.replaceChildren();
  labels.replaceChildren();
  const x = (t) => 6 + t * PX;
  const middle = (key) => top[key] + bar / 2 + 4; // a text's baseline, centred on the bar
  for (const r of list) labels.append(el("text", { x: 6, y: middle(r.key) }, r.label));
  for (let sec = 0; sec <= Math.ceil(s.now + 1); sec++) {
    svg.append(el("line", { class: "grid", x1: x(sec), x2: x(sec), y1: 0, y2: height - AXIS }));
    svg.append(el("text", { x: x(sec) + 2, y: height - 6 }, `${sec}s`));
  }
  for (const a of s.actions) {
    const w = Math.max(2, (a.to - a.from) * PX);
    const r = el("rect", { class: "action", x: x(a.from), y: top.action, width: w, height: bar });
    r.append(el("title", {}, `${a.text}${a.result ? " → " + a.result : ""}`));
    svg.append(r, el("text", { x: x(a.from) + 3, y: middle("action") }, fit(a.text, w - 6)));
  }
  for (const p of s.prompts) {
    const w = Math.max(2, (p.to - p.from) * PX);
    const r = el("rect", { class: "prompt", x: x(p.from), y: top.prompt, width: w, height: bar });
    r.append(el("title", {}, `${p.text}${p.stopped ? " (stopped: barge-in)" : ""}`));
    svg.append(r, el("text", { x: x(p.from) + 3, y: middle("prompt") }, fit(p.text, w - 6)));
  }
  for (const b of s.levels) {
    const db = -60 + "abcdefghijklmnopqrstu".indexOf(b.ch.toLowerCase()) * 3;
    const h = Math.max(1, (db + 60) / 60 * bar);
    const voice = b.ch !== b.ch.toLowerCase();
    svg.append(el("rect", { class: voice ? "level voice" : "level", x: x(b.t), y: top.level + bar - h, width: 0.1 * PX - 1, height: h }));
  }
  for (const v of s.voice) {
    svg.append(el("rect", { class: "voice", x: x(v.from), y: top.voice + bar / 4, width: Math.max(2, (v.to - v.from) * PX), height: bar / 2 }));
  }
  // Page requests sit above the actions they bring; digits (their key inside) and
  // speech (its words after it, as far as the next mark) on their own row.
  const radius = Math.min(7, Math.max(6, bar / 2 - 2)); // digits 0.25 s apart: apart
  const row = s.marks.filter((m) => m.cls !== "page");
  for (const m of s.marks) {
    const page = m.cls === "page";
    const cy = page ? top.action - 4 : top.marks + bar / 2;
    const r = el("circle", { class: m.cls, cx: x(m.t), cy, r: page ? 3 : radius });
    r.append(el("title", {}, `${m.cls} ${m.text} at ${m.t.toFixed(2)} s`));
    svg.append(r);
    if (m.cls === "digit") {
      svg.append(el("text", { class: "inside", x: x(m.t), y: cy + 4, "text-anchor": "middle" }, m.text));
    } else if (m.cls === "speech") {
      const next = row.find((o) => o.t > m.t);
      const room = (next ? x(next.t) - radius : width) - (x(m.t) + radius + 3) - 3;
      svg.append(el("text", { x: x(m.t) + radius + 3, y: cy + 4 }, fit(m.text, room)));
    }
  }
  for (const t of s.timers) {
    const y = top[`timer ${t.name}`];
    const cls = "timer" + (t.expired ? " expired" : t.running ? " running" : " stopped");
    if (t.running) {
      // Still running: where it will expire, faint.
      svg.append(el("rect", { class: cls, x: x(t.from), y, width: Math.max(2, (t.expires - t.from) * PX), height: bar, "fill-opacity": 0.35, "stroke-dasharray": "4 3" }));
    }
    const w = Math.max(2, (t.to - t.from) * PX);
    const ran = el("rect", { class: cls, x: x(t.from), y, width: w, height: bar });
    const state = t.expired ? "expired" : t.running ? "running" : "stopped";
    ran.append(el("title", {}, `${t.name}: ${t.from.toFixed(2)}–${t.expires.toFixed(2)} s (${state})`));
    svg.append(ran);
    // The row's label names the timer; a bar says only that it expired, when that fits whole.
    if (t.expired && textWidth("expired") <= w - 6) {
      svg.append(el("text", { x: x(t.from) + 3, y: y + bar / 2 + 4 }, "expired"));
    }
  }
  if (model.live) svg.append(el("line", { class: "now", x1: x(s.now), x2: x(s.now), y1: 0, y2: height - AXIS }));
}

// --- the timeline -------------------------------------------------------------------------------

const SHOWN = new Set(["call_start", "answered", "page_request", "page_response", "action_start", "action_end",
  "prompt_start", "prompt_end", "prompt_stop", "digit", "speech", "speech_detected", "speech_unrecognised",
  "speech_failed", "speech_unavailable", "recognition_start", "recognition_stop", "recording_start",
  "recording_stop", "error", "invalid_response", "caller_hung_up", "hang_up", "call_end", "timers", "voice",
  "list_end", "aborted", "bridge", "callee_call", "callee_answered", "callee_ended", "refer"]);

function addTimeline(l, app) {
  if (!SHOWN.has(l.kind)) return;
  const li = document.createElement("li");
  li.className = l.kind;
  li.innerHTML = `<span class="t"></span> <span class="k"></span> <span class="x"></span>`;
  li.querySelector(".t").textContent = `+${l.t.toFixed(3)}`;
  li.querySelector(".k").textContent = l.kind;
  li.querySelector(".x").textContent = l.text;
  if (l.kind === "recording_stop") {
    const button = document.createElement("button");
    button.textContent = "play";
    button.className = "play";
    button.onclick = () => playRecording(app, l.text.split(" ")[0], li);
    li.append(" ", button);
  }
  $("timeline").append(li);
  li.scrollIntoView({ block: "nearest" });
}

function addPage(p) {
  const li = document.createElement("li");
  li.className = "page";
  const d = document.createElement("details");
  const s = document.createElement("summary");
  const outcome = p.ok ? `${p.status || "answered"}` : `failed: ${p.error}`;
  s.textContent = `+${p.at.toFixed(3)} ${p.method} ${p.url} → ${outcome} in ${p.ms} ms`;
  if (!p.ok) s.className = "page-fail";
  const pretty = (text) => { try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; } };
  const req = document.createElement("pre");
  req.textContent = "request:\n" + pretty(p.request);
  const res = document.createElement("pre");
  res.textContent = "response:\n" + pretty(p.response);
  d.append(s, req, res);
  li.append(d);
  $("timeline").append(li);
}

async function playRecording(app, name, li) {
  const r = await api(`/phone/api/media/${encodeURIComponent(app)}/${name}`);
  if (!r.ok) { li.append(` (cannot play: ${r.status})`); return; }
  const audio = document.createElement("audio");
  audio.controls = true;
  audio.src = URL.createObjectURL(await r.blob());
  li.append(audio);
  audio.play().catch(() => {});
}

// --- the server ---------------------------------------------------------------------------------

function key() { return localStorage.getItem("callhook-key") || ""; }

function api(path) {
  const headers = key() ? { Authorization: `Bearer ${key()}` } : {};
  return fetch(path, { headers });
}

async function loadApps() {
  const r = await api("/phone/api/apps");
  if (r.status === 401) { $("login").hidden = false; setStatus("an API key is needed", "error"); return; }
  const body = await r.json();
  const select = $("app");
  select.replaceChildren(...body.apps.map((n) => new Option(n, n)));
  $("call").disabled = body.apps.length === 0;
  $("login").hidden = true;
  await loadCalls();
}

async function loadCalls() {
  const app = $("app").value;
  if (!app) return;
  const r = await api(`/phone/api/calls/${encodeURIComponent(app)}`);
  if (!r.ok) return;
  const list = $("calls");
  list.replaceChildren();
  for (const c of (await r.json()).calls) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.textContent = `${new Date(c.modified * 1000).toLocaleTimeString()} ${c.id.slice(0, 8)}`;
    a.onclick = () => showPast(app, c.id);
    li.append(a);
    list.append(li);
  }
}

async function showPast(app, id) {
  if (phone) return;
  const r = await api(`/phone/api/calls/${encodeURIComponent(app)}/${encodeURIComponent(id)}`);
  if (!r.ok) return;
  const model = new CallModel();
  $("timeline").replaceChildren();
  for (const line of (await r.text()).split("\n")) {
    const l = model.add(line);
    if (l) addTimeline(l, app);
  }
  $("view-title").textContent = `Call ${id} (from its call log)`;
  draw(model);
}

function setStatus(text, state) {
  $("status").textContent = text;
  $("status").dataset.state = state;
}

// The window's title ends with the call: whom it calls, that it is up, that it ended.
function setTitle(call) {
  document.title = call ? `callhook web phone — ${call}` : "callhook web phone";
}

// --- the microphone and the speaker ----------------------------------------------------------

// 20 ms frames from the microphone to `onFrame`, and RTP packets' audio to the speaker.
class AudioPath {
  async open(onFrame) {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: false, autoGainControl: false, channelCount: 1 },
    });
    this.ctx = new AudioContext({ sampleRate: 8000, latencyHint: "interactive" });
    await this.ctx.audioWorklet.addModule("/phone/assets/worklet.js");
    this.node = new AudioWorkletNode(this.ctx, "phone", { numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1] });
    this.ctx.createMediaStreamSource(this.stream).connect(this.node);
    this.node.connect(this.ctx.destination);
    this.node.port.onmessage = (e) => onFrame(e.data);
  }

  play(data) {
    const rtp = rtpPayload(data);
    if (!this.node || !rtp || rtp.pt !== PCMU) return false;
    const out = new Float32Array(rtp.payload.length);
    for (let i = 0; i < out.length; i++) out[i] = ULAW_DECODE[rtp.payload[i]];
    this.node.port.postMessage(out, [out.buffer]);
    return true;
  }

  close() {
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ctx) this.ctx.close();
    this.node = null;
  }
}

// --- a call ---------------------------------------------------------------------------------------

let phone = null;

class Phone {
  constructor(app) {
    this.app = app;
    this.model = new CallModel();
    this.model.live = true;
    this.sender = new RtpSender();
    this.audio = new AudioPath();
    this.frames = 0;
  }

  async start() {
    setStatus("starting the microphone", "ringing");
    await this.audio.open((samples) => this.captured(samples));
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.ws = new WebSocket(`${scheme}://${location.host}/phone/call`);
    this.ws.binaryType = "arraybuffer";
    this.ws.onopen = () => {
      this.ws.send(JSON.stringify({ type: "start", app: this.app, key: key() }));
      setStatus("calling", "ringing");
      setTitle(`calling ${this.app}`);
    };
    this.ws.onmessage = (e) => this.received(e.data);
    this.ws.onclose = () => this.stop();
    $("timeline").replaceChildren();
    $("view-title").textContent = `Call to ${this.app} (live)`;
    this.timer = setInterval(() => draw(this.model), 250);
  }

  captured(samples) {
    this.frames++;
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN || !this.started) return;
    for (const p of this.sender.frame(samples)) this.ws.send(p);
  }

  received(data) {
    if (typeof data !== "string") {
      this.audio.play(data);
      return;
    }
    const m = JSON.parse(data);
    if (m.type === "started") {
      this.started = true;
      this.callId = m.call_id;
      this.model.startedAt = performance.now();
      document.body.dataset.call = m.call_id;
    } else if (m.type === "answered") {
      setStatus("in call", "up");
      setTitle(`in call with ${this.app}`);
    } else if (m.type === "log") {
      const l = this.model.add(m.line);
      if (l) addTimeline(l, this.app);
    } else if (m.type === "page") {
      addPage(m);
    } else if (m.type === "ended") {
      setStatus(m.by === "callhook" ? "the application hung up" : "hung up", "idle");
    } else if (m.type === "error") {
      setStatus(m.message, "error");
    }
  }

  press(digit) {
    if (digit in EVENT_CODES) this.sender.digits.push(digit);
  }

  hangUp() {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "hangup" }));
    setTimeout(() => this.stop(), 1000); // the last log lines come first
  }

  stop() {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    this.model.live = false;
    draw(this.model);
    if (this.ws) this.ws.close();
    this.audio.close();
    document.body.dataset.ended = this.callId || "yes";
    setTitle(`call to ${this.app} ended`);
    if ($("status").dataset.state !== "error") setStatus("idle", "idle");
    phone = null;
    $("call").disabled = false;
    $("hangup").disabled = true;
    loadCalls();
  }
}

// --- receiving calls (connect to webrtc:ID) ------------------------------------------------------

// The ring: 440 + 480 Hz, 2 s on, 4 s off (the North American ring cadence), while it rings.
class Ringer {
  start() {
    try {
      this.ctx = new AudioContext();
      const gain = this.ctx.createGain();
      gain.gain.value = 0;
      gain.connect(this.ctx.destination);
      for (const hz of [440, 480]) {
        const o = this.ctx.createOscillator();
        o.frequency.value = hz;
        o.connect(gain);
        o.start();
      }
      const t = this.ctx.currentTime;
      for (let i = 0; i < 20; i++) {
        gain.gain.setValueAtTime(0.1, t + i * 6);
        gain.gain.setValueAtTime(0, t + i * 6 + 2);
      }
    } catch (e) {
      this.ctx = null; // no sound: the page still shows the call
    }
  }

  stop() {
    if (this.ctx) this.ctx.close();
    this.ctx = null;
  }
}

let receiver = null;

class Receiver {
  constructor(clientId, app) {
    this.clientId = clientId;
    this.app = app;
    this.call = null; // {id, from, answered}
    this.ringer = new Ringer();
    this.heard = 0;
  }

  signIn() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.ws = new WebSocket(`${scheme}://${location.host}/phone/client`);
    this.ws.binaryType = "arraybuffer";
    this.ws.onopen = () => this.ws.send(JSON.stringify({ type: "register", client_id: this.clientId, app: this.app, key: key() }));
    this.ws.onmessage = (e) => this.received(e.data);
    this.ws.onclose = () => this.closed();
    setStatus(`signing in as ${this.clientId}`, "ringing");
  }

  received(data) {
    if (typeof data !== "string") {
      if (this.call && this.call.answered && this.call.audio.play(data)) {
        this.heard++;
        document.body.dataset.heard = this.heard;
      }
      return;
    }
    const m = JSON.parse(data);
    if (m.type === "registered") {
      document.body.dataset.registered = m.client_id;
      setStatus(`signed in as ${m.client_id} (${m.app})`, "idle");
      $("sign-in").disabled = true;
      $("sign-out").disabled = false;
    } else if (m.type === "incoming") {
      this.call = { id: m.call_id, from: m.call_from, answered: false, audio: new AudioPath(), sender: new RtpSender() };
      $("incoming-text").textContent = `Incoming call from ${m.call_from}`;
      $("incoming").hidden = false;
      document.body.dataset.incoming = m.call_id;
      setStatus("ringing", "ringing");
      setTitle(`ringing: ${m.call_from}`);
      this.ringer.start();
    } else if (m.type === "ended") {
      if (this.call && this.call.id === m.call_id) this.endCall("the caller's side ended the call");
    } else if (m.type === "error") {
      setStatus(m.message, "error");
    }
  }

  async answer() {
    const call = this.call;
    if (!call || call.answered) return;
    this.ringer.stop();
    $("incoming").hidden = true;
    try {
      await call.audio.open((samples) => {
        if (this.call !== call || this.ws.readyState !== WebSocket.OPEN) return;
        for (const p of call.sender.frame(samples)) this.ws.send(p);
      });
    } catch (e) {
      setStatus(`cannot answer: ${e.message || e}`, "error");
      this.reject();
      return;
    }
    if (this.call !== call) {
      call.audio.close(); // the call ended while the microphone opened
      return;
    }
    call.answered = true;
    this.send({ type: "answer", call_id: call.id });
    document.body.dataset.answered = call.id;
    setStatus(`in call with ${call.from}`, "up");
    setTitle(`in call with ${call.from}`);
    $("hangup").disabled = false;
  }

  reject() {
    if (!this.call) return;
    this.send({ type: "reject", call_id: this.call.id });
    this.endCall("rejected");
  }

  hangUp() {
    if (!this.call) return;
    this.send({ type: "hangup", call_id: this.call.id });
    this.endCall("hung up");
  }

  press(digit) {
    if (this.call && this.call.answered && digit in EVENT_CODES) this.call.sender.digits.push(digit);
  }

  send(message) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(message));
  }

  endCall(why) {
    this.ringer.stop();
    if (this.call) {
      this.call.audio.close();
      document.body.dataset.callEnded = this.call.id;
      if (!phone) setTitle(`call from ${this.call.from} ended`);
    }
    this.call = null;
    $("incoming").hidden = true;
    if (!phone) $("hangup").disabled = true; // (a call placed from the page stays up)
    if ($("status").dataset.state !== "error") setStatus(`${why}; signed in as ${this.clientId}`, "idle");
  }

  signOut() {
    if (this.ws) this.ws.close();
  }

  closed() {
    if (this.call) this.endCall("signed out");
    delete document.body.dataset.registered;
    if ($("status").dataset.state !== "error") setStatus("idle", "idle");
    $("sign-in").disabled = false;
    $("sign-out").disabled = true;
    receiver = null;
  }
}

// The call the keypad and the hang-up button are for: the one placed, or the one answered.
function active() {
  if (phone) return phone;
  if (receiver && receiver.call && receiver.call.answered) return receiver;
  return null;
}

$("call").onclick = async () => {
  if (phone) return;
  phone = new Phone($("app").value);
  $("call").disabled = true;
  $("hangup").disabled = false;
  delete document.body.dataset.ended;
  try {
    await phone.start();
  } catch (e) {
    setStatus(`cannot call: ${e.message || e}`, "error");
    phone.stop();
  }
};
$("hangup").onclick = () => active() && active().hangUp();
for (const b of document.querySelectorAll("#keypad button")) b.onclick = () => active() && active().press(b.dataset.digit);
document.addEventListener("keydown", (e) => {
  if (active() && e.key in EVENT_CODES && e.target.tagName !== "INPUT") active().press(e.key);
});
$("receive").onsubmit = (e) => {
  e.preventDefault();
  const id = $("client-id").value.trim();
  if (receiver || !id || !$("app").value) return;
  receiver = new Receiver(id, $("app").value);
  receiver.signIn();
};
$("sign-out").onclick = () => receiver && receiver.signOut();
$("answer").onclick = () => receiver && receiver.answer();
$("reject").onclick = () => receiver && receiver.reject();
$("app").onchange = loadCalls;
$("login").onsubmit = (e) => {
  e.preventDefault();
  localStorage.setItem("callhook-key", $("key").value.trim());
  loadApps();
};
loadApps();
