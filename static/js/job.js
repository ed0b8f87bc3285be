// The job page, live: state, workers and events from /ws/jobs/<name>/, a worker's log from
// …/logs/ (follow or pause, search, at most LOG_KEEP lines kept), training curves from
// …/metrics/, and the kill/delete confirmation dialogs.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const PC = window.PaddleCloud;
  const { setTime, utc, fillState, tickPredictions, until, FINAL } = PC.jobs;
  const root = document.getElementById("job");
  if (!root) return;
  const byId = (id) => document.getElementById(id);
  const WAITING = new Set(["pending", "queued"]);
  const base = `/ws/jobs/${encodeURIComponent(root.dataset.name)}/`;
  const sockets = new Set();

  function open(path, options) {
    const socket = PC.live(path, { onGone: gone, ...options });
    sockets.add(socket);
    return socket;
  }

  function closeSocket(socket) {
    if (!socket) return;
    socket.close();
    sockets.delete(socket);
  }

  // -- "Open port…": the port in a new tab, through the portal's proxy (the API's GET sends
  // the browser to the route's own origin; a link, as a form's redirect there is not 'self').
  byId("open-port-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const url = new URL(form.dataset.url.replace(/\/0\/open$/, `/${form.elements.port.value}/open`),
      location.href);
    url.searchParams.set("worker", form.elements.worker.value);
    url.searchParams.set("datacenter", form.dataset.datacenter);
    Object.assign(document.createElement("a"), { href: url.href, target: "_blank", rel: "noopener" })
      .click();
  });

  // -- kill and delete: asked in a <dialog> (the links lead to a confirmation page) ----------

  for (const trigger of document.querySelectorAll("[data-dialog]")) {
    trigger.addEventListener("click", (event) => {
      const dialog = byId(trigger.dataset.dialog);
      if (!dialog || typeof dialog.showModal !== "function") return;
      event.preventDefault();
      dialog.showModal();
    });
  }
  for (const button of document.querySelectorAll("dialog [data-close]")) {
    button.addEventListener("click", () => button.closest("dialog").close());
  }

  // -- the job: state, workers, events -------------------------------------------------------

  const gone = () => {
    if (root.dataset.state === "gone") return;
    root.dataset.state = "gone";
    byId("job-gone").hidden = false;
    byId("kill").hidden = true;
    byId("delete").hidden = true;
    for (const socket of [...sockets]) closeSocket(socket);
  };

  function showJob(job) {
    root.dataset.state = job.state;
    root.dispatchEvent(new Event("job-state"));  // the log's status says why it is empty
    fillState(byId("job-state").querySelector('[data-field="state"]'), job);
    fillWaiting(job);
    for (const field of ["started_at", "finished_at"]) {
      setTime(root.querySelector(`.spec time[data-field="${field}"]`), job[field],
        { seconds: true });
    }
    byId("trainers-shown").textContent = job.trainers_shown || job.trainers;
    const ended = FINAL.has(job.state);
    byId("kill").hidden = ended;
    byId("delete").hidden = !ended;
    byId("open-port").hidden = job.state !== "running";  // a running job's ports only
    if (ended && byId("confirm-kill").open) byId("confirm-kill").close();
  }

  // "Why it is not running" (templates/dashboard/jobs/detail.html): shown while the job
  // waits. What limit it waits for is the page's (the API does not say); once the reason
  // changes, that line goes rather than stay wrong.
  function fillWaiting(job) {
    const box = byId("waiting");
    box.hidden = !WAITING.has(job.state);
    if (box.hidden) return;
    const reason = job.state_reason || "admission has not looked at it yet";
    if (reason !== box.dataset.reason) box.querySelector('[data-row="waits-for"]').hidden = true;
    box.querySelector('[data-field="reason"]').textContent = reason;
    box.querySelector('[data-row="position"]').hidden = !job.queue_position;
    box.querySelector('[data-field="position"]').textContent =
      `#${job.queue_position} of your waiting jobs`;
    const predicted = job.predicted_start;
    const cell = box.querySelector('[data-field="predicted"]');
    if (!predicted) cell.textContent = "not predicted";
    else if (predicted.unknown) cell.textContent = `unknown: ${predicted.unknown}`;
    else if (!predicted.at) cell.textContent = "not within the next 30 days";
    else {
      const inWords = document.createElement("span");
      inWords.dataset.until = predicted.at;
      inWords.textContent = until(predicted.at);
      const range = predicted.earliest && predicted.latest
        ? `, between ${utc(predicted.earliest)} and ${utc(predicted.latest)} UTC` : "";
      cell.replaceChildren(`around ${utc(predicted.at)} UTC (`, inWords, `)${range}`);
    }
  }
  setInterval(() => tickPredictions(root), 1000);

  const clock = (iso) => (iso ? utc(iso, { seconds: true }).slice(11) : "");

  function fill(node, field, text) {
    const target = node.querySelector(`[data-field="${field}"]`);
    target.textContent = text ?? "";
    return target;
  }

  function workerRow(worker) {
    const row = byId("worker-row").content.firstElementChild.cloneNode(true);
    row.dataset.name = worker.name;
    fill(row, "name", worker.name);
    fill(row, "state", worker.state).className = `badge state-${worker.state}`;
    const reason = fill(row, "reason", worker.reason);
    reason.title = worker.reason || "";
    reason.hidden = !worker.reason;
    fill(row, "restarts", worker.restarts);
    fill(row, "exit_code", worker.exit_code);
    fill(row, "host", worker.host);
    for (const field of ["started_at", "finished_at"]) {
      const time = fill(row, field, clock(worker[field]));
      time.dateTime = worker[field] || "";
    }
    return row;
  }

  function eventItem(event) {
    const item = byId("event-item").content.firstElementChild.cloneNode(true);
    item.className = `event to-${event.to_state}`;
    const time = fill(item, "time", utc(event.time, { seconds: true }));
    time.dateTime = event.time;
    fill(item, "who", event.worker || "job");
    fill(item, "from_state", event.from_state || "—");
    fill(item, "to_state", event.to_state).className = `badge state-${event.to_state}`;
    fill(item, "reason", event.reason);
    item.dataset.id = event.id;
    const repeats = fill(item, "repeats", event.repeats
      ? `and ${event.repeats} more like it, until ${utc(event.repeated_until, { seconds: true })}`
      : "");
    repeats.hidden = !event.repeats;
    return item;
  }

  // A new event, or one that counted more repeats (it is replaced where it is).
  function eventShown(list, event) {
    const item = eventItem(event);
    const shown = list.querySelector(`[data-id="${event.id}"]`);
    if (shown) shown.replaceWith(item);
    else list.append(item);
  }

  // The timeline scrolls: its newest events stay in view unless the reader scrolled up.
  function keepLatestInView(list, change, always = false) {
    const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 8;
    change(list);
    fitWholeEvents(list);
    if (always || atEnd) list.scrollTop = list.scrollHeight;
  }

  // As tall as the newest events that fit in its stylesheet's height: scrolled to the
  // newest, no event is cut at its top.
  function fitWholeEvents(list) {
    list.style.maxHeight = "";
    const room = list.clientHeight;
    if (list.scrollHeight <= room) return;
    const items = [...list.children];
    const end = items[items.length - 1].getBoundingClientRect().bottom;
    let height = 0; // from the top of the oldest that fits to the end (fractions of pixels)
    for (let i = items.length - 1; i >= 0; i--) {
      const span = end - items[i].getBoundingClientRect().top;
      if (span > room) break;
      height = span;
    }
    if (height) list.style.maxHeight = `${height}px`;
  }

  open(base, {
    onMessage(message) {
      switch (message.type) {
        case "job": showJob(message.job); break;
        case "workers": byId("workers").tBodies[0].replaceChildren(
          ...message.workers.map(workerRow)); break;
        case "events": keepLatestInView(byId("events"), (list) =>
          list.replaceChildren(...message.events.map(eventItem)), true); break;
        case "event": keepLatestInView(byId("events"), (list) =>
          eventShown(list, message.event)); break;
        case "job_deleted": gone(); break;
        default: break;
      }
    },
  });

  // -- logs ---------------------------------------------------------------------------------

  const LOG_KEEP = 20_000;
  const log = byId("log");
  const logStatus = byId("log-status");
  const follow = byId("log-follow");
  const search = byId("log-search");
  const workerPicker = byId("log-worker");
  const download = byId("log-download");
  const logState = { worker: root.dataset.logWorker, socket: null, paused: false, pending: [],
    held: 0, stale: true, ended: false, query: "", connection: "live" };

  // A line as it is, or, while searching, hidden unless it matches, its matches marked.
  function applySearch(line) {
    const text = line.textContent;
    const query = logState.query;
    const lower = query ? text.toLowerCase() : "";
    let at = query ? lower.indexOf(query) : -1;
    if (line.firstElementChild) line.textContent = text;
    line.hidden = Boolean(query) && at < 0;
    if (at < 0) return;
    const parts = [];
    let from = 0;
    while (at >= 0) {
      parts.push(text.slice(from, at));
      const mark = document.createElement("mark");
      mark.textContent = text.slice(at, at + query.length);
      parts.push(mark);
      from = at + query.length;
      at = lower.indexOf(query, from);
    }
    parts.push(text.slice(from));
    line.replaceChildren(...parts);
  }

  function showLogStatus() {
    const lines = log.childElementCount;
    const parts = [];
    download.hidden = !lines;  // nothing to download yet
    if (!lines && WAITING.has(root.dataset.state) && logState.worker !== "build") {
      parts.push(`${logState.worker} has not started: the job is ${root.dataset.state}`);
    } else if (!lines) parts.push(`${logState.worker} has written nothing yet`);
    else {
      parts.push(`${logState.worker}: lines ${log.firstElementChild.dataset.n}–` +
        `${log.lastElementChild.dataset.n}`);
    }
    if (logState.query) {
      const matching = log.querySelectorAll(".line:not([hidden])").length;
      parts.push(`${matching} matching “${search.value.trim()}”`);
    }
    if (logState.paused) parts.push(`paused, ${logState.held} new line${logState.held === 1 ? "" : "s"} held`);
    if (logState.ended) parts.push("the worker has ended");
    else if (logState.connection === "reconnecting") parts.push("reconnecting…");
    logStatus.textContent = parts.join(" · ");
  }

  function appendLines(first, lines) {
    if (lines.length > LOG_KEEP) {
      first += lines.length - LOG_KEEP;
      lines = lines.slice(-LOG_KEEP);
    }
    const fragment = document.createDocumentFragment();
    lines.forEach((text, k) => {
      const line = document.createElement("div");
      line.className = "line";
      line.dataset.n = String(first + k + 1);
      line.textContent = text;
      if (logState.query) applySearch(line);
      fragment.appendChild(line);
    });
    log.appendChild(fragment);
    for (let extra = log.childElementCount - LOG_KEEP; extra > 0; extra--) {
      log.firstElementChild.remove();
    }
    log.scrollTop = log.scrollHeight;
  }

  function receiveLines(first, lines) {
    if (logState.stale) {
      // The lines the page came with: the socket sends them again, numbered the same. They
      // are replaced, even while paused (then only up to the last line already shown).
      const shown = Number(log.lastElementChild?.dataset.n || 0);
      log.replaceChildren();
      logState.stale = false;
      if (logState.paused) {
        const again = Math.max(0, Math.min(lines.length, shown - first));
        appendLines(first, lines.slice(0, again));
        first += again;
        lines = lines.slice(again);
      }
    }
    if (logState.paused) {
      logState.pending.push([first, lines]);
      logState.held += lines.length;
      while (logState.held - logState.pending[0][1].length > LOG_KEEP) {
        logState.held -= logState.pending.shift()[1].length;
      }
    } else {
      appendLines(first, lines);
    }
    showLogStatus();
  }

  function startLog(worker, from, { keep = false } = {}) {
    closeSocket(logState.socket);
    Object.assign(logState, { worker, pending: [], held: 0, stale: keep, ended: false });
    if (!keep) log.replaceChildren();
    log.setAttribute("aria-label", `Log of ${worker}`);
    download.href = root.dataset.logUrl.replace("__worker__", encodeURIComponent(worker));
    download.textContent = `Download ${worker}.log`;
    logState.socket = open(`${base}logs/`, {
      params: { worker, from },
      onMessage(message) {
        if (message.type === "lines") receiveLines(message.first, message.lines);
        else if (message.type === "end") {
          if (logState.stale) receiveLines(message.next, []);
          logState.ended = true;
          showLogStatus();
        }
      },
      onRefused(error) { logStatus.textContent = error?.message || "this log cannot be shown"; },
      onStatus(connection) { logState.connection = connection; showLogStatus(); },
    });
    showLogStatus();
  }

  root.addEventListener("job-state", () => showLogStatus());
  follow.hidden = false;
  follow.addEventListener("click", () => {
    logState.paused = !logState.paused;
    follow.setAttribute("aria-pressed", String(!logState.paused));
    if (!logState.paused) {
      for (const [first, lines] of logState.pending) appendLines(first, lines);
      logState.pending = [];
      logState.held = 0;
    }
    showLogStatus();
  });

  search.disabled = false;
  let searchTimer = null;
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      logState.query = search.value.trim().toLowerCase();
      for (const line of log.children) applySearch(line);
      showLogStatus();
    }, 150);
  });
  byId("log-tools").addEventListener("submit", (event) => event.preventDefault());

  workerPicker.addEventListener("change", () => {
    const url = new URL(location.href);
    url.searchParams.set("worker", workerPicker.value);
    history.replaceState(null, "", url);
    startLog(workerPicker.value, 0);
  });

  startLog(logState.worker, Number(root.dataset.logFrom) || 0, { keep: true });

  // -- training curves ----------------------------------------------------------------------

  const charts = byId("charts");
  const chartsEmpty = byId("charts-empty");
  const metrics = { socket: null, series: new Map(), dirty: new Set(), frame: 0 };
  const { draw, format, loggable } = window.PaddleCloudChart;

  function toggle(label, title) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "btn-secondary btn-sm toggle";
    button.textContent = label;
    button.title = title;
    button.setAttribute("aria-pressed", "false");
    return button;
  }

  function seriesFor(name) {
    let series = metrics.series.get(name);
    if (series) return series;
    const figure = document.createElement("figure");
    figure.className = "chart";
    figure.dataset.metric = name;
    const caption = document.createElement("figcaption");
    const title = document.createElement("span");
    title.className = "name";
    title.textContent = name;
    const last = document.createElement("span");
    last.className = "last";
    const tools = document.createElement("span");
    tools.className = "chart-tools";
    const log = toggle("log scale", "a logarithmic value axis (every value must be positive)");
    const smooth = toggle("smooth", "a moving average, the raw curve faint behind");
    const reset = toggle("whole run", "show every step again (drag across the chart to zoom)");
    reset.hidden = true;
    tools.append(log, smooth, reset);
    caption.append(title, " ", last, tools);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    figure.append(caption, svg);
    series = { points: [], svg, last, options: {}, log, chart: null };
    const flip = (button, key) => button.addEventListener("click", () => {
      series.options[key] = !series.options[key];
      button.setAttribute("aria-pressed", String(series.options[key]));
      drawSeries(name, series);
    });
    flip(log, "log");
    flip(smooth, "smooth");
    const zoom = (steps) => {
      series.options.steps = steps;
      reset.hidden = !steps;
      drawSeries(name, series);
    };
    reset.addEventListener("click", () => zoom(null));
    svg.addEventListener("dblclick", () => zoom(null));
    zoomByDragging(svg, () => series.chart, zoom);
    metrics.series.set(name, series);
    // "loss" first, then by name
    const order = (n) => (n === "loss" ? "" : n);
    const after = [...charts.children].find((f) => order(f.dataset.metric) > order(name));
    charts.insertBefore(figure, after || null);
    chartsEmpty.hidden = true;
    return series;
  }

  // Drag across a chart: the steps between where it began and ended are shown alone.
  function zoomByDragging(svg, chart, zoom) {
    let from = null;
    let band = null;
    svg.addEventListener("pointerdown", (event) => {
      if (!chart() || event.button !== 0) return;
      from = event.clientX;
      svg.setPointerCapture(event.pointerId);
      band = document.createElementNS("http://www.w3.org/2000/svg", "rect");
      band.setAttribute("class", "zoom-band");
    });
    svg.addEventListener("pointermove", (event) => {
      if (from === null) return;
      const box = svg.getBoundingClientRect();
      const scale = svg.viewBox.baseVal.width / box.width;
      const [a, b] = [from, event.clientX].map((x) => (x - box.left) * scale).sort((p, q) => p - q);
      band.setAttribute("x", a.toFixed(1));
      band.setAttribute("width", (b - a).toFixed(1));
      band.setAttribute("y", "0");
      band.setAttribute("height", String(svg.viewBox.baseVal.height));
      if (!band.parentNode) svg.append(band);
    });
    svg.addEventListener("pointerup", (event) => {
      if (from === null) return;
      const [a, b] = [from, event.clientX].map((x) => chart().stepAt(x)).sort((p, q) => p - q);
      const dragged = Math.abs(event.clientX - from) > 4;
      from = null;
      band?.remove();
      if (dragged && b - a >= 1) zoom([Math.floor(a), Math.ceil(b)]);
    });
  }

  function drawSeries(name, series) {
    series.chart = draw(series.svg, name, series.points, series.options);
    series.log.disabled = !loggable(series.points);
  }

  function redraw() {
    metrics.frame = 0;
    for (const name of metrics.dirty) {
      const series = metrics.series.get(name);
      drawSeries(name, series);
      const [step, value] = series.points[series.points.length - 1];
      series.last.textContent = `${format(value)} at step ${step}`;
    }
    metrics.dirty.clear();
  }

  // The charts are as wide as the page: drawn again when it changes width.
  new ResizeObserver(() => {
    for (const name of metrics.series.keys()) metrics.dirty.add(name);
    if (metrics.dirty.size && !metrics.frame) metrics.frame = requestAnimationFrame(redraw);
  }).observe(charts);

  function receiveRecords(records) {
    for (const record of records) {
      if (!record || typeof record.step !== "number" || !record.metrics) continue;
      for (const [name, value] of Object.entries(record.metrics)) {
        if (typeof value !== "number" || !Number.isFinite(value)) continue;
        seriesFor(name).points.push([record.step, value]);
        metrics.dirty.add(name);
      }
    }
    if (metrics.dirty.size && !metrics.frame) metrics.frame = requestAnimationFrame(redraw);
  }

  function startMetrics(worker) {
    closeSocket(metrics.socket);
    metrics.series.clear();
    metrics.dirty.clear();
    charts.replaceChildren();
    chartsEmpty.hidden = false;
    metrics.socket = open(`${base}metrics/`, {
      params: { worker, from: 0 },
      onMessage(message) {
        if (message.type === "metrics") receiveRecords(message.records);
      },
      onRefused(error) { chartsEmpty.textContent = error?.message || "no metrics"; },
    });
  }

  byId("metrics-worker")?.addEventListener("change", (event) => startMetrics(event.target.value));
  startMetrics(root.dataset.metricsWorker);

  // -- the dataset: each pass's tasks, refreshed while the job runs ----------------------------

  const dataset = byId("dataset");
  function showPasses(report) {
    const rows = report.passes.map((pass) => {
      const row = document.createElement("tr");
      row.dataset.pass = pass.pass;
      const progress = document.createElement("progress");
      progress.max = pass.total;
      progress.value = pass.done;
      progress.textContent = `${pass.done} of ${pass.total}`;
      const cells = [`${pass.pass + 1} of ${report.total_passes}`, progress,
        pass.done, pass.leased, pass.waiting, pass.set_aside];
      cells.forEach((value, i) => {
        const cell = document.createElement("td");
        if (i >= 2) cell.className = "num";
        if (value instanceof Node) cell.append(value); else cell.textContent = value;
        row.append(cell);
      });
      return row;
    });
    if (rows.length) byId("passes").replaceChildren(...rows);
    byId("held").replaceChildren(...report.tasks.filter((t) => t.state === "leased").map((t) => {
      const tag = document.createElement("span");
      tag.className = "tag";
      tag.textContent = `trainer-${t.trainer}: task ${t.index}`;
      return tag;
    }));
  }
  async function refreshPasses() {
    if (!dataset || root.dataset.state === "gone") return;
    try {
      const response = await fetch(dataset.dataset.tasksUrl, { credentials: "same-origin" });
      if (response.ok) showPasses(await response.json());
    } catch (error) { /* the next round tries again */ }
    if (!FINAL.has(root.dataset.state)) setTimeout(refreshPasses, 2000);
  }
  if (dataset && !FINAL.has(root.dataset.state)) setTimeout(refreshPasses, 2000);
});
