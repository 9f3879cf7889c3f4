/**
 * The state of the "GPU resources" panel: settings, the node shown, the
 * job nodes offered, the pause, and the history of samples it polls.
 */

import { ISignal, Signal } from '@lumino/signaling';

import type { Query, Requester } from '../common/api';
import { FetchKind, PollingModel, pollFrequency } from '../common/model';
import { GpuHistory, IMergeResult } from './history';
import type { IGpuResponse, IJobGpuResponse, IJobNode } from './types';

/** Performance entry names (read by browser tests and bench/). */
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

/** The value of a job node in the node selector ('' is this server). */
export function nodeKey(node: IJobNode | null): string {
  return node ? `${node.job}/${node.attempt}/${node.node}` : '';
}

export function hostOf(node: IJobNode): string {
  return node.hostname ?? node.ip ?? 'unknown host';
}

/**
 * Polls `jupyter-air/gpu`, or `jupyter-air/jobs/<id>/gpu` for a node of a
 * running multi-node job, into `history`; `dataChanged` says what a merge
 * (or a switch of node) changed, `stateChanged` everything else.
 */
export class GpuResourcesModel extends PollingModel {
  constructor(options: GpuResourcesModel.IOptions) {
    const settings = { ...DEFAULT_SETTINGS, ...options.settings };
    super({
      name: 'jupyter-air:gpu',
      frequency: pollFrequency(settings.pollInterval),
      idleTimeout: settings.idleTimeout,
      document: options.document
    });
    this._request = options.request;
    this._settings = settings;
    this._range = settings.defaultRange;
  }

  /** The server API this model asks (the panel's usage view asks it too). */
  get request(): Requester {
    return this._request;
  }

  /** Emitted after the history changed (a merge, or cleared for another node). */
  get dataChanged(): ISignal<this, IMergeResult> {
    return this._dataChanged;
  }

  /** Emitted when the charts' time range changes. */
  get rangeChanged(): ISignal<this, RangeKey> {
    return this._rangeChanged;
  }

  /** The samples of the node shown. */
  get history(): GpuHistory {
    return this._history;
  }

  /** The settings in use. */
  get settings(): IGpuPanelSettings {
    return { ...this._settings };
  }

  /** Apply new settings (from the settings registry); invalid values are ignored. */
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
      this.frequency = pollFrequency(next.pollInterval);
    }
    if (next.idleTimeout !== previous.idleTimeout) {
      this.idleTimeout = next.idleTimeout;
    }
    if (next.defaultRange !== previous.defaultRange) {
      this.range = next.defaultRange;
    }
    this.emitChanged();
  }

  /** The time range of the charts. */
  get range(): RangeKey {
    return this._range;
  }
  set range(range: RangeKey) {
    if (!isRangeKey(range) || range === this._range) {
      return;
    }
    this._range = range;
    this._rangeChanged.emit(range);
    this.emitChanged();
  }

  /** The job node shown, or null for this server. */
  get source(): IJobNode | null {
    return this._source;
  }

  /** The nodes of running jobs, from the latest answer of this server. */
  get nodes(): readonly IJobNode[] {
    return this._nodes;
  }

  /** This server's host name, once known. */
  get localHost(): string | null {
    return this._localHost;
  }

  /** Why the panel left a job node, shown until the next pick. */
  get notice(): string | null {
    return this._notice;
  }

  /** Show the GPUs of the node of `key` (see `nodeKey`; '' or unknown: this server). */
  select(key: string): void {
    this._show(this._nodes.find(n => nodeKey(n) === key) ?? null);
    if (this.paused !== null) {
      this.resume();
    } else {
      this.poll();
    }
  }

  protected async fetch(kind: FetchKind): Promise<void> {
    const answer = await this._ask(kind === 'refresh' ? 'POST' : 'GET');
    // The update measured (merge, DOM, charts) ends in the view, once drawn.
    if (typeof performance?.mark === 'function') {
      performance.mark(UPDATE_MARK);
    }
    const result = this._history.merge(answer);
    this._dataChanged.emit(result);
  }

  /**
   * Ask the node shown for what the history misses, and this server for the
   * list of job nodes.
   */
  private async _ask(method: 'GET' | 'POST'): Promise<IGpuResponse> {
    const request = this._request;
    if (this._source !== null) {
      // Only the node list is wanted: ask for no more than the last time.
      this._setNodes(await request<IGpuResponse>('gpu', {}, this._local));
    }
    const source = this._source;
    const shows = this._shows;
    let answer: IGpuResponse;
    if (source === null) {
      answer = await request<IGpuResponse>(
        method === 'POST' ? 'gpu/sample' : 'gpu',
        { method },
        this._history.query()
      );
    } else {
      // A node's sampler runs on its own schedule: refresh only asks again.
      answer = await request<IJobGpuResponse>(
        `jobs/${source.job}/gpu`,
        {},
        {
          ...this._history.query(),
          node: source.node,
          attempt: source.attempt
        }
      );
    }
    if (shows !== this._shows) {
      return this._ask(method); // another node was picked meanwhile
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
    this.emitChanged();
  }

  /** Show the GPUs of a job node (null: of this server), from a fresh history. */
  private _show(source: IJobNode | null, notice: string | null = null): void {
    this._source = source;
    this._shows++;
    this._notice = notice;
    this.clearError();
    this._history.clear();
    this._dataChanged.emit({ reset: true, inventoryChanged: true, added: 0 });
    this.emitChanged();
  }

  private _request: Requester;
  private _settings: IGpuPanelSettings;
  private _range: RangeKey;
  private _history = new GpuHistory();
  private _source: IJobNode | null = null;
  /** Counts the switches of `_source`: an answer asked for before one is stale. */
  private _shows = 0;
  private _nodes: IJobNode[] = [];
  /** What this server last answered up to, to ask for little while a node is shown. */
  private _local: Query = {};
  private _localHost: string | null = null;
  private _notice: string | null = null;
  private _dataChanged = new Signal<this, IMergeResult>(this);
  private _rangeChanged = new Signal<this, RangeKey>(this);
}

export namespace GpuResourcesModel {
  export interface IOptions {
    /** Calls the server API (`requester(serverSettings)`). */
    request: Requester;
    /** Initial settings. */
    settings?: Partial<IGpuPanelSettings>;
    /** The document whose activity counts (tests pass their own). */
    document?: Document;
  }
}
