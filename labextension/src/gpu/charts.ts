/**
 * Small, static plotly line charts: one figure per card, one row per metric,
 * all rows sharing the time axis.
 */

import type * as PlotlyTypes from 'plotly.js-basic-dist-min';

import type { PlotlyLib } from '../common/plotly';
import { formatClock } from '../common/time';
import type { Column } from './history';
import { lowerBound } from './history';

/** Colours and font of the charts, read from JupyterLab's CSS variables. */
export interface IChartTheme {
  fontFamily: string;
  fontColor: string;
  gridColor: string;
  lineColors: {
    util: string;
    mem: string;
    temp: string;
    cpu: string;
  };
}

function cssVar(style: CSSStyleDeclaration, name: string, fallback: string) {
  const value = style.getPropertyValue(name).trim();
  return value || fallback;
}

/** Read the chart theme from the current JupyterLab theme. */
export function readTheme(): IChartTheme {
  const style = window.getComputedStyle(document.body);
  return {
    fontFamily: cssVar(style, '--jp-ui-font-family', 'sans-serif'),
    fontColor: cssVar(style, '--jp-ui-font-color2', '#616161'),
    gridColor: cssVar(style, '--jp-border-color2', '#e0e0e0'),
    lineColors: {
      util: cssVar(style, '--jp-brand-color1', '#1976d2'),
      mem: cssVar(style, '--jp-accent-color1', '#388e3c'),
      temp: cssVar(style, '--jp-warn-color1', '#f57c00'),
      cpu: cssVar(style, '--jp-brand-color1', '#1976d2')
    }
  };
}

/**
 * The part of the history shown by every chart of one update: the shared x
 * values of the selected range, with a `null` inserted where the sampler
 * left a gap (so lines break there instead of bridging it).
 */
export class TimeWindow {
  /**
   * @param x - plotted sample times (local-time ms), ascending.
   * @param range - [start, end] of the x axis (local-time ms).
   * @param gapMs - a hole between two samples longer than this is a gap.
   */
  constructor(
    x: number[],
    readonly range: [number, number],
    gapMs: number
  ) {
    // Start one sample before the range so the line enters from the edge.
    this._start = Math.max(0, lowerBound(x, range[0]) - 1);
    const xs: (number | null)[] = [];
    const gaps: number[] = [];
    for (let k = this._start; k < x.length; k++) {
      if (k > this._start && x[k] - x[k - 1] > gapMs) {
        xs.push(null);
        gaps.push(k);
      }
      xs.push(x[k]);
    }
    this.xs = xs;
    this._gaps = gaps;
  }

  /** Shared x values (with gap markers). */
  readonly xs: (number | null)[];

  /**
   * Tick positions and labels ("HH:MM") of the time axis; none in the last
   * fifth of a step, where its label would pass the chart's right edge.
   */
  ticks(): { values: number[]; labels: string[] } {
    const [start, end] = this.range;
    const span = end - start;
    const step =
      span <= 20 * 60000
        ? 5 * 60000
        : span <= 75 * 60000
          ? 15 * 60000
          : 30 * 60000;
    const values: number[] = [];
    const labels: string[] = [];
    for (
      let v = Math.ceil(start / step) * step;
      v <= end - step / 5;
      v += step
    ) {
      // `v` is local wall-clock time encoded as UTC (see toLocalMs).
      values.push(v);
      labels.push(formatClock(v, 'minutes', true));
    }
    return { values, labels };
  }

  /** The y values of `column` aligned with `xs`, optionally scaled. */
  ys(column: Column, scale = 1): (number | null)[] {
    const out: (number | null)[] = [];
    let g = 0;
    const gaps = this._gaps;
    for (let k = this._start; k < column.length; k++) {
      if (g < gaps.length && gaps[g] === k) {
        out.push(null);
        g++;
      }
      const v = column[k];
      out.push(v === null || v === undefined ? null : v * scale);
    }
    return out;
  }

  private _start: number;
  private _gaps: number[];
}

/** One row (one metric) of a chart. */
export interface IChartRow {
  y: (number | null)[];
  color: string;
  /** Fixed y range; autorange from zero when absent. */
  range?: [number, number];
  /** Unit appended to the y tick labels. */
  suffix: string;
}

/** Geometry of the charts, px. */
export const ROW_HEIGHT = 40;
const ROW_GAP = 12;
const MARGIN = { l: 46, r: 8, t: 6, b: 20 };

/** Height of a chart of `rows` rows, px. */
export function chartHeight(rows: number): number {
  return MARGIN.t + MARGIN.b + rows * ROW_HEIGHT + (rows - 1) * ROW_GAP;
}

const CONFIG: Partial<PlotlyTypes.Config> = {
  staticPlot: true,
  displayModeBar: false,
  responsive: false,
  showTips: false
};

let revision = 0;

/**
 * Draw (or update in place, with `Plotly.react`) the chart of one card.
 */
export function drawChart(
  plotly: PlotlyLib,
  node: HTMLElement,
  window: TimeWindow,
  rows: IChartRow[],
  width: number,
  theme: IChartTheme
): Promise<unknown> {
  const n = rows.length;
  const height = chartHeight(n);
  const plotHeight = height - MARGIN.t - MARGIN.b;
  const axisName = (r: number) => (r === 0 ? 'y' : `y${r + 1}`);
  const layoutName = (r: number) => (r === 0 ? 'yaxis' : `yaxis${r + 1}`);

  const data: Partial<PlotlyTypes.ScatterData>[] = rows.map((row, r) => ({
    type: 'scatter',
    mode: 'lines',
    x: window.xs as PlotlyTypes.Datum[],
    y: row.y as PlotlyTypes.Datum[],
    xaxis: 'x',
    yaxis: axisName(r),
    line: { color: row.color, width: 1.5 },
    hoverinfo: 'skip',
    connectgaps: false
  }));

  const font = { family: theme.fontFamily, size: 9, color: theme.fontColor };
  const ticks = window.ticks();
  const layout: Record<string, unknown> = {
    width,
    height,
    margin: { ...MARGIN, pad: 2 },
    paper_bgcolor: 'rgba(0,0,0,0)',
    plot_bgcolor: 'rgba(0,0,0,0)',
    font,
    showlegend: false,
    hovermode: false,
    dragmode: false,
    datarevision: ++revision,
    // A linear axis with ticks computed here: cheaper for plotly than a
    // date axis, and the labels are exactly "HH:MM" of local time. No tick
    // label is checked against the figure's edges (`ticklabeloverflow`):
    // measuring each label on every update took a quarter of the live cell
    // chart's update (kernel/live_chart.js), for labels the margins hold.
    xaxis: {
      ticklabeloverflow: 'allow',
      type: 'linear',
      range: window.range,
      fixedrange: true,
      anchor: axisName(n - 1),
      tickmode: 'array',
      tickvals: ticks.values,
      ticktext: ticks.labels,
      showgrid: true,
      gridcolor: theme.gridColor,
      zeroline: false,
      showline: false,
      tickfont: font
    }
  };
  rows.forEach((row, r) => {
    const bottom = (n - 1 - r) * (ROW_HEIGHT + ROW_GAP);
    layout[layoutName(r)] = {
      domain: [bottom / plotHeight, (bottom + ROW_HEIGHT) / plotHeight],
      anchor: 'x',
      fixedrange: true,
      ...(row.range
        ? { range: row.range, autorange: false }
        : { autorange: true, rangemode: 'tozero' }),
      nticks: 3,
      ticklabeloverflow: 'allow',
      ticksuffix: row.suffix,
      showgrid: true,
      gridcolor: theme.gridColor,
      zeroline: false,
      showline: false,
      tickfont: font
    };
  });

  return plotly.react(
    node as PlotlyTypes.Root as HTMLElement,
    data as PlotlyTypes.Data[],
    layout as Partial<PlotlyTypes.Layout>,
    CONFIG
  );
}

let warmedUp: Promise<void> | null = null;

/**
 * Draw one throwaway chart off screen, once: plotly's first drawing pays for
 * one-time set-up (style sheet, text measurement) that should not land on the
 * first panel update.
 */
export function warmUp(plotly: PlotlyLib, theme: IChartTheme): Promise<void> {
  if (!warmedUp) {
    const node = document.createElement('div');
    node.setAttribute('aria-hidden', 'true');
    node.style.cssText =
      'position:fixed;left:-10000px;top:0;width:240px;height:160px;visibility:hidden;';
    document.body.appendChild(node);
    const now = Date.now();
    const x = [now - 60000, now];
    const window = new TimeWindow(x, [now - 120000, now], 1e9);
    const rows: IChartRow[] = [
      {
        y: [1, 2],
        color: theme.lineColors.util,
        range: [0, 100],
        suffix: ' %'
      },
      { y: [1, 2], color: theme.lineColors.mem, suffix: ' GiB' }
    ];
    warmedUp = Promise.resolve()
      .then(() => drawChart(plotly, node, window, rows, 240, theme))
      .catch(() => undefined)
      .then(() => {
        plotly.purge(node);
        node.remove();
      });
  }
  return warmedUp;
}
