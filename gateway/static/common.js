// Shared by the playground pages: the key (sessionStorage) and API calls with it.
"use strict";

const a5s = (() => {
  const KEY = "a5s.key";
  const $ = (id) => document.getElementById(id);

  function key() { return sessionStorage.getItem(KEY) || ""; }

  function setupKeyForm() {
    const input = $("key");
    input.value = key();
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      $("key-state").textContent = input.value.trim() ? "key set for this tab" : "no key";
    });
  }

  // fetch() with the bearer key; error envelopes become Error("code: message [req_...]").
  async function api(method, path, { body, headers = {}, raw = false } = {}) {
    const resp = await fetch(path, {
      method, body, headers: { Authorization: "Bearer " + key(), ...headers },
    });
    if (!resp.ok) {
      let detail = resp.status + " " + resp.statusText;
      try {
        const err = (await resp.json()).error;
        detail = err.code + ": " + err.message + (err.request_id ? " [" + err.request_id + "]" : "");
      } catch (_) { /* not an envelope */ }
      throw new Error(detail);
    }
    return raw ? resp : resp.json();
  }

  function setStatus(text, isError = false) {
    const el = $("status");
    el.textContent = text;
    el.classList.toggle("error", isError);
  }

  return { $, key, setupKeyForm, api, setStatus };
})();
