// The live chart of a distributed cell: an anywidget module.
//
// The kernel sends only new points, as custom messages: {type: "add", traces} for new
// traces and {type: "extend", indices, x, y} for new points of existing ones; the
// panels are the synced `chart_layout` (RunChart.live_layout). The points are kept per
// model (not per view), so a view rendered later, or twice, draws them all. The chart
// library, uPlot, is a model of its own (`library`, made once per kernel), evaluated
// once per page.
//
// Why uPlot and not plotly (which draws the figure the cell keeps when the job ends):
// plotly lays out and redraws its whole figure, every axis and tick label, on any change
// of its data, and for the four panels of a job with 8 GPUs that alone took about the
// 30 ms an update may take. uPlot draws each panel's lines on a canvas and its axes
// without laying out a document. A trace longer than its panel is wide is cut to the
// lowest and the highest point of each 2-pixel bucket (minMaxBuckets), whatever the
// history's length; the legend and the panels' titles are HTML, laid out by the
// browser only when they change.

const charts = new Map();
const LIBRARIES = Symbol.for("jupyter_air.chart_library");
// Pixels of the x axis under a panel's plot area, of the y axis left of it, between
// two panels of a row.
const X_AXIS = 32;
const Y_AXIS = 50;
const GAP = 24;
const FONT = "11px 'Open Sans', verdana, arial, sans-serif";

function chartOf(model) {
  const id = model.get("chart_id");
  if (!charts.has(id)) charts.set(id, { traces: [], hidden: new Set(), views: new Set(), revision: 0 });
  return charts.get(id);
}

// Keep a message's points if it follows those kept (its `revision` is the next). The
// messages that came before this module ran are lost to it, so it asks the kernel for
// the history, all the points up to a revision, and keeps what follows it; a gap asks
// again. Returns whether the chart changed.
function keep(chart, msg, ask) {
  if (msg.type === "history") {
    if (msg.revision < chart.revision) return false;
    chart.traces = msg.traces.map((trace) => ({ ...trace, x: trace.x.slice(), y: trace.y.slice() }));
    chart.revision = msg.revision;
    chart.asked = false;
    return true;
  }
  if (msg.revision <= chart.revision) return false; // in the history already
  if (msg.revision > chart.revision + 1) {
    if (!chart.asked) ask(); // missed some: the history brings them
    chart.asked = true;
    return false;
  }
  chart.revision = msg.revision;
  if (msg.type === "add") {
    for (const trace of msg.traces) chart.traces.push({ ...trace, x: trace.x.slice(), y: trace.y.slice() });
  } else if (msg.type === "extend") {
    msg.indices.forEach((index, i) => {
      const trace = chart.traces[index];
      for (let j = 0; j < msg.x[i].length; j++) {
        trace.x.push(msg.x[i][j]);
        trace.y.push(msg.y[i][j]);
      }
    });
  }
  return true;
}

// The lowest and the highest point of each of `buckets` equal spans of [lo, hi], in x
// order, and the last point: a line through them has the extremes of the whole series
// (a spike, a GPU at 0 %), where a stride or an average would hide them. Two points a
// bucket and a bucket per two pixels: no more points than pixels.
export function minMaxBuckets(x, y, lo, hi, buckets) {
  const width = (hi - lo) / buckets || 1;
  const outX = [];
  const outY = [];
  const flush = (a, b) => {
    for (const i of a === b ? [a] : [Math.min(a, b), Math.max(a, b)]) {
      outX.push(x[i]);
      outY.push(y[i]);
    }
  };
  let bucket = null;
  let low = 0;
  let high = 0;
  for (let i = 0; i < x.length; i++) {
    const b = Math.floor((x[i] - lo) / width);
    if (b !== bucket) {
      if (bucket !== null) flush(low, high);
      bucket = b;
      low = high = i;
    } else if (y[i] < y[low]) low = i;
    else if (y[i] > y[high]) high = i;
  }
  if (bucket !== null) flush(low, high);
  const last = x.length - 1;
  if (last >= 0 && outX[outX.length - 1] !== x[last]) {
    outX.push(x[last]);
    outY.push(y[last]);
  }
  return [outX, outY];
}

// A panel's traces, each cut to its panel's pixels over [lo, hi] (minMaxBuckets), on
// one x as uPlot draws them: the union of their x, and each trace's y there, null where
// it has no point (a line spans the gap). A node's GPUs are sampled together, so while
// their traces are uncut the union is each one's x.
export function aligned(traces, lo, hi, buckets) {
  const cut = traces.map((t) => (t.x.length > 2 * buckets ? minMaxBuckets(t.x, t.y, lo, hi, buckets) : [t.x, t.y]));
  const first = cut[0]?.[0] ?? [];
  const same = cut.every(([x]) => x.length === first.length && x.every((v, i) => v === first[i]));
  const xs = same ? first : [...new Set(cut.flatMap(([x]) => x))].sort((a, b) => a - b);
  const columns = cut.map(([x, y]) => {
    if (same) return Float64Array.from(y);
    const at = new Map(x.map((v, i) => [v, y[i]]));
    return xs.map((v) => at.get(v) ?? null);
  });
  return [Float64Array.from(xs), ...columns];
}

async function libraryOf(model) {
  const ref = model.get("library");
  const library = await model.widget_manager.get_model(ref.slice("IPY_MODEL_".length));
  const loaded = (globalThis[LIBRARIES] ??= new Map());
  const version = library.get("version");
  if (!loaded.has(version)) {
    const style = document.createElement("style");
    style.textContent = library.get("css");
    document.head.append(style);
    // uPlot's browser build defines `uPlot`: a module of it exports that.
    const source = `${library.get("source")}\nexport default uPlot;\n`;
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    loaded.set(
      version,
      import(/* webpackIgnore: true */ url).then((mod) => {
        URL.revokeObjectURL(url);
        return mod.default;
      }),
    );
  }
  return loaded.get(version);
}

function initialize({ model }) {
  const chart = chartOf(model);
  const ask = () => model.send({ type: "history" });
  // Returns the views' draws (the benchmark waits on them).
  model.on("msg:custom", (msg) => keep(chart, msg, ask) && Promise.all([...chart.views].map((view) => view.draw())));
  // The kernel answers on a subshell (JupyterLab), or once the cell ends where a
  // frontend has none: then the widget is closed and nothing answers, and the chart
  // shows what came after this.
  if (chart.revision === 0) {
    chart.asked = true;
    ask();
  }
  model.on("change:chart_layout", () => {
    for (const view of chart.views) view.draw();
  });
}

// The legend, in HTML: an entry per trace, a click hides or shows its group (a metric's
// attempts, a GPU's utilization and memory). None, and no room, before the first trace.
function drawLegend(legend, chart, redraw) {
  legend.style.display = chart.traces.length ? "" : "none";
  legend.replaceChildren(
    ...chart.traces.map((trace) => {
      const item = document.createElement("span");
      item.className = "jp-air-LiveChart-legendItem";
      item.dataset.group = trace.legendgroup;
      item.style.cssText = "cursor: pointer; margin-right: 14px; white-space: nowrap";
      item.style.opacity = chart.hidden.has(trace.legendgroup) ? "0.4" : "1";
      const swatch = document.createElement("span");
      const dash = trace.line.dash === "solid" ? "solid" : "dotted";
      swatch.style.cssText = `display: inline-block; width: 18px; margin: 0 4px 3px 0; border-top: 2px ${dash} ${trace.line.color}`;
      item.append(swatch, trace.name);
      item.addEventListener("click", () => {
        const group = trace.legendgroup;
        if (!chart.hidden.delete(group)) chart.hidden.add(group);
        redraw();
      });
      return item;
    }),
  );
}

// The time of day of a time panel's x, 24-hour: the kernel sends the local time as
// milliseconds of a UTC clock (as plotly's date axis shows them), so it is read as UTC.
// To the millisecond where ticks are less than a second apart (a sub-second job), to the
// minute where they are a minute or more apart.
function timeOfDay(ms, step = 1000) {
  return new Date(ms).toISOString().slice(11, step < 1000 ? 23 : step < 60_000 ? 19 : 16);
}

const TIME_STEPS = [
  0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
].map((s) => s * 1000);
const STEPS = Array.from({ length: 10 }, (_, e) => [1, 2, 5].map((m) => m * 10 ** e)).flat();

// Tick labels with the decimals of the step between ticks, so that 0.0005 and 0.001
// read apart (uPlot's own rounds both to 0.001).
function numbers(u, splits, axis, space, incr) {
  let digits = 0;
  while (digits < 12 && Math.abs(Math.round(incr * 10 ** digits) - incr * 10 ** digits) > 1e-6) digits++;
  const format = { minimumFractionDigits: digits, maximumFractionDigits: digits };
  return splits.map((v) => v.toLocaleString("en-US", format));
}

function axes(spec) {
  const common = { font: FONT, stroke: "#444", grid: { stroke: "#eee", width: 1 }, ticks: { stroke: "#ccc", width: 1, size: 4 } };
  const x = spec.time
    ? {
        ...common,
        // wider apart for labels to the millisecond (a span of seconds)
        space: (u, axis, min, max) => (max - min < 5000 ? 90 : 70),
        incrs: TIME_STEPS,
        values: (u, splits, axis, space, incr) => splits.map((v) => timeOfDay(v, incr)),
      }
    : { ...common, space: 50, incrs: STEPS, values: numbers };
  return [
    { ...x, size: X_AXIS },
    { ...common, size: Y_AXIS, space: 30, values: numbers },
  ];
}

// One panel: its title over a uPlot chart of its traces. `state` holds what changes
// between draws (the panel's spec: its fixed ranges; whether the user zoomed).
function makePanel(uPlot, spec, traces, hidden, width, height) {
  const el = document.createElement("div");
  el.className = "jp-air-LiveChart-panel";
  el.style.cssText = `width: ${width}px; position: relative`;
  const head = document.createElement("div");
  head.style.cssText = `padding-left: ${Y_AXIS}px; height: 18px; white-space: nowrap; overflow: hidden; font-size: 12px`;
  const title = document.createElement("b");
  title.className = "jp-air-LiveChart-title";
  title.textContent = spec.title;
  const readout = document.createElement("span");
  readout.className = "jp-air-LiveChart-readout";
  readout.style.cssText = "margin-left: 10px; color: #666";
  head.append(title, readout);
  el.append(head);
  const state = { spec, zoomed: false, ours: false };
  // The panel's fixed range where it has one (a time panel: the job's start to its last
  // sample), except for a zoom: the user's own span (no `fill` of ours under way).
  const range = (u, min, max) => {
    if (state.spec.x && state.ours && !state.zoomed) return state.spec.x;
    return min === max ? [min - 1, max + 1] : [min, max];
  };
  const yRange = (u, min, max) => state.spec.y ?? uPlot.rangeNum(min ?? 0, max ?? 1, 0.1, true);
  const u = new uPlot(
    {
      width,
      height,
      ms: 1,
      tzDate: (ms) => uPlot.tzDate(new Date(ms), "Etc/UTC"),
      legend: { show: false },
      cursor: { drag: { x: true, y: false }, points: { show: false } },
      scales: { x: { time: spec.time, range }, y: { range: yRange } },
      axes: axes(spec),
      series: [
        {},
        ...traces.map((trace) => ({
          label: trace.name,
          stroke: trace.line.color,
          // A pixel wide where the panel's traces are many and dense (a software
          // renderer drew 1.5 px wide lines for three times the CPU).
          width: trace.meta.metric ? 1.5 : 1,
          dash: trace.line.dash === "solid" ? undefined : [2, 3],
          spanGaps: true,
          show: !hidden.has(trace.legendgroup),
          points: { size: 5, fill: trace.line.color },
        })),
      ],
      hooks: {
        // A zoom (a drag over the plot): the next updates keep it, cut for its span.
        setScale: [
          (self, key) => {
            if (key === "x" && !state.ours) {
              state.zoomed = true;
              setTimeout(() => state.redraw?.()); // not inside uPlot's own update
            }
          },
        ],
        setCursor: [(self) => readOut(self, readout, spec)],
        draw: [(self) => drawMarks(self, state.spec.marks ?? [])],
      },
    },
    null,
    el,
  );
  // A double click shows the whole data again (after uPlot's own handler).
  u.over.addEventListener("dblclick", () =>
    setTimeout(() => {
      state.zoomed = false;
      state.redraw?.();
    }),
  );
  el.uplot = u; // what the browser tests and the benchmark read
  return { el, u, state };
}

// A dashed line at each step where a retry resumed from a checkpoint, labelled at the
// top of the plot (the panel's spec says where: `marks`, [{x, label}]).
function drawMarks(u, marks) {
  const ctx = u.ctx;
  const { left, top, width, height } = u.bbox;
  for (const mark of marks) {
    // On a pixel's middle: a one-pixel line over two half pixels would be a pale smear.
    const x = Math.round(u.valToPos(mark.x, "x", true)) + 0.5;
    if (x < left || x > left + width) continue;
    ctx.save();
    ctx.strokeStyle = "#888888";
    ctx.fillStyle = "#666666";
    ctx.lineWidth = Math.round(devicePixelRatio);
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
    ctx.font = `${10 * devicePixelRatio}px sans-serif`;
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText(mark.label, x + 3 * devicePixelRatio, top + 2 * devicePixelRatio);
    ctx.restore();
  }
}

// What the pointer is over: the trace closest to it, its value and its x.
function readOut(u, readout, spec) {
  const i = u.cursor.idx;
  let best = null;
  if (i != null) {
    for (let s = 1; s < u.series.length; s++) {
      const y = u.data[s][i];
      if (!u.series[s].show || y == null) continue;
      const distance = Math.abs(u.valToPos(y, "y") - u.cursor.top);
      if (best === null || distance < best.distance) best = { s, y, distance };
    }
  }
  const x = i == null ? null : u.data[0][i];
  readout.textContent =
    best === null ? "" : `${u.series[best.s].label}: ${+best.y.toPrecision(4)} at ${spec.time ? timeOfDay(x) : `step ${x}`}`;
}

async function render({ model, el }) {
  const chart = chartOf(model);
  const grid = document.createElement("div");
  grid.className = "jp-air-LiveChart-plot";
  grid.style.cssText = "font: 12px 'Open Sans', verdana, arial, sans-serif; color: #444";
  const legend = document.createElement("div");
  legend.className = "jp-air-LiveChart-legend";
  legend.style.cssText = `padding: 6px 0 6px ${Y_AXIS}px; font-size: 12px; line-height: 20px`;
  el.classList.add("jp-air-LiveChart");
  // On white in any theme, as plotly's figure that replaces it: the axes are drawn in
  // fixed colors on a transparent canvas.
  el.style.cssText += "; background: #fff; color: #444";
  el.append(grid, legend);
  const uPlot = await libraryOf(model);
  let legendOf = null;
  let built = null; // what the panels were made for: a change of it makes them anew
  let panels = new Map(); // axis -> panel
  const redrawAll = () => {
    for (const other of chart.views) other.draw();
  };
  const view = {
    // Synchronous (uPlot draws in `batch`); a promise, as the benchmark waits on it.
    draw() {
      const shown = `${chart.traces.length} ${[...chart.hidden]}`;
      if (shown !== legendOf) {
        legendOf = shown;
        drawLegend(legend, chart, redrawAll);
      }
      const layout = model.get("chart_layout");
      const width = grid.clientWidth || 900;
      const of = (axis) => chart.traces.filter((t) => Number(t.xaxis.slice(1) || 1) === axis);
      const structure = JSON.stringify([
        width,
        layout.rows.map((row) => [row.height, row.panels.map((p) => [p.axis, p.title, p.time, of(p.axis).length])]),
        [...chart.hidden],
      ]);
      if (structure !== built) {
        built = structure;
        for (const panel of panels.values()) panel.u.destroy();
        panels = new Map();
        grid.replaceChildren(
          ...layout.rows.map((row) => {
            const line = document.createElement("div");
            line.style.cssText = `display: flex; gap: ${GAP}px; margin-bottom: 6px`;
            const each = Math.floor((width - GAP * (row.panels.length - 1)) / row.panels.length);
            for (const spec of row.panels) {
              const panel = makePanel(uPlot, spec, of(spec.axis), chart.hidden, each, row.height + X_AXIS);
              panel.traces = of(spec.axis);
              panel.state.redraw = () => fill(panel);
              panels.set(spec.axis, panel);
              line.append(panel.el);
            }
            return line;
          }),
        );
      }
      for (const row of layout.rows) {
        for (const spec of row.panels) {
          const panel = panels.get(spec.axis);
          panel.state.spec = spec;
          panel.traces = of(spec.axis);
        }
      }
      for (const panel of panels.values()) fill(panel);
      return Promise.resolve();
    },
  };
  // A panel's data, cut to its pixels over what it shows: the data's span, its fixed
  // range, or the user's zoom (kept, and cut anew, until a double click).
  function fill(panel) {
    const { u, state, traces } = panel;
    const xs = traces.flatMap((t) => (t.x.length ? [t.x[0], t.x[t.x.length - 1]] : []));
    if (!xs.length) return;
    let [lo, hi] = state.spec.x ?? [Math.min(...xs), Math.max(...xs)];
    if (state.zoomed) [lo, hi] = [u.scales.x.min, u.scales.x.max];
    const buckets = Math.max(20, Math.floor(u.bbox.width / devicePixelRatio / 2));
    state.ours = true;
    try {
      u.batch(() => u.setData(aligned(traces, lo, hi, buckets), !state.zoomed));
    } finally {
      state.ours = false;
    }
  }
  await view.draw();
  let width = grid.clientWidth;
  const resized = new ResizeObserver(() => {
    if (grid.clientWidth === width || !grid.clientWidth) return;
    width = grid.clientWidth;
    view.draw(); // more pixels, more points
  });
  resized.observe(grid);
  chart.views.add(view);
  return () => {
    resized.disconnect();
    chart.views.delete(view);
    for (const panel of panels.values()) panel.u.destroy();
  };
}

export default { initialize, render };
