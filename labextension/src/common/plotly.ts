/**
 * plotly.js, loaded on demand (its own chunk) the first time a view draws a
 * chart, so that it does not weigh on JupyterLab's start; one copy for every
 * view (GPU panel, runs comparison).
 */

import type * as PlotlyTypes from 'plotly.js-basic-dist-min';

/** The plotly API the views use. */
export type PlotlyLib = typeof PlotlyTypes;

let plotlyPromise: Promise<PlotlyLib> | null = null;

/** Load plotly.js (once; a failed load is tried again on the next call). */
export function loadPlotly(): Promise<PlotlyLib> {
  if (!plotlyPromise) {
    plotlyPromise = import('plotly.js-basic-dist-min').then(
      module =>
        ((module as unknown as { default?: PlotlyLib }).default ??
          module) as PlotlyLib
    );
    plotlyPromise.catch(() => {
      // Allow a later retry (e.g. the chunk could not be fetched).
      plotlyPromise = null;
    });
  }
  return plotlyPromise;
}

/** Release what plotly attached to `node` (nothing when it was never loaded). */
export function purgeChart(plotly: PlotlyLib | null, node: HTMLElement): void {
  if (plotly) {
    plotly.purge(node);
  }
}
