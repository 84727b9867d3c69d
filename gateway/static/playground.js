// Batch page: upload or URL -> transcript -> diarized, word-timed view with playback.
"use strict";

(() => {
  const { $, api, setStatus, setupKeyForm } = a5s;
  const player = $("player");
  let words = [];        // [{el, start, end}] in time order, for highlighting
  let objectUrls = [];

  function speakerClass(speaker, order) {
    if (!order.has(speaker)) order.set(speaker, order.size % 8 + 1);
    return "spk-" + order.get(speaker);
  }

  function fmt(seconds) {
    const m = Math.floor(seconds / 60), s = (seconds % 60).toFixed(1).padStart(4, "0");
    return m + ":" + s;
  }

  function render(transcript) {
    const box = $("transcript");
    box.replaceChildren();
    words = [];
    const order = new Map();
    for (const speaker of transcript.speakers || []) speakerClass(speaker.id, order);
    for (const utt of transcript.utterances || []) {
      const p = document.createElement("p");
      p.className = "utt " + speakerClass(utt.speaker, order);
      p.dataset.speaker = utt.speaker;
      const time = document.createElement("span");
      time.className = "time";
      time.textContent = fmt(utt.start);
      const label = document.createElement("span");
      label.className = "label";
      label.textContent = utt.speaker;
      p.append(time, label);
      for (const w of utt.words) {
        const span = document.createElement("span");
        span.className = "w";
        span.textContent = w.text;
        span.dataset.start = w.start;
        span.dataset.end = w.end;
        span.title = w.start.toFixed(2) + "–" + w.end.toFixed(2) + " s";
        p.append(span, " ");
        words.push({ el: span, start: w.start, end: w.end });
      }
      box.append(p);
    }
    if (!words.length) box.textContent = "(no speech)";
    words.sort((a, b) => a.start - b.start);
    const legend = $("legend");
    legend.replaceChildren();
    for (const [speaker, n] of order) {
      const chip = document.createElement("span");
      chip.className = "chip spk-" + n;
      chip.textContent = speaker;
      legend.append(chip);
    }
  }

  $("transcript").addEventListener("click", (event) => {
    const span = event.target.closest(".w");
    if (!span) return;
    player.currentTime = parseFloat(span.dataset.start);
    player.play().catch(() => { /* no audio output (e.g. headless): the seek still counts */ });
  });

  player.addEventListener("timeupdate", () => {
    const t = player.currentTime;
    for (const w of words) w.el.classList.toggle("now", t >= w.start && t < w.end);
  });

  async function captions(id) {
    for (const format of ["srt", "vtt"]) {
      const text = await (await api("GET", `/v1/transcripts/${id}/subtitles?format=${format}`,
                                    { raw: true })).text();
      const url = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
      objectUrls.push(url);
      const link = $("dl-" + format);
      link.href = url;
      link.download = `${id}.${format}`;
      link.classList.remove("disabled");
    }
  }

  async function run(event) {
    event.preventDefault();
    const file = $("file").files[0];
    const url = $("url").value.trim();
    if (!file && !url) return setStatus("choose a file or give a URL", true);
    for (const u of objectUrls) URL.revokeObjectURL(u);
    objectUrls = [];
    for (const f of ["srt", "vtt"]) $("dl-" + f).classList.add("disabled");
    $("go").disabled = true;
    const started = performance.now();
    const elapsed = () => ((performance.now() - started) / 1000).toFixed(1) + " s";
    try {
      let body;
      if (file) {
        setStatus("uploading " + file.name);
        const uploaded = await api("POST", "/v1/files", {
          body: file, headers: { "Content-Type": "application/octet-stream" } });
        body = { file_id: uploaded.id };
        const local = URL.createObjectURL(file);   // play the local copy, not a download
        objectUrls.push(local);
        player.src = local;
      } else {
        body = { audio_url: url };
        player.src = url;
      }
      let t = await api("POST", "/v1/transcripts", {
        body: JSON.stringify({ ...body, metadata: { source: "playground" } }),
        headers: { "Content-Type": "application/json" } });
      $("transcript").dataset.id = t.id;
      while (t.status === "queued" || t.status === "processing") {
        setStatus(`${t.id} ${t.status} · ${elapsed()}`);
        await new Promise((r) => setTimeout(r, 1000));
        t = await api("GET", "/v1/transcripts/" + t.id);
      }
      if (t.status === "error") {
        setStatus(`${t.id} error · ${t.error.code}: ${t.error.message}`, true);
        return;
      }
      render(t);
      await captions(t.id);
      setStatus(`${t.id} completed · ${elapsed()} · ${t.audio_duration.toFixed(1)} s of audio`);
    } catch (err) {
      setStatus(String(err.message || err), true);
    } finally {
      $("go").disabled = false;
    }
  }

  setupKeyForm();
  $("job-form").addEventListener("submit", run);
})();
