// The ops dashboard: figures from /ops/v1/data (console token), drawn as SVG charts.
"use strict";

(() => {
  const TOKEN = "a5s.console-token";
  const POLL_MS = 10000;
  const HISTORY = 180;  // polls of the registry's figures kept for the live charts
  const COLOURS = ["#1f6feb", "#c2410c", "#15803d", "#9333ea", "#b91c1c", "#0e7490",
                   "#a16207", "#be185d"];
  const STATUS_COLOURS = { completed: "#15803d", error: "#b91c1c", queued: "#a16207",
                           processing: "#1f6feb", canceled: "#6b7280" };
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  const samples = [];

  // --- token ----------------------------------------------------------------------------------

  function token() { return sessionStorage.getItem(TOKEN) || ""; }

  function setupToken() {
    const hash = new URLSearchParams(location.hash.slice(1));
    if (hash.get("token")) {  // a link with #token=... (a fragment never reaches the server)
      sessionStorage.setItem(TOKEN, hash.get("token"));
      history.replaceState(null, "", location.pathname + location.search);
    }
    $("token").value = token();
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN, $("token").value.trim());
      refresh();
    });
  }

  // --- SVG helpers ----------------------------------------------------------------------------

  function el(name, attrs = {}, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A round axis maximum (four round steps) with room above the tallest mark for its label.
  function niceMax(value) {
    if (!(value > 0)) return 1;
    const raw = (value * 1.15) / 4;
    const unit = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * unit >= raw) return 4 * m * unit;
    return 40 * unit;
  }

  function fmt(v) {
    if (Math.abs(v) >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : String(Number(v.toFixed(Math.abs(v) < 1 ? 3 : 1)));
  }

  // A frame: axes, grid lines and y labels; returns the plot's geometry.
  function frame(svg, yMax, unit) {
    const g = { left: 52, right: 12, top: 10, bottom: 34, width: 600, height: 220 };
    g.w = g.width - g.left - g.right;
    g.h = g.height - g.top - g.bottom;
    g.y = (v) => g.top + g.h - (v / yMax) * g.h;
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4, y = g.y(v);
      svg.appendChild(el("line", { x1: g.left, x2: g.left + g.w, y1: y, y2: y, class: "grid-line" }));
      svg.appendChild(el("text", { x: g.left - 6, y: y + 4, "text-anchor": "end" }, fmt(v) + (unit || "")));
    }
    svg.appendChild(el("line", { x1: g.left, x2: g.left, y1: g.top, y2: g.top + g.h, class: "axis" }));
    svg.appendChild(el("line", { x1: g.left, x2: g.left + g.w, y1: g.top + g.h, y2: g.top + g.h, class: "axis" }));
    return g;
  }

  function canvas(id) {
    const plot = $(id).querySelector(".plot");
    plot.replaceChildren();
    const svg = el("svg", { viewBox: "0 0 600 220", preserveAspectRatio: "none", role: "img" });
    plot.appendChild(svg);
    return { plot, svg };
  }

  function empty(svg, text) {
    svg.appendChild(el("text", { x: 300, y: 110, "text-anchor": "middle", class: "empty" },
                       text || "no data in this window"));
  }

  function legend(plot, names, colourOf) {
    const box = document.createElement("div");
    box.className = "legend";
    for (const name of names) {
      const item = document.createElement("span");
      const chip = document.createElement("i");
      chip.style.background = colourOf(name);
      item.append(chip, name);
      box.appendChild(item);
    }
    plot.appendChild(box);
  }

  // --- charts ---------------------------------------------------------------------------------

  // Bars, one per category; several series side by side are not needed here.
  function bars(id, items, colourOf) {
    const { plot, svg } = canvas(id);
    svg.dataset.points = String(items.length);
    if (!items.length) return empty(svg);
    const g = frame(svg, niceMax(Math.max(...items.map((d) => d.value))));
    const slot = g.w / items.length, width = Math.min(60, slot * 0.7);
    items.forEach((d, i) => {
      const x = g.left + slot * i + (slot - width) / 2, y = g.y(d.value);
      const bar = el("rect", { x, y, width, height: g.top + g.h - y, fill: colourOf(d.key, i), class: "bar" });
      bar.appendChild(el("title", {}, d.key + ": " + fmt(d.value)));
      svg.appendChild(bar);
      svg.appendChild(el("text", { x: x + width / 2, y: y - 4, "text-anchor": "middle" }, fmt(d.value)));
      svg.appendChild(el("text", { x: x + width / 2, y: g.top + g.h + 14, "text-anchor": "middle" }, d.key));
    });
  }

  // Stacked bars per day: rows are {day, key, seconds}.
  function stacked(id, rows) {
    const { plot, svg } = canvas(id);
    svg.dataset.points = String(rows.length);
    if (!rows.length) return empty(svg);
    const days = [...new Set(rows.map((r) => r.day))].sort();
    const keys = [...new Set(rows.map((r) => r.key))].sort();
    const colourOf = (k) => COLOURS[keys.indexOf(k) % COLOURS.length];
    const totals = days.map((d) => rows.filter((r) => r.day === d).reduce((s, r) => s + r.seconds, 0));
    const g = frame(svg, niceMax(Math.max(...totals)), "s");
    const slot = g.w / days.length, width = Math.min(48, slot * 0.7);
    days.forEach((day, i) => {
      let base = 0;
      const x = g.left + slot * i + (slot - width) / 2;
      for (const key of keys) {
        const row = rows.find((r) => r.day === day && r.key === key);
        if (!row || !(row.seconds > 0)) continue;
        const y0 = g.y(base), y1 = g.y(base + row.seconds);
        const bar = el("rect", { x, y: y1, width, height: Math.max(1, y0 - y1), fill: colourOf(key), class: "bar" });
        bar.appendChild(el("title", {}, day + " " + key + ": " + fmt(row.seconds) + " s"));
        svg.appendChild(bar);
        base += row.seconds;
      }
      svg.appendChild(el("text", { x: x + width / 2, y: g.top + g.h + 14, "text-anchor": "middle" }, day.slice(5)));
    });
    legend(plot, keys, colourOf);
  }

  // Lines over time: points are {t: Date|string, <series>: number}; series = [[name, label]].
  function lines(id, points, series, unit) {
    const { plot, svg } = canvas(id);
    svg.dataset.points = String(points.length);
    if (!points.length) return empty(svg);
    const times = points.map((p) => new Date(p.t).getTime());
    const lo = Math.min(...times), hi = Math.max(...times), span = Math.max(1, hi - lo);
    const yMax = niceMax(Math.max(...points.flatMap((p) => series.map(([name]) => p[name] || 0))));
    const g = frame(svg, yMax, unit);
    const x = (t) => lo === hi ? g.left + g.w / 2 : g.left + ((t - lo) / span) * g.w;
    series.forEach(([name, label], s) => {
      const colour = COLOURS[s % COLOURS.length];
      const path = points.map((p, i) => (i ? "L" : "M") + x(times[i]).toFixed(1) + "," + g.y(p[name] || 0).toFixed(1)).join(" ");
      svg.appendChild(el("path", { d: path, stroke: colour, class: "line" }));
      // earlier series get larger dots, so equal values still show each colour as a ring
      const r = 3 + 1.5 * (series.length - 1 - s);
      points.forEach((p, i) => svg.appendChild(el("circle", { cx: x(times[i]), cy: g.y(p[name] || 0), r, fill: colour, class: "point" })));
    });
    // The time axis: one label under a single bucket; otherwise its two ends, with seconds
    // where they fall in the same minute.
    const short = (t) => new Date(t).toISOString().slice(11, 16);
    const label = short(lo) === short(hi) ? (t) => new Date(t).toISOString().slice(11, 19) : short;
    const below = g.top + g.h + 14;
    if (lo === hi) {
      svg.appendChild(el("text", { x: x(lo), y: below, "text-anchor": "middle", class: "x-label" }, label(lo)));
    } else {
      svg.appendChild(el("text", { x: g.left, y: below, class: "x-label" }, label(lo)));
      svg.appendChild(el("text", { x: g.left + g.w, y: below, "text-anchor": "end", class: "x-label" }, label(hi)));
    }
    legend(plot, series.map(([, l]) => l), (l) => COLOURS[series.findIndex(([, x2]) => x2 === l) % COLOURS.length]);
  }

  // --- data -----------------------------------------------------------------------------------

  function draw(data) {
    stacked("audio-model", data.audio_by_model);
    stacked("audio-account", data.audio_by_account);
    bars("jobs-status", data.jobs_by_status.map((r) => ({ key: r.key, value: r.jobs })),
         (k, i) => STATUS_COLOURS[k] || COLOURS[i % COLOURS.length]);
    bars("failures", data.failures_by_code.map((r) => ({ key: r.key, value: r.jobs })), () => "#b91c1c");
    lines("queue-wait", data.latency, [["queue_p50", "p50"], ["queue_p95", "p95"]], "s");
    lines("processing", data.latency, [["processing_p50", "p50"], ["processing_p95", "p95"]], "s");
    lines("rtf", data.latency, [["rtf_p50", "p50"], ["rtf_p95", "p95"]]);
    const reg = data.registry;
    const prev = samples[samples.length - 1];
    // CPU since the last poll; on the first, the average since the process started
    const since = prev ? new Date(prev.t) / 1000 : reg.process.start_time || 0;
    const used = (reg.process.cpu_seconds || 0) - (prev ? prev.cpu_seconds : 0);
    const cpu = Math.max(0, 100 * used / Math.max(0.001, new Date(data.now) / 1000 - since));
    samples.push({ t: data.now, live: reg.live_sessions, cpu_seconds: reg.process.cpu_seconds || 0,
                   cpu, rss_mib: (reg.process.resident_bytes || 0) / 1048576,
                   fds: reg.process.open_fds || 0, max_fds: reg.process.max_fds || 0 });
    if (samples.length > HISTORY) samples.shift();
    lines("live", samples, [["live", "open sessions"]]);
    bars("webhooks", Object.entries(reg.webhook_deliveries).map(([key, value]) => ({ key, value })),
         (k) => ({ delivered: "#15803d", retrying: "#a16207", rejected: "#c2410c",
                   gave_up: "#b91c1c", abandoned: "#6b7280" })[k] || "#1f6feb");
    lines("cpu", samples, [["cpu", "CPU % of one core"]], "%");
    lines("memory", samples, [["rss_mib", "resident memory"]], " MiB");
    lines("fds", samples, [["fds", "open (limit " + fmt(reg.process.max_fds || 0) + ")"]]);
  }

  async function refresh() {
    const status = $("status");
    if (!token()) {
      status.textContent = "enter the console token";
      return;
    }
    try {
      const resp = await fetch("/ops/v1/data?hours=" + encodeURIComponent($("hours").value),
                               { headers: { Authorization: "Bearer " + token() } });
      const body = await resp.json();
      if (!resp.ok) throw new Error(body.error ? body.error.code + ": " + body.error.message : resp.status);
      draw(body);
      $("token-card").hidden = true;
      status.className = "status";
      status.textContent = "updated " + new Date(body.now).toISOString().slice(11, 19) + " UTC";
      document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
    } catch (err) {
      status.className = "status error";
      status.textContent = String(err.message || err);
      $("token-card").hidden = false;
    }
  }

  setupToken();
  const hours = new URLSearchParams(location.search).get("hours");
  if (hours) {
    const option = [...$("hours").options].find((o) => o.value === hours);
    if (!option) $("hours").add(new Option(hours + " hours", hours));
    $("hours").value = hours;
  }
  $("hours").addEventListener("change", () => { samples.length = 0; refresh(); });
  refresh();
  setInterval(refresh, POLL_MS);
})();
