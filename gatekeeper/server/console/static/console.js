// The console's only script: actions without a reload, and live progress of measurements.
// Everything written into the page goes through textContent: model names come from clients.
(() => {
  "use strict";
  const body = document.body;
  const csrf = body.dataset.csrf;
  const prefix = body.dataset.prefix;
  const watching = new Set(); // keys measured while this page is open: reload when they end
  let timer = null;

  function notice(text) {
    const el = document.getElementById("notice");
    el.textContent = text;
    el.hidden = !text;
  }

  function show(m) {
    for (const el of document.querySelectorAll("[data-progress-key]")) {
      if (el.dataset.progressKey !== m.key) continue;
      el.replaceChildren();
      el.classList.toggle("failed", m.state === "failed");
      if (m.state === "running") {
        const bar = document.createElement("progress");
        bar.max = Math.max(m.total, 1);
        bar.value = m.answered;
        const text = document.createElement("span");
        text.className = "progress-text";
        text.textContent = `measuring: ${m.answered} / ${m.total} calls`;
        el.append(bar, text);
      } else if (m.state === "failed") {
        el.textContent = `measurement failed: ${m.error}`;
      } else if (watching.has(m.key)) {
        el.textContent = `measured: ${m.answered} / ${m.total} calls, tier ${m.tier}`;
      }
    }
  }

  async function poll() {
    timer = null;
    let response;
    try {
      response = await fetch(`${prefix}/progress.json`, { headers: { accept: "application/json" } });
    } catch (err) {
      notice(`progress unavailable: ${err}`);
      timer = setTimeout(poll, 2000);
      return;
    }
    if (response.status === 401) { location.assign(`${prefix}/login`); return; }
    if (!response.ok) { notice(`progress unavailable: HTTP ${response.status}`); return; }
    const { measurements } = await response.json();
    let ended = false;
    let failed = false;
    for (const m of measurements) {
      if (m.state === "running") watching.add(m.key);
      show(m);
      if (m.state !== "running" && watching.delete(m.key)) {
        ended = true;
        failed = failed || m.state === "failed";
      }
    }
    // The new profile is drawn by the server: reload once all watched measurements ended,
    // unless one failed, whose error stays on screen to be read.
    if (ended && !failed && watching.size === 0) {
      location.reload();
      return;
    }
    if (watching.size) timer = setTimeout(poll, 500);
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form.action");
    if (!form) return;
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    let response, out;
    try {
      response = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        headers: { accept: "application/json", "x-csrf-token": csrf },
      });
      out = await response.json();
    } catch (err) {
      notice(`request failed: ${err}`);
      button.disabled = false;
      return;
    }
    if (response.status === 401) { location.assign(`${prefix}/login`); return; }
    if (!response.ok) {
      notice(out.error ? out.error.message : `HTTP ${response.status}`);
      button.disabled = false;
      return;
    }
    notice("");
    if (form.dataset.kind === "measure") {
      watching.add(out.key);
      show({ key: out.key, state: "running", answered: 0, total: 0 });
      button.disabled = false;
      if (timer === null) poll();
    } else {
      location.reload();
    }
  });

  poll(); // picks up measurements already running (started by traffic or another admin)
})();
