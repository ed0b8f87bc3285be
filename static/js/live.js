// The live parts of the job pages: a WebSocket of jobs/consumers.py that reconnects with
// backoff and resumes where it stopped (`from` = the last `next`), and the helpers both pages
// use to show a job's state, an age or a time the way the server renders them.
"use strict";

(function () {
  const PC = window.PaddleCloud;

  // Open `path` (e.g. /ws/jobs/) with `params`; call onMessage(msg) for each message.
  // A message with `next` moves `from` on, so a reconnection neither loses nor repeats.
  // Ends for good on {"type": "end"}, on close(), and on the portal's close codes:
  // 4401 → the login page and back; 4404 → onGone(message); 4400/4403 → onRefused(message).
  function live(path, { params = {}, onMessage, onGone, onRefused, onStatus = () => {} }) {
    const query = { ...params };
    let socket = null;
    let stopped = false;
    let attempt = 0;
    let timer = null;
    let lastError = null;

    function url() {
      const search = new URLSearchParams();
      for (const [key, value] of Object.entries(query)) {
        if (value !== undefined && value !== null && value !== "") search.set(key, value);
      }
      if (PC.datacenter()) search.set("datacenter", PC.datacenter());
      const text = search.toString();
      return PC.wsUrl(text ? `${path}?${text}` : path);
    }

    function connect() {
      timer = null;
      socket = new WebSocket(url());
      socket.addEventListener("open", () => { attempt = 0; onStatus("live"); });
      socket.addEventListener("message", (event) => {
        let message;
        try { message = JSON.parse(event.data); } catch (_) { return; }
        if (typeof message.next === "number") query.from = message.next;
        if (message.type === "error") { lastError = message; return; }
        if (message.type === "end") stopped = true;
        onMessage(message);
      });
      socket.addEventListener("close", (event) => {
        socket = null;
        if (stopped) return;
        if (event.code === PC.WS_CLOSE.NOT_LOGGED_IN) {
          stopped = true;
          PC.loginAgain();
        } else if (event.code === PC.WS_CLOSE.NOT_FOUND) {
          stopped = true;
          onGone?.(lastError);
        } else if (event.code === PC.WS_CLOSE.BAD_REQUEST || event.code === 4403) {
          stopped = true;
          (onRefused || onGone)?.(lastError);
        } else {
          attempt += 1;
          const delay = Math.min(30_000, 500 * 2 ** Math.min(attempt, 6));
          onStatus("reconnecting", delay);
          timer = setTimeout(connect, delay * (0.75 + Math.random() / 2));
        }
      });
    }

    // Reconnect at once (not after the backoff) when the browser is back online or the tab
    // is shown again.
    function hurry() {
      if (!stopped && timer !== null) { clearTimeout(timer); connect(); }
    }
    const shown = () => { if (!document.hidden) hurry(); };
    window.addEventListener("online", hurry);
    document.addEventListener("visibilitychange", shown);

    connect();
    return {
      close() {
        stopped = true;
        window.removeEventListener("online", hurry);
        document.removeEventListener("visibilitychange", shown);
        if (timer !== null) clearTimeout(timer);
        if (socket && socket.readyState <= WebSocket.OPEN) socket.close(1000);
      },
      get ended() { return stopped; },
    };
  }

  // "12s", "5m", "3h", "2d": as dashboard.views.jobs.age renders it.
  function age(iso, now = Date.now()) {
    const seconds = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
      if (seconds >= size) return `${Math.floor(seconds / size)}${unit}`;
    }
    return `${seconds}s`;
  }

  // An API time (ISO 8601, UTC) as the templates render it: "2025-01-31 12:34" (+ ":56").
  function utc(iso, { seconds = false } = {}) {
    if (!iso) return "";
    const text = new Date(iso).toISOString().replace("T", " ");
    return text.slice(0, seconds ? 19 : 16);
  }

  function setTime(element, iso, options) {
    element.dateTime = iso || "";
    element.textContent = utc(iso, options);
  }

  // The state cell of templates/dashboard/jobs/_state.html, from an API job.
  function fillState(cell, job) {
    const label = cell.querySelector('[data-part="label"]');
    label.textContent = job.state;
    label.className = `badge state-${job.state}`;
    const queue = cell.querySelector('[data-part="queue"]');
    queue.textContent = job.queue_position ? `#${job.queue_position}` : "";
    queue.hidden = !job.queue_position;
    const predicted = cell.querySelector('[data-part="predicted"]');
    if (predicted) fillPrediction(predicted, job.predicted_start);
    const reason = cell.querySelector('[data-part="reason"]');
    reason.textContent = job.state_reason || "";
    reason.title = job.state_reason || "";
    reason.hidden = !job.state_reason;
  }

  // How long until an API time, as dashboard/scheduling.py (until) words it: "now",
  // "in 12 min", "in 3.5 h", "in 2.1 days".
  function until(iso, now = Date.now()) {
    const seconds = (new Date(iso).getTime() - now) / 1000;
    if (seconds < 60) return "now";
    if (Math.round(seconds / 60) < 60) return `in ${Math.round(seconds / 60)} min`;
    if (seconds < 48 * 3600) return `in ${(seconds / 3600).toFixed(1)} h`;
    return `in ${(seconds / 86400).toFixed(1)} days`;
  }

  // The predicted start of templates/dashboard/jobs/_state.html, from an API job's
  // predicted_start ({at, earliest, latest, unknown}, or null while it does not wait).
  function fillPrediction(element, predicted) {
    element.hidden = !predicted;
    if (!predicted) {
      element.textContent = "";
      delete element.dataset.at;
      element.removeAttribute("title");
    } else if (predicted.unknown) {
      element.textContent = "start unknown";
      delete element.dataset.at;
      element.title = predicted.unknown;
    } else if (!predicted.at) {
      element.textContent = "no start predicted within 30 days";
      delete element.dataset.at;
      element.removeAttribute("title");
    } else {
      element.dataset.at = predicted.at;
      element.textContent = `starts ~${until(predicted.at)}`;
      element.title = `predicted start ${utc(predicted.at)} UTC` + (predicted.earliest &&
        predicted.latest ? `, between ${utc(predicted.earliest)} and ${utc(predicted.latest)}` : "");
    }
  }

  // Predicted starts count down as time passes (each keeps the time it was predicted for).
  function tickPredictions(root = document, now = Date.now()) {
    for (const element of root.querySelectorAll('[data-part="predicted"][data-at]')) {
      element.textContent = `starts ~${until(element.dataset.at, now)}`;
    }
    for (const element of root.querySelectorAll("[data-until]")) {
      element.textContent = until(element.dataset.until, now);
    }
  }

  const FINAL = new Set(["succeeded", "failed", "killed"]);

  PC.live = live;
  PC.jobs = { age, utc, setTime, fillState, fillPrediction, tickPredictions, until, FINAL };
})();
