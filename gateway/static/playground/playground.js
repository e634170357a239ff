// chattts-gateway playground: plain ES module, no dependencies, no build step.
//
// Playback while streaming:
//   pcm, wav -> the response body is decoded as it arrives (s16le) and scheduled, chunk by chunk, on Web Audio;
//   mp3      -> the body is appended to a MediaSource SourceBuffer ("audio/mpeg") behind the <audio> element;
//   opus, aac, flac (no streaming decoder in browsers without a demuxer) -> the page plays a live pcm stream of
//               the same request, then fetches the chosen format for the download button.
// The transport "Realtime (OpenAI)" speaks through OpenAI's Realtime API on /v1/realtime (docs/realtime.md) instead:
// one socket per Speak, the key offered as the subprotocol openai-insecure-api-key.<key>, a session.update and an
// out-of-band response.create; the base64 pcm deltas play on Web Audio, response.done gives the transcript and the
// usage, and Stop sends response.cancel.
// "Speak as I type" opens the text stream WebSocket (/v1/audio/speech/stream): typed text is appended as it is typed,
// every finished sentence comes back as pcm deltas played on Web Audio, Speak flushes the rest, Stop barges in.
// The page exposes its state for tests and tooling on <html>: data-state (idle|loading|streaming|playing|done|
// error), data-playback (webaudio|mse), data-played (seconds of audio played to the speakers so far), data-transport
// (http|openai-realtime) and, over the Realtime API, data-response (the status of the last response.done:
// completed|cancelled|failed); in the live mode data-live (connecting|open|closed) and data-live-segments (segments
// spoken).
// "New voice" records the consent phrase and a voice sample with MediaRecorder (or takes files), then creates the
// consent (POST /v1/audio/voice_consents) and the voice (POST /v1/audio/voices, multipart) and chooses it in the
// picker; it exposes data-consent-take and data-sample-take (recording|ready) and data-new-voice (creating|created|
// error).

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
  live: $("live"), transport: $("transport"), transportHint: $("transport-hint"), usage: $("usage"),
  usageRow: $("usage-row"), spoken: $("spoken"), spokenRow: $("spoken-row"),
};
const voiceUi = {
  form: $("voice-form"), name: $("voice-name"), language: $("consent-language"), phrase: $("consent-phrase"),
  model: $("voice-model"), transcript: $("transcript"), create: $("create-voice"), error: $("voice-error"),
  status: $("voice-status"),
  takes: {
    consent: {
      label: "consent", record: $("record-consent"), file: $("consent-file"), info: $("consent-take"),
      preview: $("consent-preview"),
    },
    sample: {
      label: "sample", record: $("record-sample"), file: $("sample-file"), info: $("sample-take"),
      preview: $("sample-preview"),
    },
  },
};
const root = document.documentElement.dataset;

class ApiError extends Error {
  constructor(status, message, param = null) { super(message); this.status = status; this.param = param; }
}

// ---- API -------------------------------------------------------------------------------------------------------

function authHeaders() {
  const key = ui.key.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function apiError(response) {
  let message = `${response.status} ${response.statusText}`.trim(), param = null;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) ({ message, param = null } = body.error);
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(response.status, message, param);
}

async function getJson(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

async function postForm(path, fields) {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) {
    if (value instanceof Blob) form.append(name, value, value.name || name);
    else if (value !== undefined && value !== "") form.append(name, value);
  }
  const response = await fetch(path, { method: "POST", headers: authHeaders(), body: form });
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

function fromBase64(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
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
  stop(); stopRealtime();
  clearError(); resetMetrics();
  root.transport = "http";
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
  stop(); stopRealtime(); stopLive(); clearError(); resetMetrics();
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
    session.player.push(fromBase64(event.audio));
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

// ---- Realtime (OpenAI): one out-of-band response over /v1/realtime --------------------------------------------

let realtime = null; // { socket, model, player, timer, started, chunks, opened, responding, ended }

function speakRealtime() {
  stop(); stopRealtime(); clearError(); resetMetrics();
  const { model, voice, speed } = requestBody("pcm");
  const key = ui.key.value.trim();
  // A browser cannot set headers on a WebSocket: the key travels as a subprotocol, as OpenAI's browser clients do.
  const protocols = key ? ["realtime", `openai-insecure-api-key.${key}`] : ["realtime"];
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}/v1/realtime?model=${encodeURIComponent(model)}`;
  const session = {
    socket: new WebSocket(url, protocols), model, player: new PcmPlayer(), timer: null, started: performance.now(),
    chunks: [], opened: false, responding: false, ended: false,
  };
  realtime = session;
  root.transport = "openai-realtime"; root.playback = session.player.mode; delete root.response;
  setState("loading"); ui.stop.disabled = false;
  session.socket.onopen = async () => {
    session.opened = true;
    await session.player.start();
    const output = { format: { type: "audio/pcm", rate: PCM_RATE }, voice, speed };
    const settings = { type: "realtime", output_modalities: ["audio"], audio: { output } };
    sendEvent(session, { type: "session.update", session: settings });
    const message = { type: "message", role: "user", content: [{ type: "input_text", text: ui.text.value }] };
    sendEvent(session, { type: "response.create", response: { conversation: "none", input: [message] } });
    session.responding = true;
    session.timer = setInterval(() => tick(session), 100);
  };
  session.socket.onmessage = (message) => onRealtimeEvent(session, JSON.parse(message.data));
  session.socket.onclose = (event) => onRealtimeClose(session, event);
}

function sendEvent(session, event) { session.socket.send(JSON.stringify(event)); }

function onRealtimeEvent(session, event) {
  if (realtime !== session) return;
  if (event.type === "response.output_audio.delta") {
    const bytes = fromBase64(event.delta);
    if (!session.chunks.length) ui.ttfa.textContent = seconds(performance.now() - session.started);
    session.chunks.push(bytes);
    session.player.push(bytes);
  } else if (event.type === "response.created") {
    if (root.state === "loading") setState("streaming");
  } else if (event.type === "session.updated") {
    ui.engine.textContent = event.session.model;
  } else if (event.type === "response.done") {
    finishRealtime(session, event.response);
  } else if (event.type === "error") {
    showError(event.error.message, event.error.code);
  }
}

function finishRealtime(session, response) {
  session.responding = false; session.ended = true;
  session.socket.close(1000);
  session.player.end();
  root.response = response.status;
  const [item] = response.output;
  showRealtimeResult(item ? item.content[0].transcript : "", response.usage);
  ui.total.textContent = seconds(performance.now() - session.started);
  const bytes = session.chunks.reduce((n, c) => n + c.length, 0);
  ui.audioInfo.textContent = `${(bytes / 1024).toFixed(1)} KiB pcm`;
  if (response.status === "completed") {
    setState("playing");
    offerDownload(new Blob(session.chunks, { type: MIME.pcm }), "pcm", false);
  } else if (response.status === "failed") {
    const error = response.status_details && response.status_details.error;
    if (ui.error.hidden && error) showError(error.message, error.code);
    session.player.stop(); clearInterval(session.timer);
    setState("error"); ui.stop.disabled = true;
  }  // cancelled: Stop has already stopped the playback
}

function showRealtimeResult(transcript, usage) {
  ui.spoken.textContent = transcript || "–";
  const audio = usage ? `${usage.output_tokens} audio tokens (${(usage.output_tokens / 50).toFixed(2)} s)` : "";
  ui.usage.textContent = usage ? `${usage.input_tokens} characters, ${audio}` : "–";
  ui.spokenRow.hidden = false; ui.usageRow.hidden = false;
}

async function onRealtimeClose(session, event) {
  if (realtime !== session || session.ended) return;
  session.ended = true; session.responding = false;
  session.player.stop(); clearInterval(session.timer); ui.stop.disabled = true;
  if (!session.opened) await explainRefusal(session.model);
  else showError(`The realtime session closed (${event.code}${event.reason ? `: ${event.reason}` : ""}).`);
  setState("error");
}

/** Browsers hide why a WebSocket handshake was refused; the same key and model over HTTP say it in OpenAI's words. */
async function explainRefusal(model) {
  try {
    await getJson(`/v1/models/${encodeURIComponent(model)}`);
    showError("The gateway refused the realtime session (over the tenant's limits?); try again soon.");
  } catch (error) {
    showError(error.message, error.status);
  }
}

function cancelRealtime() {
  const session = realtime;
  if (session.responding) sendEvent(session, { type: "response.cancel" }); // its response.done reports what was sent
  else stopRealtime();
  session.player.stop(); // what is already scheduled on the speakers stops too
  clearInterval(session.timer);
  ui.stop.disabled = true;
  setState("idle"); status("Stopped.");
}

function stopRealtime() {
  if (!realtime) return;
  realtime.ended = true;
  clearInterval(realtime.timer);
  if (realtime.socket.readyState <= WebSocket.OPEN) realtime.socket.close(1000);
  realtime.player.stop();
  realtime = null;
}

function updateTransport() {
  const overRealtime = ui.transport.value === "openai-realtime";
  ui.format.disabled = overRealtime; // the Realtime transport plays pcm
  ui.transportHint.hidden = !overRealtime;
  ui.live.disabled = overRealtime; // "Speak as I type" is the text stream's
  ui.transport.disabled = ui.live.checked;
}

// ---- New voice: a consent recording and a sample, from the microphone or from files ---------------------------

// What the speaker reads. The gateway keeps the recording for audit and does not check the words (the page says so).
const CONSENT_PHRASES = {
  "en-US": "I am the owner of this voice. I agree that the operator of this speech gateway may make a synthetic " +
    "voice from my recordings and use it to speak text.",
  "zh-CN": "我是这个声音的主人。我同意这个语音网关的运营者用我的录音制作合成声音，并用它朗读文字。",
};
const MAX_TAKE_S = 25; // the gateway takes 1 to 30 s
const EXTENSIONS = { mpeg: "mp3", "x-wav": "wav", wave: "wav", "x-m4a": "m4a" };

const takes = { consent: null, sample: null }; // each a File (recorded or chosen) once there is one
let recording = null; // { kind, recorder, stream, started, timer, limit }
let consentMade = null; // { id, file, language }: reused while its recording stays, when the voice step failed

function showConsentPhrase() {
  voiceUi.phrase.textContent = CONSENT_PHRASES[voiceUi.language.value];
  voiceUi.phrase.lang = voiceUi.language.value;
}

function showVoiceModel() { voiceUi.model.textContent = ui.model.value || "–"; }

function setTakeState(kind, value) {
  const key = `${kind}Take`;
  if (value) root[key] = value; else delete root[key];
}

function setTake(kind, file, description) {
  const take = voiceUi.takes[kind];
  takes[kind] = file;
  if (take.preview.src) URL.revokeObjectURL(take.preview.src);
  take.preview.removeAttribute("src");
  take.preview.hidden = !file;
  if (file) take.preview.src = URL.createObjectURL(file);
  take.info.textContent = file ? `${description} (${(file.size / 1024).toFixed(1)} KiB). Play it back below.` :
    "Nothing recorded yet.";
  setTakeState(kind, file ? "ready" : null);
}

function extension(type) {
  const subtype = (type.split(";")[0].split("/")[1] || "webm").trim();
  return EXTENSIONS[subtype] || subtype;
}

async function toggleRecording(kind) {
  if (recording) { recording.recorder.stop(); return; }
  clearVoiceError();
  if (!navigator.mediaDevices || !window.MediaRecorder) {
    voiceError("Recording needs a microphone and a secure page (https or localhost): choose a file instead.");
    return;
  }
  const button = voiceUi.takes[kind].record;
  let stream;
  button.disabled = true; // until the browser has answered: one click, one recording
  try {
    // The sample should sound like the person, not like the browser's voice-call processing.
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
  } catch (error) {
    voiceError(`The microphone is not available (${error.message || error.name}): choose a file instead.`);
    return;
  } finally {
    button.disabled = false;
  }
  startRecorder(kind, stream);
}

function startRecorder(kind, stream) {
  const take = voiceUi.takes[kind];
  const recorder = new MediaRecorder(stream);
  const chunks = [];
  const session = { kind, recorder, stream, started: performance.now() };
  recording = session;
  recorder.ondataavailable = (event) => { if (event.data.size) chunks.push(event.data); };
  recorder.onstop = () => {
    for (const track of stream.getTracks()) track.stop();
    clearInterval(session.timer); clearTimeout(session.limit);
    recording = null; setRecordingControls(null);
    const took = (performance.now() - session.started) / 1000;
    const type = recorder.mimeType || (chunks[0] && chunks[0].type) || "audio/webm";
    take.file.value = "";
    setTake(kind, new File(chunks, `${kind}.${extension(type)}`, { type }), `Recorded ${took.toFixed(1)} s`);
    voiceStatus(`The ${take.label} is recorded: ${took.toFixed(1)} s.`);
    take.record.focus();
  };
  recorder.start(250);
  setTakeState(kind, "recording"); setRecordingControls(kind);
  session.limit = setTimeout(() => recorder.stop(), MAX_TAKE_S * 1000);
  session.timer = setInterval(() => {
    take.info.textContent = `Recording… ${((performance.now() - session.started) / 1000).toFixed(1)} s`;
  }, 200);
  voiceStatus(`Recording the ${take.label}. Press Stop recording when done (it stops by itself after ` +
    `${MAX_TAKE_S} s).`);
}

/** While one take records, the other controls wait; the recording one's button becomes its Stop button. */
function setRecordingControls(kind) {
  for (const [name, take] of Object.entries(voiceUi.takes)) {
    const active = name === kind;
    take.record.textContent = active ? "Stop recording" : `Record ${take.label}`;
    take.record.classList.toggle("recording", active);
    take.record.disabled = Boolean(kind) && !active;
    take.file.disabled = Boolean(kind);
  }
  voiceUi.create.disabled = Boolean(kind);
}

function chooseFile(kind) {
  const file = voiceUi.takes[kind].file.files[0] || null;
  setTake(kind, file, file ? `File ${file.name}` : "");
  if (file) voiceStatus(`The ${voiceUi.takes[kind].label} is ${file.name}.`);
}

// ---- New voice: creating the consent, then the voice ----------------------------------------------------------

function missingInput() {
  if (!voiceUi.name.value.trim()) return { message: "Give the voice a name.", focus: voiceUi.name };
  const { consent, sample } = voiceUi.takes;
  if (!takes.consent) return { message: "Record the consent phrase or choose its file.", focus: consent.record };
  if (!takes.sample) return { message: "Record a voice sample or choose its file.", focus: sample.record };
  if (!ui.model.value) return { message: "Choose a model above (paste an API key first if needed).", focus: ui.model };
  return null;
}

async function ensureConsent(name, language) {
  const made = consentMade;
  if (made && made.file === takes.consent && made.language === language) return made.id;
  voiceStatus("Saving the consent recording…");
  const consent = await postForm("/v1/audio/voice_consents", { name, language, recording: takes.consent });
  consentMade = { id: consent.id, file: takes.consent, language };
  return consent.id;
}

async function createVoice() {
  clearVoiceError();
  const missing = missingInput();
  if (missing) { voiceError(missing.message); missing.focus.focus(); return; }
  const name = voiceUi.name.value.trim(), language = voiceUi.language.value;
  root.newVoice = "creating"; voiceUi.create.disabled = true; voiceUi.create.setAttribute("aria-busy", "true");
  let step = "The consent was not saved.";
  try {
    const consent = await ensureConsent(name, language);
    step = "The voice was not created.";
    voiceStatus("Making the voice from the sample…");
    const voice = await postForm("/v1/audio/voices", {
      name, audio_sample: takes.sample, consent, transcript: voiceUi.transcript.value.trim(), model: ui.model.value,
    });
    await addToPicker(voice);
    resetNewVoice();
    root.newVoice = "created";
    voiceStatus(`The voice “${voice.name}” (${voice.id}) is ready and chosen in the Voice picker.`);
  } catch (error) {
    root.newVoice = "error";
    if (error.param === "consent") consentMade = null; // gone meanwhile (deleted): the next try saves it again
    voiceError(`${step} ${error.status ? `Error ${error.status}: ` : ""}${error.message}`, error.param);
  } finally {
    voiceUi.create.disabled = false; voiceUi.create.removeAttribute("aria-busy");
  }
}

async function addToPicker(voice) {
  await loadVoices();
  if (![...ui.voice.options].some((option) => option.value === voice.id)) {
    const option = new Option(`${voice.name} (custom)`, voice.id);
    option.dataset.custom = "true";
    ui.voice.add(option);
  }
  ui.voice.value = voice.id;
  updateCount();
}

function resetNewVoice() {
  consentMade = null;
  voiceUi.name.value = ""; voiceUi.transcript.value = "";
  for (const [kind, take] of Object.entries(voiceUi.takes)) { take.file.value = ""; setTake(kind, null, ""); }
}

/** The field an API error names (its `param`), to move the focus to. */
function fieldFor(param) {
  const fields = {
    name: voiceUi.name, language: voiceUi.language, transcript: voiceUi.transcript, model: ui.model,
    recording: voiceUi.takes.consent.record, consent: voiceUi.takes.consent.record,
    audio_sample: voiceUi.takes.sample.record,
  };
  return fields[param] || null;
}

function voiceError(message, param = null) {
  voiceUi.error.textContent = message; voiceUi.error.hidden = false;
  voiceStatus("");
  (fieldFor(param) || voiceUi.error).focus();
}
function clearVoiceError() { voiceUi.error.hidden = true; voiceUi.error.textContent = ""; }
function voiceStatus(text) { voiceUi.status.textContent = text; }

function initNewVoice() {
  showConsentPhrase();
  voiceUi.language.addEventListener("change", showConsentPhrase);
  for (const [kind, take] of Object.entries(voiceUi.takes)) {
    take.record.addEventListener("click", () => toggleRecording(kind));
    take.file.addEventListener("change", () => chooseFile(kind));
  }
  voiceUi.form.addEventListener("submit", (event) => { event.preventDefault(); createVoice(); });
}

// ---- UI helpers ------------------------------------------------------------------------------------------------

const seconds = (ms) => `${(ms / 1000).toFixed(2)} s`;
function setState(state) { root.state = state; ui.speak.setAttribute("aria-busy", String(state === "streaming")); }
function status(text) { ui.status.textContent = text; }
function showError(message, code) { ui.error.textContent = code ? `Error ${code}: ${message}` : message; ui.error.hidden = false; }
function clearError() { ui.error.hidden = true; ui.error.textContent = ""; }
function resetMetrics() {
  for (const el of [ui.ttfa, ui.total, ui.audioInfo, ui.engine, ui.usage, ui.spoken]) el.textContent = "–";
  ui.usageRow.hidden = true; ui.spokenRow.hidden = true;
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
    showVoiceModel();
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
    fillSelect(ui.voice, voices.data.map((v) => {
      const custom = Boolean(v.custom) || v.id.startsWith("voice_");
      return { value: v.id, label: custom ? `${v.name} (custom)` : v.name, custom };
    }), ["alloy"]);
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
  ui.model.addEventListener("change", () => { loadVoices(); showVoiceModel(); });
  ui.voice.addEventListener("change", updateCount);
  ui.text.addEventListener("input", updateCount);
  ui.speed.addEventListener("input", () => { ui.speedValue.textContent = `${Number(ui.speed.value).toFixed(2)}×`; });
  ui.text.addEventListener("input", sendTyped);
  ui.live.addEventListener("change", () => {
    if (ui.live.checked) startLive(); else stopLive();
    updateTransport();
  });
  ui.transport.addEventListener("change", updateTransport);
  ui.form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (live) flushLive();
    else if (ui.transport.value === "openai-realtime") speakRealtime();
    else speak();
  });
  ui.stop.addEventListener("click", () => {
    if (live) { cancelLive(); return; }
    if (realtime) { cancelRealtime(); return; }
    stop(); status("Stopped.");
  });
  updateTransport();
  setState("idle");
  updateCount();
  loadModels();
  initNewVoice();
}

init();
