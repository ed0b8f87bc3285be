// The compare page's curves: one metric of up to 20 jobs on one canvas (no element per
// point), each curve thinned per pixel column to the first, lowest, highest and last value
// there, so 20 runs of 10 000 points draw as fast as 20 of a thousand. Options: the metric
// (the first one's curves come with the page, others from /api/v1/compare/), step or time
// since the job's first report along x, smoothing (the moving average chart.js draws, its
// weight a slider) and a log scale.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const PC = window.PaddleCloud;
  const Chart = window.PaddleCloudChart;
  const root = document.getElementById("compare");
  const canvas = document.getElementById("compare-canvas");
  if (!root || !canvas) return;
  const names = root.dataset.jobs.split(",");
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
  let series = []; // [{job, step, time, value}] of the chosen metric
  let frame = 0;

  document.querySelectorAll("#compare-legend li").forEach((item, i) => {
    item.querySelector(".swatch").style.background = color(i);
  });

  // [x, value] of one job's points along the chosen axis (time: seconds since its first
  // report; points without a time are left out there).
  function points(one, along) {
    const out = [];
    if (along === "time") {
      const start = one.time.find((t) => t !== null);
      for (let i = 0; i < one.value.length; i++) {
        if (one.time[i] !== null) out.push([one.time[i] - start, one.value[i]]);
      }
    } else {
      for (let i = 0; i < one.value.length; i++) out.push([one.step[i], one.value[i]]);
    }
    return out;
  }

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
    const along = tools.x.value;
    const weight = Number(tools.smoothing.value);
    const all = series.map((one) => points(one, along));
    const log = tools.log.checked && all.some((p) => p.length)
      && all.every((p) => !p.length || Chart.loggable(p));
    tools.log.setCustomValidity(tools.log.checked && !log ? "a value is 0 or less" : "");
    const curves = all.map((p) => (weight ? Chart.smoothed(p, weight) : p));
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
    const total = all.reduce((n, p) => n + p.length, 0);
    if (!total) {
      canvas.dataset.points = "0";
      canvas.dataset.drawn = "0";
      status.textContent = `no job reported ${tools.metric.value}`;
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

    canvas.dataset.metric = tools.metric.value;
    canvas.dataset.points = String(total);
    canvas.dataset.drawn = String(drawn);
    canvas.dataset.scale = log ? "log" : "linear";
    canvas.dataset.along = along;
    canvas.dataset.ms = (performance.now() - started).toFixed(1);
    canvas.setAttribute("aria-label", `${tools.metric.value} of ${series.length} jobs along `
      + `${along}: ${total} points`);
    status.textContent = tools.log.checked && !log
      ? "log scale off: a value is 0 or less" : "";
  }

  function redraw() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function show(metric, data) {
    series = data;
    for (const one of series) {
      const item = document.querySelector(
        `#compare-legend li[data-job="${CSS.escape(one.job)}"] [data-field="points"]`);
      if (item) item.textContent = `${one.value.length} points`;
    }
    draw();
    canvas.dataset.loaded = metric;
  }

  async function load() {
    const metric = tools.metric.value;
    status.textContent = `loading ${metric}…`;
    canvas.dataset.loaded = "";
    try {
      const data = await PC.api(`/api/v1/compare/?jobs=${encodeURIComponent(names.join(","))}`
        + `&metric=${encodeURIComponent(metric)}`);
      if (tools.metric.value !== metric) return; // another was chosen meanwhile
      show(metric, data.series);
    } catch (error) {
      status.textContent = error.message;
    }
  }

  tools.metric.addEventListener("change", load);
  tools.x.addEventListener("change", redraw);
  tools.log.addEventListener("change", redraw);
  tools.smoothing.addEventListener("input", () => {
    tools.smoothingShown.textContent = tools.smoothing.value;
    redraw();
  });
  window.addEventListener("resize", redraw);
  // The first metric's curves came with the page (root.dataset.metric's).
  const first = document.getElementById("compare-series");
  if (first && tools.metric.value === root.dataset.metric) {
    show(root.dataset.metric, JSON.parse(first.textContent));
  } else {
    load();
  }
});
