// The live chart of a distributed cell: an anywidget module.
//
// The kernel sends only new points, as custom messages: {type: "add", traces} for new
// traces and {type: "extend", indices, x, y} for new points of existing ones; the
// layout (panels) is the synced `figure_layout`. The points are kept per model (not per
// view), so a view rendered later, or twice, draws them all. plotly.js itself is a model
// of its own (`plotly`, made once per kernel), evaluated once per page.
//
// Why an update is cheap: plotly lays out and redraws the whole figure on any change of
// its data (`extendTraces` included), so what it is given is what an update costs. It
// gets at most one point per pixel of a trace's panel (minMaxBuckets), whatever the
// history's length, and no text it would measure again each time: the legend and the
// panels' titles (the layout's annotations) are HTML over and under the plot, laid out
// by the browser once, and the axes' tick labels are not checked against the edges
// (`ticklabeloverflow`, in live_view.py).

const charts = new Map();
const LIBRARIES = Symbol.for("jupyter_air.plotly");

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

// What plotly is given: each trace cut to its panel's width in pixels, over the range
// the panel shows (the data's, or the user's zoom).
export function drawn(plot, traces, hidden = new Set()) {
  const full = plot._fullLayout;
  return traces.map((trace) => {
    const axis = full?.[`xaxis${trace.xaxis.slice(1)}`];
    const pixels = Math.max(40, Math.round(axis?._length ?? plot.clientWidth));
    const visible = hidden.has(trace.legendgroup) ? "legendonly" : true;
    // Typed arrays: plotly takes them as they are on a linear axis, where it converts
    // an array's every value (a fifth of an update); a copy, as plotly writes into it.
    const typed = (x, y) => ({ ...trace, x: Float64Array.from(x), y: Float64Array.from(y), visible });
    if (trace.x.length <= pixels) return typed(trace.x, trace.y);
    let lo = trace.x[0];
    let hi = trace.x[trace.x.length - 1];
    if (axis && axis.autorange === false) [lo, hi] = axis.range.map(axis.r2l);
    return typed(...minMaxBuckets(trace.x, trace.y, lo, hi, Math.floor(pixels / 2)));
  });
}

async function plotlyOf(model) {
  const ref = model.get("plotly");
  const library = await model.widget_manager.get_model(ref.slice("IPY_MODEL_".length));
  const loaded = (globalThis[LIBRARIES] ??= new Map());
  const version = library.get("version");
  if (!loaded.has(version)) {
    const shim = "const module = { exports: {} };\nconst exports = module.exports;\n";
    const source = `${shim}${library.get("source")}\nexport default module.exports;\n`;
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
  model.on("change:figure_layout", () => {
    for (const view of chart.views) view.draw();
  });
}

// The legend, in HTML: an entry per trace, a click hides or shows its group (a metric's
// attempts, a GPU's utilization and memory). Plotly's own would be laid out again, text
// measured, on every update.
function drawLegend(legend, chart, redraw) {
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

// The panels' titles (the layout's annotations: `<b>title</b>` at a panel's top left
// corner, in paper coordinates) as HTML over the plot, placed again only when the
// titles or the plot's size change. Plotly would draw and measure them on every update.
function placeTitles(titles, plot, annotations) {
  const size = plot._fullLayout._size;
  const placed = JSON.stringify([size, annotations]);
  if (titles.dataset.placed === placed) return;
  titles.dataset.placed = placed;
  titles.replaceChildren(
    ...annotations.map((annotation) => {
      const title = document.createElement("b");
      title.className = "jp-air-LiveChart-title";
      // The text is plotly's (escaped) HTML: only its text is shown.
      title.textContent = new DOMParser().parseFromString(annotation.text, "text/html").body.textContent;
      const left = size.l + annotation.x * size.w;
      const bottom = size.t + (1 - annotation.y) * size.h - 2;
      title.style.cssText = `position: absolute; left: ${left}px; top: ${bottom}px; transform: translateY(-100%); white-space: nowrap; pointer-events: none`;
      return title;
    }),
  );
}

async function render({ model, el }) {
  const chart = chartOf(model);
  const plot = document.createElement("div");
  plot.className = "jp-air-LiveChart-plot";
  const titles = document.createElement("div");
  titles.className = "jp-air-LiveChart-titles";
  titles.style.cssText = "font: 12px 'Open Sans', verdana, arial, sans-serif; color: #444";
  const legend = document.createElement("div");
  legend.className = "jp-air-LiveChart-legend";
  legend.style.cssText = "padding: 0 0 6px 55px; font-size: 12px; line-height: 20px";
  el.classList.add("jp-air-LiveChart");
  el.style.position = "relative"; // the titles' frame
  el.append(plot, titles, legend);
  const Plotly = await plotlyOf(model);
  let revision = 0;
  let legendOf = null;
  const view = {
    // Returns plotly's promise (the benchmark waits on it).
    draw() {
      const shown = `${chart.traces.length} ${[...chart.hidden]}`;
      if (shown !== legendOf) {
        legendOf = shown;
        drawLegend(legend, chart, () => {
          for (const other of chart.views) other.draw();
        });
      }
      // A copy: plotly writes its computed ranges into the layout it is given.
      const { annotations = [], ...figure } = structuredClone(model.get("figure_layout"));
      const layout = { ...figure, datarevision: ++revision };
      // Not `responsive`: plotly then measures its container's style on every redraw,
      // which doubled the cost of an update; the ResizeObserver below resizes it.
      const config = { displaylogo: false };
      return Plotly.react(plot, drawn(plot, chart.traces, chart.hidden), layout, config).then(() =>
        placeTitles(titles, plot, annotations),
      );
    },
  };
  await view.draw();
  let width = plot.clientWidth;
  const resized = new ResizeObserver(() => {
    if (plot.clientWidth === width || !plot.clientWidth) return;
    width = plot.clientWidth;
    Plotly.Plots.resize(plot).then(() => view.draw()); // more pixels, more points
  });
  resized.observe(plot);
  // A zoom changes the pixels' span: cut the traces again for it.
  plot.on("plotly_relayout", (change) => {
    if (Object.keys(change).some((key) => key.startsWith("xaxis"))) view.draw();
  });
  chart.views.add(view);
  return () => {
    resized.disconnect();
    chart.views.delete(view);
    Plotly.purge(plot);
  };
}

export default { initialize, render };
