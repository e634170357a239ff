// tts-gateway playground: plain ES module, no dependencies, no build step.
//
// Playback while streaming:
//   pcm, wav -> the response body is decoded as it arrives (s16le) and scheduled, chunk by chunk, on Web Audio;
//   mp3      -> the body is appended to a MediaSource SourceBuffer ("audio/mpeg") behind the <audio> element;
//   opus, aac, flac (no streaming decoder in browsers without a demuxer) -> the page plays a live pcm stream of
//               the same request, then fetches the chosen format for the download button.
// "Speak as I type" opens the realtime WebSocket (docs/realtime.md) instead: typed text is appended as it is typed,
// every finished sentence comes back as pcm deltas played on Web Audio, Speak flushes the rest, Stop barges in.
// The page exposes its state for tests and tooling on <html>: data-state (idle|loading|streaming|playing|done|
// error), data-playback (webaudio|mse), data-played (seconds of audio played to the speakers so far), and in the
// live mode data-live (connecting|open|closed) and data-live-segments (segments spoken).

const MAX_CHARS = 4096;
const PCM_RATE = 24000;
const KEY_STORAGE = "tts-gateway.playground.apiKey";
const MIME = { mp3: "audio/mpeg", opus: "audio/ogg", aac: "audio/aac", flac: "audio/flac", wav: "audio/wav", pcm: "audio/pcm" };

const $ = (id) => document.getElementById(id);
const ui = {
  form: $("speech-form"), key: $("api-key"), remember: $("remember-key"), model: $("model"), voice: $("voice"),
  text: $("text"), count: $("char-count"), format: $("format"), speed: $("speed"), speedValue: $("speed-value"),
  speak: $("speak"), stop: $("stop"), download: $("download"), error: $("error"), status: $("status"),
  ttfa: $("ttfa"), total: $("total"), audioInfo: $("audio-info"), engine: $("engine"), player: $("player"),
  live: $("live"),
};
const root = document.documentElement.dataset;

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// ---- API -------------------------------------------------------------------------------------------------------

function authHeaders() {
  const key = ui.key.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function apiError(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(response.status, message);
}

async function getJson(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

async function postSpeech(body, signal) {
  const response = await fetch("/v1/audio/speech", {
    method: "POST", signal, headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await apiError(response);
  return response;
}

// ---- Players ---------------------------------------------------------------------------------------------------

/** Schedules streamed signed 16-bit little-endian PCM on Web Audio, gaplessly, as it arrives. */
class PcmPlayer {
  constructor(context = null, rate = PCM_RATE, channels = 1) {
    this.context = context || new AudioContext();
    this.rate = rate; this.channels = channels;
    this.next = 0; this.started = 0; this.ended = 0; this.heard = 0; this.streamEnded = false;
    this.pending = new Uint8Array(0);
  }
  get mode() { return "webaudio"; }
  async start() { await this.context.resume(); }
  push(bytes) {
    const data = concat(this.pending, bytes);
    const frameBytes = 2 * this.channels;
    const frames = Math.floor(data.length / frameBytes);
    this.pending = data.slice(frames * frameBytes);
    if (frames === 0) return;
    const view = new DataView(data.buffer, data.byteOffset, frames * frameBytes);
    const buffer = this.context.createBuffer(this.channels, frames, this.rate);
    for (let c = 0; c < this.channels; c++) {
      const samples = new Float32Array(frames);
      for (let i = 0; i < frames; i++) samples[i] = view.getInt16((i * this.channels + c) * 2, true) / 32768;
      buffer.copyToChannel(samples, c);
    }
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    // Counted only once the audio thread has played the chunk to its end: what was really heard.
    source.onended = () => { this.ended += 1; this.heard += buffer.duration; };
    // Chunks follow each other sample-exactly; after an underrun (or at first) start a little ahead of now.
    this.next = Math.max(this.next, this.context.currentTime + 0.05);
    source.start(this.next);
    this.next += buffer.duration; this.started += 1;
  }
  end() { this.streamEnded = true; }
  played() { return this.heard; }
  finished() { return this.streamEnded && this.ended === this.started; }
  stop() { this.context.close().catch(() => {}); }
}

/** Parses a streamed WAV header (sizes may be 0xFFFFFFFF), then hands the samples to a PcmPlayer. */
class WavPlayer {
  constructor() { this.header = new Uint8Array(0); this.pcm = null; }
  get mode() { return "webaudio"; }
  async start() { this.context = new AudioContext(); await this.context.resume(); }
  push(bytes) {
    if (this.pcm) { this.pcm.push(bytes); return; }
    this.header = concat(this.header, bytes);
    const parsed = parseWavHeader(this.header);
    if (!parsed) return;
    this.pcm = new PcmPlayer(this.context, parsed.rate, parsed.channels);
    this.pcm.push(this.header.slice(parsed.dataOffset));
  }
  end() { if (this.pcm) this.pcm.end(); else this.streamEnded = true; }
  played() { return this.pcm ? this.pcm.played() : 0; }
  finished() { return this.pcm ? this.pcm.finished() : Boolean(this.streamEnded); }
  stop() { if (this.pcm) this.pcm.stop(); else this.context.close().catch(() => {}); }
}

function parseWavHeader(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
  if (bytes.length < 12) return null;
  if (tag(0) !== "RIFF" || tag(8) !== "WAVE") throw new Error("The response is not a WAV stream.");
  let offset = 12, rate = PCM_RATE, channels = 1;
  while (offset + 8 <= bytes.length) {
    const id = tag(offset), size = view.getUint32(offset + 4, true);
    if (id === "data") return { rate, channels, dataOffset: offset + 8 };
    if (offset + 8 + size > bytes.length) return null;
    if (id === "fmt ") { channels = view.getUint16(offset + 10, true); rate = view.getUint32(offset + 12, true); }
    offset += 8 + size + (size % 2);
  }
  return null;
}

/** Appends a streamed mp3 body to a MediaSource behind the page's <audio> element. */
class MediaSourcePlayer {
  constructor(audio, mime) { this.audio = audio; this.mime = mime; this.queue = []; this.ended = false; this.done = false; }
  get mode() { return "mse"; }
  async start() {
    this.source = new MediaSource();
    this.url = URL.createObjectURL(this.source);
    this.audio.src = this.url;
    await new Promise((resolve) => this.source.addEventListener("sourceopen", resolve, { once: true }));
    this.buffer = this.source.addSourceBuffer(this.mime);
    this.buffer.addEventListener("updateend", () => this.flush());
    this.audio.addEventListener("ended", () => { this.done = true; }, { once: true });
  }
  push(bytes) { this.queue.push(bytes); this.flush(); }
  end() { this.ended = true; this.flush(); }
  flush() {
    if (!this.buffer || this.buffer.updating || this.source.readyState !== "open") return;
    if (this.queue.length) {
      this.buffer.appendBuffer(concat(...this.queue.splice(0)));
      if (this.audio.paused && !this.playRequested) {
        this.playRequested = true;
        this.audio.play().catch((error) => showError(`Playback was refused: ${error.message}`));
      }
    } else if (this.ended) {
      this.source.endOfStream();
    }
  }
  played() { return this.audio.currentTime; }
  finished() { return this.done || (this.ended && this.source.readyState === "ended" && this.audio.ended); }
  stop() { this.audio.pause(); if (this.url) URL.revokeObjectURL(this.url); }
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) { out.set(part, at); at += part.length; }
  return out;
}

// ---- Speaking --------------------------------------------------------------------------------------------------

let current = null; // { abort: AbortController, player, timer }

function requestBody(format) {
  const option = ui.voice.selectedOptions[0];
  const voice = option && option.dataset.custom === "true" ? { id: option.value } : ui.voice.value;
  return { model: ui.model.value, input: ui.text.value, voice, response_format: format, speed: Number(ui.speed.value) };
}

function choosePlayer(format) {
  if (format === "pcm") return { player: new PcmPlayer(), streamFormat: "pcm" };
  if (format === "wav") return { player: new WavPlayer(), streamFormat: "wav" };
  if (format === "mp3" && window.MediaSource && MediaSource.isTypeSupported(MIME.mp3)) {
    return { player: new MediaSourcePlayer(ui.player, MIME.mp3), streamFormat: "mp3" };
  }
  return { player: new PcmPlayer(), streamFormat: "pcm" }; // live pcm; the chosen format is fetched for download
}

async function speak() {
  stop();
  clearError(); resetMetrics();
  const format = ui.format.value;
  const { player, streamFormat } = choosePlayer(format);
  const abort = new AbortController();
  const session = { abort, player, timer: null };
  current = session;
  setState("loading"); root.playback = player.mode; ui.stop.disabled = false;
  const started = performance.now();
  try {
    await player.start();
    const response = await postSpeech(requestBody(streamFormat), abort.signal);
    ui.engine.textContent = response.headers.get("x-engine") || "–";
    setState("streaming");
    session.timer = setInterval(() => tick(session), 100);
    const chunks = await stream(response, player, started);
    player.end();
    ui.total.textContent = seconds(performance.now() - started);
    const bytes = chunks.reduce((n, c) => n + c.length, 0);
    ui.audioInfo.textContent = `${(bytes / 1024).toFixed(1)} KiB ${streamFormat}`;
    setState("playing");
    if (streamFormat === format) offerDownload(new Blob(chunks, { type: MIME[format] }), format, player.mode !== "mse");
    else await fetchDownload(format, abort.signal);
  } catch (error) {
    if (error.name === "AbortError") return;
    player.stop(); clearInterval(session.timer);
    showError(error.message, error.status);
    setState("error"); ui.stop.disabled = true;
  }
}

async function stream(response, player, started) {
  const reader = response.body.getReader();
  const chunks = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return chunks;
    if (!value.length) continue;
    if (!chunks.length) ui.ttfa.textContent = seconds(performance.now() - started);
    chunks.push(value);
    player.push(value);
  }
}

async function fetchDownload(format, signal) {
  status(`Fetching the ${format} file for download…`);
  const response = await postSpeech(requestBody(format), signal);
  offerDownload(await response.blob(), format, false);
}

function offerDownload(blob, format, replayable) {
  if (ui.download.href) URL.revokeObjectURL(ui.download.href);
  const url = URL.createObjectURL(blob);
  ui.download.href = url;
  ui.download.download = `speech.${format}`;
  ui.download.textContent = `Download ${format} (${(blob.size / 1024).toFixed(1)} KiB)`;
  ui.download.hidden = false;
  if (replayable && format !== "pcm") ui.player.src = url; // replay after the live playback
}

function tick(session) {
  const played = session.player.played();
  root.played = played.toFixed(3);
  if (root.state === "streaming" || root.state === "playing") status(`Played ${played.toFixed(1)} s`);
  if (root.state === "playing" && session.player.finished()) {
    clearInterval(session.timer);
    setState("done"); ui.stop.disabled = true;
    status(`Done: played ${played.toFixed(1)} s.`);
  }
}

function stop() {
  if (!current) return;
  current.abort.abort();
  current.player.stop();
  clearInterval(current.timer);
  current = null;
  ui.stop.disabled = true;
  if (root.state !== "done" && root.state !== "error") setState("idle");
}

// ---- Speak as I type: the realtime WebSocket ------------------------------------------------------------------

let live = null;

function startLive() {
  stop(); stopLive(); clearError(); resetMetrics();
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/v1/audio/speech/stream`);
  // What is in the box already is not spoken: only what is typed from now on.
  const session = { socket, player: new PcmPlayer(), sent: ui.text.value, segments: 0, started: 0, timer: null };
  live = session;
  root.live = "connecting"; root.liveSegments = "0"; root.playback = session.player.mode;
  socket.onopen = async () => {
    await session.player.start();
    const key = ui.key.value.trim();  // in the first message: a browser cannot set headers on a WebSocket
    socket.send(JSON.stringify({ type: "session.update", ...(key ? { token: key } : {}), session: liveSettings() }));
    root.live = "open"; ui.stop.disabled = false;
    session.timer = setInterval(() => { root.played = session.player.played().toFixed(3); }, 100);
    status("Live: type; each sentence is spoken when it ends.");
  };
  socket.onmessage = (message) => onLiveEvent(session, JSON.parse(message.data));
  socket.onclose = (event) => {
    if (live !== session) return;
    root.live = "closed"; clearInterval(session.timer);
    if (event.code !== 1000) status(`Live session closed (${event.code}${event.reason ? `: ${event.reason}` : ""}).`);
  };
}

function liveSettings() {
  const { voice, model, speed } = requestBody("pcm");
  return { model, voice, speed, response_format: "pcm" };
}

function sendTyped() {
  if (!live || root.live !== "open") return;
  const text = ui.text.value;
  // Text typed at the end is sent; edits earlier in the box are not taken back (the session only appends).
  if (text.startsWith(live.sent) && text.length > live.sent.length) {
    if (!live.started) live.started = performance.now();
    live.socket.send(JSON.stringify({ type: "input.append", text: text.slice(live.sent.length) }));
  }
  live.sent = text;
}

function onLiveEvent(session, event) {
  if (event.type === "audio.delta") {
    if (session.started && ui.ttfa.textContent === "–") ui.ttfa.textContent = seconds(performance.now() - session.started);
    session.player.push(Uint8Array.from(atob(event.audio), (c) => c.charCodeAt(0)));
  } else if (event.type === "audio.done") {
    session.segments += 1; root.liveSegments = String(session.segments);
    status(`Spoke: “${event.text}” (${event.status})`);
  } else if (event.type === "session.updated") {
    ui.engine.textContent = event.session.model;
  } else if (event.type === "error") {
    showError(event.error.message, event.error.code);
  }
}

function flushLive() {
  sendTyped();
  live.socket.send(JSON.stringify({ type: "input.flush" }));
}

function cancelLive() {
  live.socket.send(JSON.stringify({ type: "response.cancel" }));
  live.player.stop();  // what is already scheduled on the speakers stops too
  live.player = new PcmPlayer();
  live.player.start();
  status("Interrupted.");
}

function stopLive() {
  if (!live) return;
  clearInterval(live.timer);
  live.socket.close(1000);
  live.player.stop();
  live = null;
  delete root.live;
  ui.stop.disabled = true;
}

// ---- UI helpers ------------------------------------------------------------------------------------------------

const seconds = (ms) => `${(ms / 1000).toFixed(2)} s`;
function setState(state) { root.state = state; ui.speak.setAttribute("aria-busy", String(state === "streaming")); }
function status(text) { ui.status.textContent = text; }
function showError(message, code) { ui.error.textContent = code ? `Error ${code}: ${message}` : message; ui.error.hidden = false; }
function clearError() { ui.error.hidden = true; ui.error.textContent = ""; }
function resetMetrics() {
  for (const el of [ui.ttfa, ui.total, ui.audioInfo, ui.engine]) el.textContent = "–";
  root.played = "0";
  ui.download.hidden = true;
}

function updateCount() {
  const n = [...ui.text.value].length;
  ui.count.textContent = `${n} / ${MAX_CHARS} characters`;
  const over = n > MAX_CHARS;
  ui.count.classList.toggle("over", over);
  ui.speak.disabled = over || !ui.text.value.trim() || !ui.model.value || !ui.voice.value;
}

function fillSelect(select, items, preferred) {
  const previous = select.value;
  select.replaceChildren(...items.map(({ value, label, custom }) => {
    const option = new Option(label, value);
    option.dataset.custom = String(Boolean(custom));
    return option;
  }));
  const values = items.map((i) => i.value);
  select.value = [previous, ...preferred].find((v) => values.includes(v)) || values[0] || "";
}

async function loadModels() {
  try {
    const models = await getJson("/v1/models");
    fillSelect(ui.model, models.data.map((m) => ({ value: m.id, label: m.id })), ["tts-1"]);
    clearError();
    await loadVoices();
  } catch (error) {
    if (error.status === 401 && !ui.key.value.trim()) status("Paste an API key to load the models.");
    else showError(error.message, error.status);
  }
  updateCount();
}

async function loadVoices() {
  if (!ui.model.value) return;
  try {
    const voices = await getJson(`/v1/audio/voices?model=${encodeURIComponent(ui.model.value)}`);
    fillSelect(ui.voice, voices.data.map((v) => ({
      value: v.id, label: v.custom ? `${v.name} (custom)` : v.name, custom: v.custom,
    })), ["alloy"]);
  } catch (error) {
    showError(error.message, error.status);
  }
  updateCount();
}

function rememberKey() {
  if (ui.remember.checked) localStorage.setItem(KEY_STORAGE, ui.key.value.trim());
  else localStorage.removeItem(KEY_STORAGE);
}

function init() {
  const saved = localStorage.getItem(KEY_STORAGE);
  if (saved) { ui.key.value = saved; ui.remember.checked = true; }
  ui.key.addEventListener("change", () => { rememberKey(); loadModels(); });
  ui.remember.addEventListener("change", rememberKey);
  ui.model.addEventListener("change", loadVoices);
  ui.voice.addEventListener("change", updateCount);
  ui.text.addEventListener("input", updateCount);
  ui.speed.addEventListener("input", () => { ui.speedValue.textContent = `${Number(ui.speed.value).toFixed(2)}×`; });
  ui.text.addEventListener("input", sendTyped);
  ui.live.addEventListener("change", () => { if (ui.live.checked) startLive(); else stopLive(); });
  ui.form.addEventListener("submit", (event) => { event.preventDefault(); if (live) flushLive(); else speak(); });
  ui.stop.addEventListener("click", () => {
    if (live) { cancelLive(); return; }
    stop(); status("Stopped.");
  });
  setState("idle");
  updateCount();
  loadModels();
}

init();
