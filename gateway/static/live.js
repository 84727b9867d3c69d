// Live page: microphone or a file -> 16 kHz s16le frames -> /v1/realtime -> live text.
// Browsers cannot set Authorization on a WebSocket, so the key travels as the subprotocol
// "a5s.key.<key>" beside "a5s.v1" (docs/playground.md).
"use strict";

(() => {
  const { $, key, setStatus, setupKeyForm } = a5s;
  const RATE = 16000, FRAME = 320;            // 20 ms frames of 16-bit mono: 640 bytes
  let ws = null, stopAudio = null, finalText = "";

  function toInt16(floats) {
    const out = new Int16Array(floats.length);
    for (let i = 0; i < floats.length; i++) {
      const s = Math.max(-1, Math.min(1, floats[i]));
      out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
    }
    return out;
  }

  // Collects samples and sends whole 20 ms frames.
  function framer() {
    let pending = new Int16Array(0);
    return {
      push(samples) {
        const joined = new Int16Array(pending.length + samples.length);
        joined.set(pending); joined.set(samples, pending.length);
        let at = 0;
        for (; at + FRAME <= joined.length; at += FRAME) send(joined.slice(at, at + FRAME).buffer);
        pending = joined.slice(at);
      },
      flush() { if (pending.length) send(pending.buffer); pending = new Int16Array(0); },
    };
  }

  function send(buffer) { if (ws && ws.readyState === WebSocket.OPEN) ws.send(buffer); }

  function finish() {
    if (stopAudio) { stopAudio(); stopAudio = null; }
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "finish" }));
    $("stop").disabled = true;
  }

  async function micSource(frames) {
    const media = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 } });
    const ctx = new AudioContext({ sampleRate: RATE });  // the browser resamples the mic
    const input = ctx.createMediaStreamSource(media);
    let node;
    if (ctx.audioWorklet) {
      await ctx.audioWorklet.addModule("/playground/static/pcm-worklet.js");
      node = new AudioWorkletNode(ctx, "pcm-tap");
      node.port.onmessage = (e) => frames.push(toInt16(e.data));
    } else {                                              // older browsers
      node = ctx.createScriptProcessor(4096, 1, 1);
      node.onaudioprocess = (e) => frames.push(toInt16(e.inputBuffer.getChannelData(0)));
    }
    input.connect(node);
    node.connect(ctx.destination);
    return () => { frames.flush(); media.getTracks().forEach((t) => t.stop()); ctx.close(); };
  }

  async function fileSource(file, frames) {
    const decoded = await new AudioContext().decodeAudioData(await file.arrayBuffer());
    const offline = new OfflineAudioContext(1, Math.ceil(decoded.duration * RATE), RATE);
    const src = offline.createBufferSource();
    src.buffer = decoded;
    src.connect(offline.destination);
    src.start();
    const pcm = toInt16((await offline.startRendering()).getChannelData(0));
    const started = performance.now();
    let sent = 0, timer = null;
    const tick = () => {                       // real-time pacing: send what is due
      const due = Math.min(pcm.length, Math.floor((performance.now() - started) / 1000 * RATE));
      if (due > sent) { frames.push(pcm.subarray(sent, due)); sent = due; }
      if (sent >= pcm.length) { clearInterval(timer); frames.flush(); finish(); }
    };
    timer = setInterval(tick, 20);
    return () => clearInterval(timer);
  }

  function show(text, isFinal) {
    if (isFinal) { finalText = text; $("final").textContent = text; $("partial").textContent = ""; }
    else $("partial").textContent = text.startsWith(finalText) ? text.slice(finalText.length) : text;
  }

  function start(kind) {
    if (!key()) return setStatus("set an API key first", true);
    const file = $("file").files[0];
    if (kind === "file" && !file) return setStatus("choose a file first", true);
    finalText = ""; $("final").textContent = ""; $("partial").textContent = "";
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(`${scheme}//${location.host}/v1/realtime`, ["a5s.v1", "a5s.key." + key()]);
    ws.binaryType = "arraybuffer";
    const frames = framer();
    ws.onopen = () => { setStatus("connected; starting"); ws.send(JSON.stringify({ type: "start", language: "en-US" })); };
    ws.onmessage = async (event) => {
      const msg = JSON.parse(event.data);
      switch (msg.type) {
        case "provider_status": setStatus(msg.message); break;
        case "ready":
          setStatus(`streaming (${kind}) · session limit ${Math.round(msg.session_limit_ms / 1000)} s`);
          $("stop").disabled = false;
          try {
            stopAudio = kind === "mic" ? await micSource(frames) : await fileSource(file, frames);
          } catch (err) { setStatus("audio: " + err.message, true); finish(); }
          break;
        case "transcript": show(msg.text, msg.is_final); break;
        case "session_limit": setStatus(msg.message); break;
        case "finished":
          setStatus(`finished · ${(msg.audio_ms / 1000).toFixed(1)} s of audio, ` +
                    `${(msg.billed_ms / 1000).toFixed(1)} s billed`);
          break;
        case "error": case "provider_error":
          setStatus(`${msg.code || msg.type}: ${msg.message}`, true); break;
      }
    };
    ws.onclose = (event) => {
      if (stopAudio) { stopAudio(); stopAudio = null; }
      $("stop").disabled = true;
      if (event.code !== 1000 && !$("status").classList.contains("error")) {
        setStatus(`connection closed (${event.code})`, true);
      }
    };
  }

  setupKeyForm();
  $("mic").addEventListener("click", () => start("mic"));
  $("stream-file").addEventListener("click", () => start("file"));
  $("stop").addEventListener("click", finish);
})();
