// The live chart of a distributed cell: an anywidget module, evaluated after plotly.js
// (live_view.py puts plotly's own bundle in front of it, inside a CommonJS shim).
//
// The kernel sends only new points, as custom messages: {type: "add", traces} for new
// traces and {type: "extend", indices, x, y} for new points of existing ones. They are
// kept per model (not per view), so a view rendered later, or twice, draws them all.
// The metric picker is drawn here: the kernel is busy following the job while it runs
// and could not answer a widget's events.

const Plotly = module.exports;
const charts = new Map();

function chartOf(model) {
  const id = model.get("chart_id");
  if (!charts.has(id)) {
    charts.set(id, { traces: [], hidden: new Set(), views: new Set() });
  }
  return charts.get(id);
}

function keep(chart, msg) {
  if (msg.type === "add") {
    for (const trace of msg.traces) {
      chart.traces.push({ ...trace, x: trace.x.slice(), y: trace.y.slice() });
    }
  } else if (msg.type === "extend") {
    msg.indices.forEach((index, i) => {
      const trace = chart.traces[index];
      for (let j = 0; j < msg.x[i].length; j++) {
        trace.x.push(msg.x[i][j]);
        trace.y.push(msg.y[i][j]);
      }
    });
  }
}

function visible(chart, trace) {
  return chart.hidden.has(trace.meta.key) ? "legendonly" : true;
}

function initialize({ model }) {
  const chart = chartOf(model);
  model.on("msg:custom", (msg) => {
    keep(chart, msg);
    for (const view of chart.views) view.apply(msg);
  });
}

function render({ model, el }) {
  const chart = chartOf(model);
  const picker = document.createElement("div");
  picker.className = "jp-air-LiveChart-metrics";
  const plot = document.createElement("div");
  plot.className = "jp-air-LiveChart-plot";
  el.classList.add("jp-air-LiveChart");
  el.append(picker, plot);

  const copy = (trace) => ({ ...trace, x: trace.x.slice(), y: trace.y.slice(), visible: visible(chart, trace) });
  const drawPicker = () => {
    const keys = [...new Set(chart.traces.filter((t) => t.meta.metric).map((t) => t.meta.key))];
    const shown = [...picker.querySelectorAll("input")].map((input) => input.value);
    for (const key of keys.filter((k) => !shown.includes(k))) {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = key;
      box.checked = !chart.hidden.has(key);
      box.addEventListener("change", () => {
        if (box.checked) chart.hidden.delete(key);
        else chart.hidden.add(key);
        const indices = chart.traces.flatMap((t, i) => (t.meta.key === key ? [i] : []));
        Plotly.restyle(plot, { visible: box.checked ? true : "legendonly" }, indices);
      });
      label.append(box, ` ${key}`);
      picker.append(label);
    }
  };
  Plotly.newPlot(plot, chart.traces.map(copy), model.get("figure_layout"), {
    displaylogo: false,
    responsive: true,
  });
  drawPicker();
  const view = {
    apply(msg) {
      if (msg.type === "add") {
        const first = chart.traces.length - msg.traces.length;
        Plotly.addTraces(plot, chart.traces.slice(first).map(copy));
        drawPicker();
      } else if (msg.type === "extend") {
        Plotly.extendTraces(plot, { x: msg.x, y: msg.y }, msg.indices);
      }
    },
  };
  chart.views.add(view);
  return () => {
    chart.views.delete(view);
    Plotly.purge(plot);
  };
}

export default { initialize, render };
