/**
 * The comparison of the picked runs: their curves of one metric overlaid
 * (plotly, loaded on first use as the GPU panel does), by step or time, and
 * a table of the params that differ.
 */

import { HTMLSelect, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Panel, Widget } from '@lumino/widgets';
import * as React from 'react';

import { loadPlotly, PlotlyLib, purgeChart } from '../gpu/charts';
import { RunsModel, XAxis } from './model';
import type { ICompare } from './types';

/** Plotly traces of `metric` for each compared run. */
export function curves(
  compare: ICompare,
  metric: string | null,
  axis: XAxis
): { x: (number | Date)[]; y: (number | null)[]; name: string }[] {
  const series = metric === null ? {} : (compare.metrics[metric] ?? {});
  return compare.runs.map(run => {
    const points = series[run.run_id] ?? [];
    return {
      x: points.map(p => (axis === 'step' ? p.step : new Date(p.timestamp))),
      y: points.map(p => p.value),
      name: run.name ?? run.run_id
    };
  });
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
      <HTMLSelect
        className="jp-air-RunsPanel-metric"
        aria-label="Metric"
        options={Object.keys(compare.metrics)}
        value={model.compareMetric ?? ''}
        onChange={event => model.setCompareMetric(event.target.value)}
      />
      <HTMLSelect
        className="jp-air-RunsPanel-axis"
        aria-label="x axis"
        options={[
          { value: 'step', label: 'by step' },
          { value: 'time', label: 'by time' }
        ]}
        value={model.xAxis}
        onChange={event => model.setXAxis(event.target.value as XAxis)}
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
    const axis = this.model.xAxis;
    const style = window.getComputedStyle(document.body);
    const color =
      style.getPropertyValue('--jp-ui-font-color1').trim() || '#333';
    await this._plotly.react(
      this._chart.node,
      curves(compare, metric, axis).map(c => ({
        ...c,
        type: 'scatter',
        mode: 'lines+markers'
      })),
      {
        height: 240,
        margin: { t: 24, l: 48, r: 8, b: 36 },
        paper_bgcolor: 'rgba(0,0,0,0)',
        plot_bgcolor: 'rgba(0,0,0,0)',
        font: { size: 11, color },
        title: { text: metric ?? '', font: { size: 12 } },
        xaxis: { title: { text: axis } },
        showlegend: true,
        legend: { orientation: 'h' }
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
    for (const title of [
      'Param that differs',
      ...compare.runs.map(r => r.name ?? r.run_id)
    ]) {
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
