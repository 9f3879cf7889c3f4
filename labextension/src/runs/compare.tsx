/**
 * The comparison of the picked runs: their curves of one metric overlaid
 * (plotly, loaded on first use as the GPU panel does), by step or time, and
 * a table of the params that differ.
 */

import { HTMLSelect, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Panel, Widget } from '@lumino/widgets';
import * as React from 'react';

import { loadPlotly, PlotlyLib, purgeChart } from '../common/plotly';
import { curves, legendNames, XAxis } from './curves';
import { splitMetrics } from './metrics';
import { RunsModel } from './model';
import type { ICompare } from './types';

const AXIS_OPTIONS = [
  { value: XAxis.Step, label: 'by step' },
  { value: XAxis.Time, label: 'by time since first point' }
];

function isXAxis(value: string): value is XAxis {
  return value === XAxis.Step || value === XAxis.Time;
}

/** The metric picker: the user's metrics, then the system ones in their own group. */
function MetricSelect(props: {
  model: RunsModel;
  compare: ICompare;
}): JSX.Element {
  const { model, compare } = props;
  const { user, system } = splitMetrics(Object.keys(compare.metrics));
  const option = (key: string) => (
    <option key={key} value={key}>
      {key}
    </option>
  );
  return (
    <HTMLSelect
      className="jp-air-RunsPanel-metric"
      aria-label="Metric"
      value={model.compareMetric ?? ''}
      onChange={event => model.setCompareMetric(event.target.value)}
    >
      {user.map(option)}
      {system.length > 0 && (
        <optgroup label="System metrics">{system.map(option)}</optgroup>
      )}
    </HTMLSelect>
  );
}

function Controls(props: { model: RunsModel }): JSX.Element | null {
  const { model } = props;
  const compare = model.comparison;
  if (model.selected.length < 2) {
    return model.selected.length === 1 ? (
      <div className="jp-air-RunsPanel-hint">Pick one more run to compare.</div>
    ) : null;
  }
  if (compare === null) {
    return <div className="jp-air-RunsPanel-hint">Comparing…</div>;
  }
  return (
    <div className="jp-air-RunsPanel-compareBar">
      <span>Compare {compare.runs.length} runs:</span>
      <MetricSelect model={model} compare={compare} />
      <HTMLSelect
        className="jp-air-RunsPanel-axis"
        aria-label="x axis"
        options={AXIS_OPTIONS}
        value={model.xAxis}
        onChange={event => {
          if (isXAxis(event.target.value)) {
            model.setXAxis(event.target.value);
          }
        }}
      />
    </div>
  );
}

class CompareControls extends ReactWidget {
  constructor(readonly model: RunsModel) {
    super();
  }
  protected render(): JSX.Element {
    return (
      <UseSignal signal={this.model.stateChanged}>
        {() => <Controls model={this.model} />}
      </UseSignal>
    );
  }
}

export class CompareView extends Panel {
  constructor(readonly model: RunsModel) {
    super();
    this.addClass('jp-air-RunsPanel-compare');
    this.addWidget(new CompareControls(model));
    this._chart.addClass('jp-air-RunsPanel-chart');
    this._params.addClass('jp-air-RunsPanel-params');
    this.addWidget(this._chart);
    this.addWidget(this._params);
    model.stateChanged.connect(this._update, this);
  }

  dispose(): void {
    this.model.stateChanged.disconnect(this._update, this);
    purgeChart(this._plotly, this._chart.node);
    super.dispose();
  }

  private _update(): void {
    const compare =
      this.model.selected.length >= 2 ? this.model.comparison : null;
    const key = [compare, this.model.compareMetric, this.model.xAxis];
    if (key.every((v, i) => v === this._drawn[i])) {
      return;
    }
    this._drawn = key;
    this._chart.setHidden(compare === null);
    this._params.setHidden(compare === null);
    if (compare === null) {
      return;
    }
    this._drawParams(compare);
    void this._drawChart(compare);
  }

  private async _drawChart(compare: ICompare): Promise<void> {
    try {
      this._plotly ??= await loadPlotly();
    } catch (error) {
      this._chart.node.textContent = 'The chart could not be loaded.';
      console.warn('jupyter-air: could not load plotly.js', error);
      return;
    }
    if (compare !== this.model.comparison) {
      return;
    }
    const metric = this.model.compareMetric;
    const drawn = curves(compare, metric, this.model.xAxis);
    const style = window.getComputedStyle(document.body);
    const color =
      style.getPropertyValue('--jp-ui-font-color1').trim() || '#333';
    await this._plotly.react(
      this._chart.node,
      drawn.curves.map(c => ({
        ...c,
        type: 'scatter',
        mode: 'lines+markers'
      })),
      {
        // Room for the legend's rows above the plot, one run a row at most.
        height: 220 + 18 * drawn.curves.length,
        margin: { t: 8, l: 48, r: 8, b: 36 },
        paper_bgcolor: 'rgba(0,0,0,0)',
        plot_bgcolor: 'rgba(0,0,0,0)',
        font: { size: 11, color },
        shapes: drawn.marks.map(mark => ({
          type: 'line',
          xref: 'x',
          yref: 'paper',
          x0: mark.x,
          x1: mark.x,
          y0: 0,
          y1: 1,
          line: { color: '#888888', width: 1, dash: 'dash' }
        })),
        annotations: drawn.marks.map(mark => ({
          text: mark.label,
          x: mark.x,
          xref: 'x',
          y: 1,
          yref: 'paper',
          xanchor: 'left',
          yanchor: 'top',
          showarrow: false,
          font: { size: 10, color: '#888888' }
        })),
        xaxis: { title: { text: drawn.xTitle }, automargin: true },
        yaxis: { title: { text: metric ?? '' }, automargin: true },
        showlegend: true,
        // Above the plot: below it, its rows would cover the x axis' title.
        legend: {
          orientation: 'h',
          x: 0,
          xanchor: 'left',
          y: 1.02,
          yanchor: 'bottom'
        }
      },
      { displayModeBar: false, responsive: true }
    );
  }

  private _drawParams(compare: ICompare): void {
    const node = this._params.node;
    node.replaceChildren();
    const keys = Object.keys(compare.params);
    if (keys.length === 0) {
      node.textContent = 'These runs have the same params.';
      return;
    }
    const table = document.createElement('table');
    table.className = 'jp-air-RunsPanel-paramsTable';
    const head = table.createTHead().insertRow();
    for (const title of ['Param that differs', ...legendNames(compare.runs)]) {
      const th = document.createElement('th');
      th.textContent = title;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const key of keys) {
      const tr = body.insertRow();
      tr.insertCell().textContent = key;
      for (const run of compare.runs) {
        tr.insertCell().textContent = compare.params[key][run.run_id] ?? '—';
      }
    }
    node.appendChild(table);
  }

  private _chart = new Widget();
  private _params = new Widget();
  private _plotly: PlotlyLib | null = null;
  private _drawn: unknown[] = [];
}
