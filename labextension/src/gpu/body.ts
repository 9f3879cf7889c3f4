/**
 * The cards of the GPU panel: one per GPU and one for the host, with their
 * figures and charts, drawn from the model's history.
 */

import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { loadPlotly, PlotlyLib, purgeChart } from '../common/plotly';
import { el } from '../dom';
import { Card, GpuCard, HostCard } from './cards';
import {
  drawChart,
  IChartTheme,
  readTheme,
  TimeWindow,
  warmUp
} from './charts';
import type { IMergeResult } from './history';
import {
  GpuResourcesModel,
  RANGES,
  UPDATE_MARK,
  UPDATE_MEASURE
} from './model';

/** Keep at most this many update measures in the performance timeline. */
const MAX_MEASURES = 1000;

/**
 * Renders `model.history`; it draws only the charts in view (the others when
 * scrolled to), so that one update stays cheap with 8 GPUs.
 */
export class GpuBody extends Widget {
  constructor(readonly model: GpuResourcesModel) {
    super();
    this.addClass('jp-air-GpuPanel-body');
    this._buildDom();
    model.dataChanged.connect(this._onData, this);
    model.rangeChanged.connect(this._invalidateCharts, this);
    model.stateChanged.connect(this._renderLoading, this);
    this._renderLoading();
  }

  /** Read the chart theme again from the CSS variables and redraw. */
  refreshTheme(): void {
    this._theme = null;
    this._invalidateCharts();
  }

  /** Load plotly (and warm it up), or null when it cannot be loaded. */
  async loadCharts(): Promise<PlotlyLib | null> {
    try {
      const plotly = await loadPlotly();
      await warmUp(plotly, this._chartTheme());
      this._plotly = plotly;
      return plotly;
    } catch (error) {
      console.warn('jupyter-air: could not load plotly.js', error);
      return null;
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._resizeObserver?.disconnect();
    if (this._frame) {
      cancelAnimationFrame(this._frame);
    }
    for (const card of this._allCards()) {
      purgeChart(this._plotly, card.chart);
    }
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.node.addEventListener('scroll', this._onScroll, { passive: true });
    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this._onResize());
      this._resizeObserver.observe(this.node);
    }
  }

  protected onBeforeDetach(msg: Message): void {
    this.node.removeEventListener('scroll', this._onScroll);
    this._resizeObserver?.disconnect();
    this._resizeObserver = null;
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._scheduleDraw();
  }

  /** Queue the update of a merge; merges that come during one are taken together. */
  private _onData(_: GpuResourcesModel, result: IMergeResult): void {
    const pending = this._pending;
    this._pending = pending
      ? {
          reset: pending.reset || result.reset,
          inventoryChanged: pending.inventoryChanged || result.inventoryChanged,
          added: pending.added + result.added
        }
      : result;
    if (!this._updating) {
      void this._flush();
    }
  }

  private async _flush(): Promise<void> {
    this._updating = true;
    try {
      if (!this._plotly) {
        // Loading plotly is no part of an update: measure from when it is there.
        this._plotly = await this.loadCharts();
        if (hasMark()) {
          performance.clearMarks(UPDATE_MARK);
          performance.mark(UPDATE_MARK);
        }
      }
      while (this._pending) {
        const result = this._pending;
        this._pending = null;
        await this._update(result);
      }
    } finally {
      this._updating = false;
    }
  }

  /** One whole update after a merge: DOM and charts (measured from the model's mark). */
  private async _update(result: IMergeResult): Promise<void> {
    if (result.inventoryChanged) {
      this._rebuildCards();
    }
    this._renderCards();
    if (result.added > 0 || result.reset || result.inventoryChanged) {
      // Without new samples the charts would only slide by a poll interval.
      for (const card of this._allCards()) {
        card.dirty = true;
      }
    }
    try {
      await this._drawVisibleCharts();
    } finally {
      if (hasMark()) {
        performance.measure(UPDATE_MEASURE, UPDATE_MARK);
        performance.clearMarks(UPDATE_MARK);
        if (++this._measures > MAX_MEASURES) {
          performance.clearMeasures(UPDATE_MEASURE);
          this._measures = 0;
        }
      }
    }
  }

  private _rebuildCards(): void {
    for (const card of this._gpuCards) {
      purgeChart(this._plotly, card.chart);
      card.node.remove();
    }
    this._gpuCards = this.model.history.gpus.map(
      (info, position) => new GpuCard(info, position)
    );
    for (const card of this._gpuCards) {
      this._gpuList.appendChild(card.node);
    }
  }

  private _allCards(): Card[] {
    return [...this._gpuCards, this._hostCard];
  }

  /** The figures of every card (cheap: each writes only changed text). */
  private _renderCards(): void {
    const history = this.model.history;
    for (const card of this._gpuCards) {
      card.update(history);
    }
    this._hostCard.node.hidden = !history.loaded;
    if (history.loaded) {
      this._hostCard.update(history);
    }
    this._renderNotes();
    this._renderLoading();
  }

  /** "Loading…" until the cards show an answer, unless the request failed. */
  private _renderLoading(): void {
    this._loading.hidden =
      !this._hostCard.node.hidden || this.model.error !== null;
  }

  /** The no-GPU notice and the driver line (drawn with the cards). */
  private _renderNotes(): void {
    const history = this.model.history;
    const loaded = history.loaded;
    const nvml = history.nvml;
    const noGpu = loaded && (!nvml?.available || history.gpus.length === 0);
    this._noGpu.hidden = !noGpu;
    if (noGpu) {
      const reason = nvml?.available
        ? 'NVML reports no GPU.'
        : (nvml?.reason ?? 'NVML is not available.');
      setText(this._noGpuReason, reason, reason);
    }
    const driver: string[] = [];
    if (nvml?.available && nvml.driver_version) {
      driver.push(`Driver ${nvml.driver_version}`);
    }
    if (nvml?.available && nvml.cuda_driver_version) {
      driver.push(`CUDA ${nvml.cuda_driver_version}`);
    }
    setText(this._driver, driver.join(' · '));
  }

  // ---------------------------------------------------------------- charts

  /** Mark every chart stale and redraw the visible ones soon. */
  private _invalidateCharts(): void {
    for (const card of this._allCards()) {
      card.dirty = true;
    }
    this._scheduleDraw();
  }

  private _scheduleDraw(): void {
    if (this._frame) {
      return;
    }
    this._frame = requestAnimationFrame(() => {
      this._frame = 0;
      void this._drawVisibleCharts();
    });
  }

  private _onScroll = (): void => {
    this._scheduleDraw();
  };

  private _onResize(): void {
    const width = this.node.clientWidth;
    if (width !== this._width) {
      this._width = width;
      this._invalidateCharts();
    }
  }

  /** Draw the stale charts of the cards in view; the others stay stale. */
  private _drawVisibleCharts(): Promise<unknown> {
    const plotly = this._plotly;
    if (!plotly || !this.isVisible || !this.model.history.loaded) {
      return Promise.resolve();
    }
    const cards = this._allCards().filter(
      card => card.dirty && card.node.isConnected && !card.node.hidden
    );
    if (!cards.length) {
      return Promise.resolve();
    }
    // Read every geometry first, then draw (one layout pass).
    const view = this.node.getBoundingClientRect();
    const inView = (node: HTMLElement) => {
      const rect = node.getBoundingClientRect();
      return (
        rect.height > 0 && rect.bottom > view.top && rect.top < view.bottom
      );
    };
    // Test the card first: the content of cards out of view is not laid out
    // (content-visibility), and reading its geometry would force it.
    const visible = cards.filter(
      card => inView(card.node) && inView(card.chart)
    );
    if (!visible.length) {
      return Promise.resolve();
    }
    const width = visible[0].chart.clientWidth;
    if (width <= 0) {
      return Promise.resolve();
    }
    const theme = this._chartTheme();
    const window = this._timeWindow();
    const history = this.model.history;
    return Promise.all(
      visible.map(card => {
        card.dirty = false;
        try {
          return drawChart(
            plotly,
            card.chart,
            window,
            card.rows(history, window, theme),
            width,
            theme
          ).catch(error => {
            console.warn('jupyter-air: chart drawing failed', error);
          });
        } catch (error) {
          console.warn('jupyter-air: chart drawing failed', error);
          return Promise.resolve();
        }
      })
    );
  }

  private _timeWindow(): TimeWindow {
    const history = this.model.history;
    const end = history.now > 0 ? history.now : Date.now() / 1000;
    const seconds = RANGES[this.model.range].seconds;
    const endMs = end * 1000;
    const offset = new Date(endMs).getTimezoneOffset() * 60000;
    const range: [number, number] = [
      endMs - seconds * 1000 - offset,
      endMs - offset
    ];
    return new TimeWindow(history.x, range, history.interval * 2.5 * 1000);
  }

  private _chartTheme(): IChartTheme {
    if (!this._theme) {
      this._theme = readTheme();
    }
    return this._theme;
  }

  private _buildDom(): void {
    const body = this.node;
    this._loading = el('div', 'jp-air-GpuPanel-loading', 'Loading…');
    body.appendChild(this._loading);

    const noGpu = el('div', 'jp-air-GpuPanel-noGpu');
    noGpu.appendChild(
      el('div', 'jp-air-GpuPanel-noGpuTitle', 'No NVIDIA GPU detected')
    );
    this._noGpuReason = el('div', 'jp-air-GpuPanel-noGpuReason');
    noGpu.appendChild(this._noGpuReason);
    noGpu.hidden = true;
    this._noGpu = noGpu;
    body.appendChild(noGpu);

    this._gpuList = el('div', 'jp-air-GpuPanel-gpus');
    body.appendChild(this._gpuList);

    this._hostCard = new HostCard();
    this._hostCard.node.hidden = true;
    body.appendChild(this._hostCard.node);

    this._driver = el('div', 'jp-air-GpuPanel-driver');
    body.appendChild(this._driver);
  }

  private _plotly: PlotlyLib | null = null;
  /** What the merges not yet shown changed (see `_onData`). */
  private _pending: IMergeResult | null = null;
  private _updating = false;
  private _theme: IChartTheme | null = null;
  private _frame = 0;
  private _measures = 0;
  private _width = -1;
  private _resizeObserver: ResizeObserver | null = null;
  private _gpuCards: GpuCard[] = [];
  private _hostCard!: HostCard;
  private _loading!: HTMLDivElement;
  private _noGpu!: HTMLDivElement;
  private _noGpuReason!: HTMLDivElement;
  private _gpuList!: HTMLDivElement;
  private _driver!: HTMLDivElement;
}

/** Whether the model marked the start of an update (browsers only). */
function hasMark(): boolean {
  return (
    typeof performance?.getEntriesByName === 'function' &&
    performance.getEntriesByName(UPDATE_MARK).length > 0
  );
}

/** Write a text (and title) only when it changed: no DOM write per poll. */
function setText(node: HTMLElement, text: string, title?: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
  if (title !== undefined && node.title !== title) {
    node.title = title;
  }
}
