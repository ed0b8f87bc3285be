// The compare page's curves: one metric of up to 20 jobs on one canvas (no element per
// point). The portal sends each curve thinned (jobs/curves.py: in each slice of x its first,
// lowest, highest and last point, at most `max_points` — twice the chart's width in pixels),
// so 20 runs of 10 000 points arrive as a few thousand each; the canvas then draws each one
// pixel column at a time the same way. Thinning depends on the axis and smoothing (the
// moving average is taken over every point, before thinning), so choosing the metric, step
// or time along x, or the smoothing asks the portal again (answers already had are kept);
// a log scale and a narrower window only redraw. The first metric's curves come with the
// page.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const PC = window.PaddleCloud;
  const Chart = window.PaddleCloudChart;
  const root = document.getElementById("compare");
  const canvas = document.getElementById("compare-canvas");
  if (!root || !canvas) return;
  const names = root.dataset.jobs.split(",");
  const served = Number(root.dataset.maxPoints) || 2400; // the page's curves' max_points
  const status = document.getElementById("compare-status");
  const tools = {
    metric: document.getElementById("compare-metric"),
    x: document.getElementById("compare-x"),
    smoothing: document.getElementById("compare-smoothing"),
    smoothingShown: document.getElementById("compare-smoothing-value"),
    log: document.getElementById("compare-log"),
  };
  const HEIGHT = 360;
  const MARGIN = { top: 12, right: 16, bottom: 34, left: 64 };
  // Tableau's 20 colours: one a job, in the order the jobs were picked.
  const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#a0cbe8", "#ffbe7d", "#ff9d9a", "#86bcb6",
    "#8cd17d", "#f1ce63", "#d4a6c8", "#fabfd2", "#d7b5a6", "#79706e"];
  const color = (i) => COLORS[i % COLORS.length];
  // What is drawn: {metric, x, smoothing, maxPoints, series: [{job, points, step, time,
  // value, smoothed?}]}, and the portal's answers by what was asked.
  let shown = { metric: "", x: "step", smoothing: 0, maxPoints: served, series: [] };
  const answers = new Map();
  const KEEP = 8; // answers kept (20 runs thinned to 2 400 points: about 1.4 MB each)
  let frame = 0;
  let pending = 0; // the slider's and the window's timer: one question when they stop

  document.querySelectorAll("#compare-legend li").forEach((item, i) => {
    item.querySelector(".swatch").style.background = color(i);
  });

  // [x, value] of one job's points along the axis it was thinned along (time: seconds since
  // its first report; points without a time are left out there), of its `key` (value, or
  // smoothed).
  function points(one, along, key = "value") {
    const out = [];
    const values = one[key];
    if (along === "time") {
      const start = one.time.find((t) => t !== null);
      for (let i = 0; i < values.length; i++) {
        if (one.time[i] !== null) out.push([one.time[i] - start, values[i]]);
      }
    } else {
      for (let i = 0; i < values.length; i++) out.push([one.step[i], values[i]]);
    }
    return out;
  }

  const plotWidth = () => Math.max(320, canvas.clientWidth || 640) - MARGIN.left
    - MARGIN.right;

  // What the options ask for: max_points at least twice the chart's width in pixels (in
  // steps of 400, so that a window resized a little asks nothing new).
  function wanted() {
    return {
      metric: tools.metric.value,
      x: tools.x.value,
      smoothing: Number(tools.smoothing.value),
      maxPoints: Math.max(served, Math.ceil((2 * plotWidth()) / 400) * 400),
    };
  }
  const key = (w) => `${w.metric}|${w.x}|${w.smoothing}|${w.maxPoints}`;

  // A path through the points, one pixel column at a time: where a column holds several,
  // its first, lowest, highest and last (so no spike is lost), else the point itself.
  function trace(ctx, pts, sx, sy) {
    let column = null;
    let first = 0;
    let low = 0;
    let high = 0;
    let last = 0;
    let started = false;
    let drawn = 0;
    const flush = () => {
      if (column === null) return;
      const ys = first === low && low === high && high === last ? [first]
        : [first, low, high, last];
      for (const y of ys) {
        if (started) ctx.lineTo(column, y);
        else { ctx.moveTo(column, y); started = true; }
        drawn++;
      }
    };
    for (const [x, v] of pts) {
      const px = Math.round(sx(x));
      const py = sy(v);
      if (px !== column) {
        flush();
        column = px;
        first = low = high = last = py;
      } else {
        if (py < low) low = py;
        if (py > high) high = py;
        last = py;
      }
    }
    flush();
    return drawn;
  }

  function draw() {
    frame = 0;
    const started = performance.now();
    const along = shown.x;
    const weight = shown.smoothing;
    const series = shown.series;
    const all = series.map((one) => points(one, along));
    const log = tools.log.checked && all.some((p) => p.length)
      && all.every((p) => !p.length || Chart.loggable(p));
    tools.log.setCustomValidity(tools.log.checked && !log ? "a value is 0 or less" : "");
    const curves = weight ? series.map((one) => points(one, along, "smoothed")) : all;
    const value = log ? Math.log10 : (v) => v;

    let [xlo, xhi, ylo, yhi] = [Infinity, -Infinity, Infinity, -Infinity];
    for (const p of all) {
      for (const [x, v] of p) {
        if (x < xlo) xlo = x;
        if (x > xhi) xhi = x;
        const y = value(v);
        if (y < ylo) ylo = y;
        if (y > yhi) yhi = y;
      }
    }
    const ratio = window.devicePixelRatio || 1;
    const width = Math.max(320, canvas.clientWidth || 640);
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(HEIGHT * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, HEIGHT);
    const total = series.reduce((n, one) => n + one.points, 0); // reported
    const sent = all.reduce((n, p) => n + p.length, 0);
    if (!sent) {
      canvas.dataset.points = "0";
      canvas.dataset.drawn = "0";
      status.textContent = `no job reported ${shown.metric}`;
      return;
    }
    const xt = Chart.ticks(xlo, xhi, 6, { integer: along === "step" });
    const yt = log ? Chart.logTicks(ylo, yhi) : Chart.ticks(ylo, yhi, 5);
    const [left, right, top, bottom] = [MARGIN.left, width - MARGIN.right, MARGIN.top,
      HEIGHT - MARGIN.bottom];
    const sx = (x) => left + ((x - xt.lo) / (xt.hi - xt.lo || 1)) * (right - left);
    const sy = (v) => bottom - ((value(v) - yt.lo) / (yt.hi - yt.lo || 1)) * (bottom - top);

    const styles = getComputedStyle(canvas);
    ctx.font = `10px ${styles.getPropertyValue("--mono") || "monospace"}`;
    ctx.fillStyle = "#6b7385";
    ctx.strokeStyle = "#e6e9f0";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of yt.values) {
      const y = sy(log ? 10 ** v : v);
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
      ctx.fillText(Chart.format(log ? 10 ** v : v), left - 6, y);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const v of xt.values) ctx.fillText(Chart.format(v), sx(v), bottom + 6);
    ctx.textAlign = "right";
    ctx.fillText(along === "step" ? "step" : "seconds since its first report", right,
      HEIGHT - 12);
    ctx.strokeStyle = "#9aa3b5";
    ctx.beginPath(); ctx.moveTo(left, top); ctx.lineTo(left, bottom); ctx.lineTo(right, bottom);
    ctx.stroke();

    ctx.save();
    ctx.beginPath(); ctx.rect(left, top, right - left, bottom - top); ctx.clip();
    ctx.lineJoin = "round";
    let drawn = 0;
    curves.forEach((p, i) => {
      if (weight) { // the raw curve faint behind the average
        ctx.globalAlpha = 0.2;
        ctx.strokeStyle = color(i);
        ctx.beginPath(); drawn += trace(ctx, all[i], sx, sy); ctx.stroke();
      }
      ctx.globalAlpha = 1;
      ctx.strokeStyle = color(i);
      ctx.lineWidth = 1.6;
      ctx.beginPath(); drawn += trace(ctx, p, sx, sy); ctx.stroke();
    });
    ctx.restore();

    canvas.dataset.metric = shown.metric;
    canvas.dataset.points = String(total);
    canvas.dataset.sent = String(sent);
    canvas.dataset.drawn = String(drawn);
    canvas.dataset.scale = log ? "log" : "linear";
    canvas.dataset.along = along;
    canvas.dataset.smoothing = String(weight);
    canvas.dataset.ms = (performance.now() - started).toFixed(1);
    canvas.setAttribute("aria-label", `${shown.metric} of ${series.length} jobs along `
      + `${along}: ${total} points`);
    status.textContent = tools.log.checked && !log
      ? "log scale off: a value is 0 or less" : "";
  }

  function redraw() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function show(w, data) {
    shown = { ...w, series: data };
    for (const one of data) {
      const item = document.querySelector(
        `#compare-legend li[data-job="${CSS.escape(one.job)}"] [data-field="points"]`);
      if (item) item.textContent = `${one.points} points`;
    }
    draw();
    canvas.dataset.loaded = w.metric;
  }

  // Draw what the options ask for: from an answer already had, else asking the portal.
  async function update() {
    const w = wanted();
    const asked = key(w);
    if (asked === key(shown)) { redraw(); return; }
    if (answers.has(asked)) { show(w, answers.get(asked)); return; }
    status.textContent = `loading ${w.metric}…`;
    if (w.metric !== shown.metric) canvas.dataset.loaded = "";
    try {
      const data = await PC.api(`/api/v1/compare/?jobs=${encodeURIComponent(names.join(","))}`
        + `&metric=${encodeURIComponent(w.metric)}&x=${w.x}&smoothing=${w.smoothing}`
        + `&max_points=${w.maxPoints}`);
      answers.set(asked, data.series);
      if (answers.size > KEEP) answers.delete(answers.keys().next().value);
      if (key(wanted()) !== asked) return; // another was chosen meanwhile
      status.textContent = "";
      show(w, data.series);
    } catch (error) {
      status.textContent = error.message;
    }
  }

  tools.metric.addEventListener("change", update);
  tools.x.addEventListener("change", update);
  tools.log.addEventListener("change", redraw);
  tools.smoothing.addEventListener("input", () => {
    tools.smoothingShown.textContent = tools.smoothing.value;
    clearTimeout(pending);
    pending = setTimeout(update, 150);
  });
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(update, 150);
  });
  // The first metric's curves came with the page (root.dataset.metric's, along step,
  // unsmoothed, thinned to the page's max_points).
  const first = document.getElementById("compare-series");
  const given = { metric: root.dataset.metric, x: "step", smoothing: 0, maxPoints: served };
  const now = wanted();
  if (first && now.metric === given.metric && now.x === given.x && !now.smoothing) {
    answers.set(key(given), JSON.parse(first.textContent));
    show(given, answers.get(key(given)));
  }
  if (key(now) !== key(shown)) update(); // a wider chart, or options the browser restored
});
