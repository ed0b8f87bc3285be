// A small SVG line chart of one metric against the training step: axes with "nice" ticks,
// the curve, and its points while there are few of them. No library. Options: a log scale
// (when every value is positive), smoothing (an exponential moving average, as TensorBoard
// draws it, the raw curve faint behind) and a range of steps to show (a zoom).
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const HEIGHT = 220;
  const MIN_WIDTH = 280;
  const MARGIN = { top: 10, right: 14, bottom: 30, left: 58 };
  const MAX_DRAWN = 1500; // points drawn at most: a long run is thinned evenly
  const DOTS_UP_TO = 60; // points marked with a dot while there are at most this many
  const SMOOTHING = 0.8; // the moving average's weight of the past

  function el(name, attrs = {}, parent = null) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    if (parent) parent.appendChild(node);
    return node;
  }

  // 1, 2 or 5 times a power of ten, near range / count.
  function niceStep(range, count) {
    const raw = range / Math.max(1, count);
    const power = 10 ** Math.floor(Math.log10(raw));
    const fraction = raw / power;
    return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
  }

  // The domain widened to whole ticks, and the ticks in it.
  function ticks(lo, hi, count, { integer = false } = {}) {
    if (lo === hi) {
      const pad = integer ? 1 : Math.abs(lo) * 0.1 || 1;
      lo -= pad;
      hi += pad;
    }
    let step = niceStep(hi - lo, count);
    if (integer) step = Math.max(1, Math.round(step));
    const start = Math.floor(lo / step) * step;
    const end = Math.ceil(hi / step) * step;
    const values = [];
    for (let v = start; v <= end + step / 2; v += step) values.push(Number(v.toPrecision(12)));
    return { lo: start, hi: end, values };
  }

  function format(value) {
    const size = Math.abs(value);
    if (value !== 0 && (size >= 1e5 || size < 1e-3)) return value.toExponential(1);
    return String(Number(value.toPrecision(4)));
  }

  function thin(points) {
    if (points.length <= MAX_DRAWN) return points;
    const every = points.length / MAX_DRAWN;
    const kept = [];
    for (let i = 0; i < MAX_DRAWN; i++) kept.push(points[Math.floor(i * every)]);
    kept.push(points[points.length - 1]);
    return kept;
  }

  function extent(points, index) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const point of points) {
      if (point[index] < lo) lo = point[index];
      if (point[index] > hi) hi = point[index];
    }
    return [lo, hi];
  }

  // The points with values smoothed: each the moving average of those before it, debiased
  // at the start (TensorBoard's), so the first points are not pulled towards zero;
  // `weight` is the past's (0: no smoothing).
  function smoothed(points, weight = SMOOTHING) {
    let average = 0;
    return points.map(([step, value], i) => {
      average = average * weight + value * (1 - weight);
      return [step, weight ? average / (1 - weight ** (i + 1)) : value];
    });
  }

  // Whether a log scale can show every point (all values positive).
  function loggable(points) {
    return points.length > 0 && points.every(([, v]) => v > 0);
  }

  // Draw `points` ([step, value], in the order reported) into `svg`, replacing what was
  // there, as wide as the svg is on the page. `options`: { log, smooth, steps: [lo, hi] }.
  function draw(svg, name, points, options = {}) {
    const width = Math.max(MIN_WIDTH, Math.round(svg.clientWidth || svg.parentNode?.clientWidth
      || 0) || 360);
    const log = Boolean(options.log) && loggable(points);
    const range = options.steps;
    const shown = range ? points.filter(([s]) => s >= range[0] && s <= range[1]) : points;
    svg.replaceChildren();
    svg.setAttribute("viewBox", `0 0 ${width} ${HEIGHT}`);
    svg.setAttribute("role", "img");
    svg.dataset.points = String(points.length);
    svg.dataset.shown = String(shown.length);
    svg.dataset.scale = log ? "log" : "linear";
    svg.dataset.smooth = options.smooth ? "on" : "off";
    const last = points[points.length - 1];
    el("title", {}, svg).textContent = name;
    el("desc", {}, svg).textContent = points.length
      ? `${name} against step: ${points.length} points, last ${format(last[1])} at step ${last[0]}`
      : `${name}: no points yet`;
    if (!shown.length) return null;

    const curve = options.smooth ? smoothed(shown) : shown;
    const value = log ? Math.log10 : (v) => v;
    const [steps, values] = [extent(shown, 0), extent(curve.concat(shown), 1).map(value)];
    const x = range ? { lo: range[0], hi: range[1], values: ticks(range[0], range[1], 5,
      { integer: true }).values.filter((v) => v >= range[0] && v <= range[1]) }
      : ticks(steps[0], steps[1], 5, { integer: true });
    if (x.lo === x.hi) { x.lo -= 1; x.hi += 1; }
    const y = log ? logTicks(values[0], values[1]) : ticks(values[0], values[1], 4);
    const left = MARGIN.left;
    const right = width - MARGIN.right;
    const top = MARGIN.top;
    const bottom = HEIGHT - MARGIN.bottom;
    const sx = (v) => left + ((v - x.lo) / (x.hi - x.lo)) * (right - left);
    const sy = (v) => bottom - ((value(v) - y.lo) / (y.hi - y.lo)) * (bottom - top);

    const axes = el("g", { class: "axes" }, svg);
    for (const v of y.values) {
      const py = sy(log ? 10 ** v : v).toFixed(1);
      el("line", { class: "grid", x1: left, x2: right, y1: py, y2: py }, axes);
      el("text", { class: "tick y", x: left - 6, y: py, "text-anchor": "end",
        "dominant-baseline": "middle" }, axes).textContent = format(log ? 10 ** v : v);
    }
    for (const v of x.values) {
      const px = sx(v).toFixed(1);
      el("line", { class: "tick-mark", x1: px, x2: px, y1: bottom, y2: bottom + 4 }, axes);
      el("text", { class: "tick x", x: px, y: bottom + 16, "text-anchor": "middle" }, axes)
        .textContent = format(v);
    }
    el("line", { class: "axis", x1: left, x2: right, y1: bottom, y2: bottom }, axes);
    el("line", { class: "axis", x1: left, x2: left, y1: top, y2: bottom }, axes);
    el("text", { class: "label", x: right, y: HEIGHT - 2, "text-anchor": "end" }, axes)
      .textContent = "step";

    const line = (drawn) => thin(drawn).map(([s, v], i) =>
      `${i ? "L" : "M"}${sx(s).toFixed(1)},${sy(v).toFixed(1)}`).join("");
    if (options.smooth) el("path", { class: "curve raw", d: line(shown) }, svg);
    el("path", { class: "curve", d: line(curve) }, svg);
    const dots = el("g", { class: "points" }, svg);
    const marked = shown.length <= DOTS_UP_TO ? curve : [curve[curve.length - 1]];
    for (const [s, v] of marked) {
      el("circle", { cx: sx(s).toFixed(1), cy: sy(v).toFixed(1), r: 2.5 }, dots);
    }
    // Where on the svg a step is, and back: for zooming by dragging across it.
    const scale = width / (svg.getBoundingClientRect().width || width);
    return {
      stepAt(clientX) {
        const px = (clientX - svg.getBoundingClientRect().left) * scale;
        return x.lo + ((Math.min(right, Math.max(left, px)) - left) / (right - left))
          * (x.hi - x.lo);
      },
    };
  }

  // Ticks of a log scale (in log10 units): the powers of ten the values span (at least one).
  function logTicks(lo, hi) {
    let start = Math.floor(lo);
    let end = Math.ceil(hi);
    if (start === end) { start -= 1; end += 1; }
    const values = [];
    const every = Math.max(1, Math.ceil((end - start) / 5));
    for (let v = start; v <= end; v += every) values.push(v);
    return { lo: start, hi: end, values };
  }

  window.PaddleCloudChart = { draw, ticks, logTicks, format, loggable, smoothed };
})();
