/**
 * The "GPU resources" side panel.
 */

import { ServerConnection } from '@jupyterlab/services';
import { refreshIcon, Styling } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import { IPoll, Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { APIError, Query, requestAPI } from '../request';
import { Card, GpuCard, HostCard } from './cards';
import {
  drawChart,
  IChartTheme,
  loadPlotly,
  PlotlyLib,
  purgeChart,
  readTheme,
  TimeWindow,
  warmUp
} from './charts';
import { formatClock, formatDuration } from './format';
import { ActivityMonitor } from '../common/activity';
import { GpuModel } from './model';
import type { IGpuResponse, IJobGpuResponse, IJobNode } from './types';
import { el } from '../dom';

/** Performance entry names (read by browser tests). */
export const UPDATE_MARK = 'jupyter-air:gpu-update-start';
export const UPDATE_MEASURE = 'jupyter-air:gpu-update';

/** Time ranges of the charts. */
export const RANGES = {
  '15m': { label: 'Last 15 minutes', seconds: 15 * 60 },
  '1h': { label: 'Last hour', seconds: 60 * 60 },
  '2h': { label: 'Last 2 hours', seconds: 2 * 60 * 60 }
} as const;

export type RangeKey = keyof typeof RANGES;

export function isRangeKey(value: unknown): value is RangeKey {
  return (
    typeof value === 'string' &&
    Object.prototype.hasOwnProperty.call(RANGES, value)
  );
}

/** The panel settings (see labextension/schema/gpu.json). */
export interface IGpuPanelSettings {
  defaultRange: RangeKey;
  /** Seconds between two polls. */
  pollInterval: number;
  /** Seconds without activity after which polling pauses. */
  idleTimeout: number;
}

export const DEFAULT_SETTINGS: IGpuPanelSettings = {
  defaultRange: '15m',
  pollInterval: 10,
  idleTimeout: 300
};

/** Why polling is paused. */
type PauseReason = 'idle' | 'hidden';

/** Keep at most this many update measures in the performance timeline. */
const MAX_MEASURES = 1000;

/** The text shown for a failed update. */
function describeError(error: unknown): string {
  // A 404 of jupyter_air itself says what is missing (a node's samples).
  if (
    error instanceof APIError &&
    error.status === 404 &&
    error.code !== 'not_found'
  ) {
    return 'the jupyter_air server extension is not enabled (404)';
  }
  return error instanceof Error ? error.message : String(error);
}

/** The value of a job node in the node selector ('' is this server). */
function nodeKey(node: IJobNode | null): string {
  return node ? `${node.job}/${node.attempt}/${node.node}` : '';
}

function hostOf(node: IJobNode): string {
  return node.hostname ?? node.ip ?? 'unknown host';
}

/**
 * Live per-GPU utilization, memory, temperature and power, the processes on
 * each GPU, and the host CPU and memory, polled from `jupyter-air/gpu`, or
 * from `jupyter-air/jobs/<id>/gpu` for a node of a running multi-node job.
 */
export class GpuPanel extends Widget {
  constructor(options: GpuPanel.IOptions = {}) {
    super();
    this.id = 'jupyter-air-gpu';
    this.addClass('jp-air-GpuPanel');
    this.title.caption = 'GPU resources';
    this._serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._settings = { ...DEFAULT_SETTINGS, ...options.settings };
    this._range = this._settings.defaultRange;

    this._buildDom();

    this._activity = new ActivityMonitor({
      timeout: this._settings.idleTimeout
    });
    this._activity.idle.connect(this._onIdle, this);
    this._activity.visibilityChanged.connect(this._onVisibilityChanged, this);

    this._poll = new Poll({
      auto: true,
      factory: () => this._serialize(() => this._fetch('GET')),
      frequency: this._frequency(),
      name: 'jupyter-air:gpu',
      standby: () =>
        !this.isVisible || this._paused !== null || this._activity.hidden
    });

    this._renderAll();
  }

  /** The client-side history. */
  get model(): GpuModel {
    return this._model;
  }

  /** The settings in use. */
  get settings(): IGpuPanelSettings {
    return { ...this._settings };
  }

  /** Apply new settings (the panel follows the settings registry). */
  updateSettings(settings: Partial<IGpuPanelSettings>): void {
    const previous = this._settings;
    const next = { ...previous };
    if (isRangeKey(settings.defaultRange)) {
      next.defaultRange = settings.defaultRange;
    }
    if (
      typeof settings.pollInterval === 'number' &&
      settings.pollInterval > 0
    ) {
      next.pollInterval = Math.max(1, settings.pollInterval);
    }
    if (typeof settings.idleTimeout === 'number' && settings.idleTimeout > 0) {
      next.idleTimeout = Math.max(5, settings.idleTimeout);
    }
    this._settings = next;
    if (next.pollInterval !== previous.pollInterval) {
      this._poll.frequency = this._frequency();
      if (this.isVisible && this._paused === null) {
        // Apply the new interval now rather than after the current one.
        void this._poll.refresh();
      }
    }
    if (next.idleTimeout !== previous.idleTimeout) {
      this._activity.timeout = next.idleTimeout;
      this._renderPaused();
    }
    if (next.defaultRange !== previous.defaultRange) {
      this.range = next.defaultRange;
    }
    this._renderStatus();
  }

  /** The time range of the charts. */
  get range(): RangeKey {
    return this._range;
  }
  set range(range: RangeKey) {
    if (!isRangeKey(range)) {
      return;
    }
    if (this._rangeSelect.value !== range) {
      this._rangeSelect.value = range;
    }
    if (range === this._range) {
      return;
    }
    this._range = range;
    this._invalidateCharts();
  }

  /** Why polling is paused, or null when it is not. */
  get paused(): PauseReason | null {
    return this._paused;
  }

  /** Set the chart theme again from the CSS variables and redraw. */
  refreshTheme(): void {
    this._theme = null;
    this._invalidateCharts();
  }

  /** Take a sample now (`POST gpu/sample`) and show it. */
  async refresh(): Promise<void> {
    if (this._paused !== null) {
      this._resume(false);
    }
    this._refreshButton.disabled = true;
    this._refreshButton.classList.add('jp-mod-busy');
    try {
      await this._serialize(() => this._fetch('POST'));
    } catch (error) {
      console.warn('jupyter-air: GPU refresh failed', error);
    } finally {
      this._refreshButton.disabled = false;
      this._refreshButton.classList.remove('jp-mod-busy');
    }
  }

  /** Resume polling after a pause, with an immediate update. */
  resume(): void {
    this._resume(true);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this._activity.dispose();
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
    this._body.addEventListener('scroll', this._onScroll, { passive: true });
    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this._onResize());
      this._resizeObserver.observe(this._body);
    }
  }

  protected onBeforeDetach(msg: Message): void {
    this._body.removeEventListener('scroll', this._onScroll);
    this._resizeObserver?.disconnect();
    this._resizeObserver = null;
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // Start loading plotly while the first answer is on its way.
    void this._loadCharts();
    if (this._paused !== null) {
      // Reopening the panel resumes.
      this._resume(true);
    } else {
      void this._poll.refresh();
    }
    this._scheduleDraw();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._renderStatus();
  }

  // ---------------------------------------------------------------- polling

  private _frequency(): IPoll.Frequency {
    const interval = this._settings.pollInterval * 1000;
    return {
      interval,
      backoff: true,
      max: Math.max(interval * 6, 60 * 1000)
    };
  }

  /** Run the fetches one at a time (poll, refresh button). */
  private _serialize(fn: () => Promise<void>): Promise<void> {
    const next = this._queue.then(fn, fn);
    this._queue = next.catch(() => undefined);
    return next;
  }

  private async _fetch(method: 'GET' | 'POST'): Promise<void> {
    let response: IGpuResponse;
    this._inFlight = true;
    this._renderStatus();
    try {
      const [answer, plotly] = await Promise.all([
        this._request(method),
        this._loadCharts()
      ]);
      response = answer;
      this._plotly = plotly;
    } catch (error) {
      this._error = describeError(error);
      this._inFlight = false;
      this._renderStatus();
      throw error;
    }
    this._inFlight = false;
    this._error = null;
    try {
      await this._update(response);
    } catch (error) {
      this._error = `could not show the answer: ${describeError(error)}`;
      this._renderStatus();
      throw error;
    }
  }

  /**
   * Ask the node shown for what the model misses, and this server for the
   * list of job nodes.
   */
  private async _request(method: 'GET' | 'POST'): Promise<IGpuResponse> {
    const settings = this._serverSettings;
    if (this._source !== null) {
      // Only the node list is wanted: ask for no more than the last time.
      this._setNodes(
        await requestAPI<IGpuResponse>('gpu', {}, this._local, settings)
      );
    }
    const source = this._source;
    const shows = this._shows;
    let answer: IGpuResponse;
    if (source === null) {
      answer = await requestAPI<IGpuResponse>(
        method === 'POST' ? 'gpu/sample' : 'gpu',
        { method },
        this._model.query(),
        settings
      );
    } else {
      // A node's sampler runs on its own schedule: refresh only asks again.
      answer = await requestAPI<IJobGpuResponse>(
        `jobs/${source.job}/gpu`,
        {},
        { ...this._model.query(), node: source.node, attempt: source.attempt },
        settings
      );
    }
    if (shows !== this._shows) {
      return this._request(method); // another node was picked meanwhile
    }
    if (source === null) {
      this._setNodes(answer);
    }
    return answer;
  }

  /** Take the job nodes from an answer of this server; leave a node that ended. */
  private _setNodes(answer: IGpuResponse): void {
    const t = answer.samples?.t ?? [];
    this._local = {
      inventory: answer.inventory,
      since: t.length ? t[t.length - 1] : this._local.since
    };
    if (answer.host?.hostname) {
      this._localHost = answer.host.hostname;
    }
    this._nodes = answer.nodes ?? [];
    const source = this._source;
    if (source && !this._nodes.some(n => nodeKey(n) === nodeKey(source))) {
      this._show(null, `Job ended: showing this server (job ${source.job})`);
    }
    this._renderNodes();
  }

  /** Show the GPUs of a job node (null: of this server), from a fresh history. */
  private _show(source: IJobNode | null, notice: string | null = null): void {
    this._source = source;
    this._shows++;
    this._notice = notice;
    // A job node samples on its own every interval: refresh fetches its latest sample.
    this._refreshButton.title =
      source === null ? 'Take a sample now' : "Fetch the node's latest sample";
    this._error = null;
    this._model.clear();
    this._rebuildCards();
    this._renderAll();
  }

  /** Load plotly (and warm it up), or null when it cannot be loaded. */
  private async _loadCharts(): Promise<PlotlyLib | null> {
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

  // ---------------------------------------------------------------- pausing

  private _onIdle(): void {
    if (this._paused !== 'idle') {
      this._pause('idle');
    }
  }

  private _onVisibilityChanged(_: ActivityMonitor, hidden: boolean): void {
    if (hidden) {
      if (this._paused === null) {
        this._pause('hidden');
      }
      return;
    }
    if (this._paused === 'hidden') {
      if (this._activity.isIdle) {
        this._pause('idle');
      } else {
        this._resume(true);
      }
    }
  }

  private _pause(reason: PauseReason): void {
    this._paused = reason;
    this._renderPaused();
    this._renderStatus();
  }

  private _resume(fetch: boolean): void {
    this._paused = null;
    this._activity.touch();
    this._renderPaused();
    this._renderStatus();
    if (fetch) {
      void this._poll.refresh();
    }
  }

  // ---------------------------------------------------------------- update

  /** One whole panel update: merge, DOM, charts (measured). */
  private async _update(response: IGpuResponse): Promise<void> {
    const perf = typeof performance !== 'undefined' ? performance : null;
    perf?.mark(UPDATE_MARK);

    const result = this._model.merge(response);
    if (result.inventoryChanged) {
      this._rebuildCards();
    }
    this._renderAll();
    if (result.added > 0 || result.reset || result.inventoryChanged) {
      // Without new samples the charts would only slide by a poll interval.
      for (const card of this._allCards()) {
        card.dirty = true;
      }
    }
    try {
      await this._drawVisibleCharts();
    } finally {
      if (perf) {
        perf.measure(UPDATE_MEASURE, UPDATE_MARK);
        perf.clearMarks(UPDATE_MARK);
        if (++this._measures > MAX_MEASURES) {
          perf.clearMeasures(UPDATE_MEASURE);
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
    this._gpuCards = this._model.gpus.map(
      (info, position) => new GpuCard(info, position)
    );
    for (const card of this._gpuCards) {
      this._gpuList.appendChild(card.node);
    }
  }

  private _allCards(): Card[] {
    return [...this._gpuCards, this._hostCard];
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
    const width = this._body.clientWidth;
    if (width !== this._bodyWidth) {
      this._bodyWidth = width;
      this._invalidateCharts();
    }
  }

  /**
   * Draw the stale charts of the cards in view; the others stay stale and
   * are drawn when scrolled into view (keeps one update cheap with 8 GPUs).
   */
  private _drawVisibleCharts(): Promise<unknown> {
    const plotly = this._plotly;
    if (!plotly || !this.isVisible || !this._model.loaded) {
      return Promise.resolve();
    }
    const cards = this._allCards().filter(
      card => card.dirty && card.node.isConnected && !card.node.hidden
    );
    if (!cards.length) {
      return Promise.resolve();
    }
    // Read every geometry first, then draw (one layout pass).
    const view = this._body.getBoundingClientRect();
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
    const draws = visible.map(card => {
      card.dirty = false;
      return this._draw(plotly, card, window, width, theme);
    });
    return Promise.all(draws);
  }

  private _draw(
    plotly: PlotlyLib,
    card: Card,
    window: TimeWindow,
    width: number,
    theme: IChartTheme
  ): Promise<unknown> {
    try {
      return drawChart(
        plotly,
        card.chart,
        window,
        card.rows(this._model, window, theme),
        width,
        theme
      ).catch(error => {
        console.warn('jupyter-air: chart drawing failed', error);
      });
    } catch (error) {
      console.warn('jupyter-air: chart drawing failed', error);
      return Promise.resolve();
    }
  }

  private _timeWindow(): TimeWindow {
    const model = this._model;
    const end = model.now > 0 ? model.now : Date.now() / 1000;
    const seconds = RANGES[this._range].seconds;
    const endMs = end * 1000;
    const offset = new Date(endMs).getTimezoneOffset() * 60000;
    const range: [number, number] = [
      endMs - seconds * 1000 - offset,
      endMs - offset
    ];
    return new TimeWindow(model.x, range, model.interval * 2.5 * 1000);
  }

  private _chartTheme(): IChartTheme {
    if (!this._theme) {
      this._theme = readTheme();
    }
    return this._theme;
  }

  // ---------------------------------------------------------------- DOM

  private _buildDom(): void {
    const node = this.node;

    const header = el('div', 'jp-air-GpuPanel-header');
    header.appendChild(el('h2', 'jp-air-GpuPanel-title', 'GPU resources'));

    const nodeRow = el('label', 'jp-air-GpuPanel-nodeRow');
    nodeRow.appendChild(el('span', 'jp-air-GpuPanel-nodeLabel', 'Node'));
    const nodeSelect = el('select', 'jp-air-GpuPanel-node');
    nodeSelect.title = 'Whose GPUs to show: this server or a node of a job';
    nodeSelect.addEventListener('change', () => {
      const value = nodeSelect.value;
      this._show(this._nodes.find(n => nodeKey(n) === value) ?? null);
      if (this._paused !== null) {
        this._resume(true);
      } else {
        void this._poll.refresh();
      }
    });
    this._nodeSelect = nodeSelect;
    nodeRow.appendChild(Styling.wrapSelect(nodeSelect));
    nodeRow.hidden = true;
    this._nodeRow = nodeRow;
    header.appendChild(nodeRow);

    const toolbar = el('div', 'jp-air-GpuPanel-toolbar');
    const select = el('select', 'jp-air-GpuPanel-range');
    select.title = 'Time range of the charts';
    select.setAttribute('aria-label', 'Time range');
    for (const [key, { label }] of Object.entries(RANGES)) {
      const option = el('option', undefined, label);
      option.value = key;
      select.appendChild(option);
    }
    select.value = this._range;
    select.addEventListener('change', () => {
      if (isRangeKey(select.value)) {
        this.range = select.value;
      }
    });
    this._rangeSelect = select;
    toolbar.appendChild(Styling.wrapSelect(select));

    const refresh = el(
      'button',
      'jp-Button jp-mod-minimal jp-ToolbarButtonComponent jp-air-GpuPanel-refresh'
    );
    refresh.type = 'button';
    refresh.title = 'Take a sample now';
    refresh.setAttribute('aria-label', 'Refresh');
    refreshIcon.element({
      container: refresh,
      tag: 'span',
      stylesheet: 'toolbarButton'
    });
    refresh.addEventListener('click', () => {
      void this.refresh();
    });
    this._refreshButton = refresh;
    toolbar.appendChild(refresh);
    header.appendChild(toolbar);

    this._status = el('div', 'jp-air-GpuPanel-status', 'Waiting for data…');
    this._status.setAttribute('aria-live', 'polite');
    header.appendChild(this._status);
    node.appendChild(header);

    const paused = el('div', 'jp-air-GpuPanel-paused');
    paused.setAttribute('role', 'status');
    this._pausedText = el('span', 'jp-air-GpuPanel-pausedText');
    paused.appendChild(this._pausedText);
    const resume = el(
      'button',
      'jp-Button jp-mod-styled jp-mod-accept jp-air-GpuPanel-resume',
      'Resume'
    );
    resume.type = 'button';
    resume.addEventListener('click', () => this.resume());
    paused.appendChild(resume);
    paused.hidden = true;
    this._pausedNode = paused;
    node.appendChild(paused);

    const body = el('div', 'jp-air-GpuPanel-body');
    this._heading = el('div', 'jp-air-GpuPanel-source');
    this._heading.hidden = true;
    body.appendChild(this._heading);
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

    this._body = body;
    node.appendChild(body);
  }

  private _renderAll(): void {
    const model = this._model;
    const loaded = model.loaded;

    const nvml = model.nvml;
    const noGpu = loaded && (!nvml?.available || model.gpus.length === 0);
    this._noGpu.hidden = !noGpu;
    if (noGpu) {
      const reason = nvml?.available
        ? 'NVML reports no GPU.'
        : (nvml?.reason ?? 'NVML is not available.');
      if (this._noGpuReason.textContent !== reason) {
        this._noGpuReason.textContent = reason;
        this._noGpuReason.title = reason;
      }
    }

    for (const card of this._gpuCards) {
      card.update(model);
    }
    this._hostCard.node.hidden = !loaded;
    if (loaded) {
      this._hostCard.update(model);
    }

    const driver: string[] = [];
    if (nvml?.available && nvml.driver_version) {
      driver.push(`Driver ${nvml.driver_version}`);
    }
    if (nvml?.available && nvml.cuda_driver_version) {
      driver.push(`CUDA ${nvml.cuda_driver_version}`);
    }
    const driverText = driver.join(' · ');
    if (this._driver.textContent !== driverText) {
      this._driver.textContent = driverText;
    }
    this._renderNodes();
    this._renderStatus();
  }

  /** The node selector and the heading, shown while jobs have nodes. */
  private _renderNodes(): void {
    const host = this._localHost;
    const here = host ? `This server (${host})` : 'This server';
    const options = [
      ['', here],
      ...this._nodes.map(n => [
        nodeKey(n),
        `job ${n.job} · node ${n.node} (${hostOf(n)})`
      ])
    ];
    const select = this._nodeSelect;
    const key = JSON.stringify(options);
    if (key !== this._nodeOptions) {
      this._nodeOptions = key;
      select.textContent = '';
      for (const [value, label] of options) {
        const option = el('option', undefined, label);
        option.value = value;
        select.appendChild(option);
      }
    }
    const source = this._source;
    select.value = nodeKey(source);
    const shown = this._nodes.length > 0 || source !== null;
    this._nodeRow.hidden = !shown;
    this._heading.hidden = !shown;
    const heading = source
      ? `Node ${source.node} (${hostOf(source)}) of job ${source.job}`
      : here;
    if (this._heading.textContent !== heading) {
      this._heading.textContent = heading;
      this._heading.title = heading;
    }
  }

  private _renderPaused(): void {
    const reason = this._paused;
    this._pausedNode.hidden = reason === null;
    this.node.classList.toggle('jp-mod-paused', reason !== null);
    if (reason === null) {
      return;
    }
    this._pausedNode.dataset.reason = reason;
    this._pausedText.textContent =
      reason === 'idle'
        ? `Paused after ${formatDuration(this._settings.idleTimeout)} ` +
          'without activity. Reopen the panel or click Resume to continue.'
        : 'Paused while this browser tab is hidden.';
  }

  private _renderStatus(): void {
    this._loading.hidden = this._model.loaded || this._error !== null;
    let text: string;
    let title = '';
    const model = this._model;
    const status = this._status;
    status.classList.toggle('jp-mod-error', this._error !== null);
    if (this._paused !== null) {
      text = 'Paused';
      if (model.loaded) {
        title = `Last update ${formatClock(model.now)}`;
      }
    } else if (this._error !== null) {
      text = `Update failed: ${this._error}`;
      title = text;
    } else if (!model.loaded) {
      text = this._inFlight ? 'Loading…' : 'Waiting for data…';
    } else {
      text = `Updated ${formatClock(model.now)}`;
      title =
        `Polling every ${formatDuration(this._settings.pollInterval)}; ` +
        `server samples every ${formatDuration(model.interval)}`;
    }
    if (this._notice !== null && this._error === null) {
      text = `${this._notice} · ${text}`;
      title = title ? `${this._notice}\n${title}` : this._notice;
    }
    if (status.textContent !== text) {
      status.textContent = text;
    }
    if (status.title !== title) {
      status.title = title;
    }
  }

  private _serverSettings: ServerConnection.ISettings;
  private _settings: IGpuPanelSettings;
  private _range: RangeKey;
  private _model = new GpuModel();
  private _poll: Poll;
  private _activity: ActivityMonitor;
  private _paused: PauseReason | null = null;
  private _error: string | null = null;
  /** Why the panel left a job node, in the status line until the next pick. */
  private _notice: string | null = null;
  private _inFlight = false;
  /** The job node shown, or null for this server. */
  private _source: IJobNode | null = null;
  /** Counts the switches of `_source`: an answer asked for before one is stale. */
  private _shows = 0;
  /** The nodes of running jobs, from the latest answer of this server. */
  private _nodes: IJobNode[] = [];
  /** What this server last answered up to, to ask for little while a node is shown. */
  private _local: Query = {};
  private _localHost: string | null = null;
  private _nodeOptions = '';
  private _queue: Promise<void> = Promise.resolve();
  private _plotly: PlotlyLib | null = null;
  private _theme: IChartTheme | null = null;
  private _frame = 0;
  private _measures = 0;
  private _bodyWidth = -1;
  private _resizeObserver: ResizeObserver | null = null;

  private _gpuCards: GpuCard[] = [];
  private _hostCard!: HostCard;
  private _rangeSelect!: HTMLSelectElement;
  private _nodeRow!: HTMLLabelElement;
  private _nodeSelect!: HTMLSelectElement;
  private _heading!: HTMLDivElement;
  private _refreshButton!: HTMLButtonElement;
  private _status!: HTMLDivElement;
  private _pausedNode!: HTMLDivElement;
  private _pausedText!: HTMLSpanElement;
  private _body!: HTMLDivElement;
  private _loading!: HTMLDivElement;
  private _noGpu!: HTMLDivElement;
  private _noGpuReason!: HTMLDivElement;
  private _gpuList!: HTMLDivElement;
  private _driver!: HTMLDivElement;
}

export namespace GpuPanel {
  export interface IOptions {
    /** Initial settings. */
    settings?: Partial<IGpuPanelSettings>;
    /** Server connection settings (default: the page's). */
    serverSettings?: ServerConnection.ISettings;
  }
}
