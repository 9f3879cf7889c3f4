import { mergeHealth } from './health';
import type {
  IGpuInfo,
  IGpuResponse,
  IGpuState,
  IHostInfo,
  INvmlStatus
} from './types';

/** A nullable numeric column. */
export type Column = (number | null)[];

/** The columns kept for one GPU. */
export interface IGpuSeries {
  util: Column;
  mem: Column;
  temp: Column;
  power: Column;
}

/** What one merge changed. */
export interface IMergeResult {
  /** The buffer was replaced (first answer, `reset: true`, new inventory). */
  reset: boolean;
  /** The GPU list (index, name, totals) differs from the one held before. */
  inventoryChanged: boolean;
  /** Number of samples added. */
  added: number;
}

/**
 * Convert Unix seconds to the number plotly shows as local wall-clock time.
 *
 * Plotly date axes display numbers as UTC; shifting by the time-zone offset
 * makes them read as the browser's local time.
 */
export function toLocalMs(t: number): number {
  const ms = t * 1000;
  return ms - new Date(ms).getTimezoneOffset() * 60000;
}

/**
 * Index of the first element of the ascending `values` that is >= `value`
 * (`values.length` when there is none).
 */
export function lowerBound(values: number[], value: number): number {
  let lo = 0;
  let hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

function emptySeries(n: number): IGpuSeries {
  const nulls = (): Column => new Array<number | null>(n).fill(null);
  return { util: nulls(), mem: nulls(), temp: nulls(), power: nulls() };
}

function sameInventory(a: IGpuInfo[], b: IGpuInfo[]): boolean {
  if (a.length !== b.length) {
    return false;
  }
  return a.every((gpu, i) => {
    const other = b[i];
    return (
      gpu.index === other.index &&
      gpu.name === other.name &&
      (gpu.uuid ?? null) === (other.uuid ?? null) &&
      gpu.mem_total_mib === other.mem_total_mib &&
      gpu.power_limit_w === other.power_limit_w
    );
  });
}

/**
 * The client-side copy of the GPU sampler's history: columnar arrays merged
 * from the increments the server answers, trimmed to the history window.
 */
export class GpuHistory {
  /** Sample times, Unix seconds, ascending. */
  t: number[] = [];
  /** Sample times as plotted (local-time milliseconds), aligned with `t`. */
  x: number[] = [];
  /** Host CPU percent. */
  cpu: Column = [];
  /** Host memory used, MiB. */
  mem: Column = [];
  /** One series per GPU, aligned with `gpus`. */
  gpu: IGpuSeries[] = [];

  gpus: IGpuInfo[] = [];
  state: IGpuState[] = [];
  nvml: INvmlStatus | null = null;
  host: IHostInfo = {};
  inventory: string | null = null;
  /** Server time of the latest answer, Unix seconds. */
  now = 0;
  /** Sampling interval of the server, seconds. */
  interval = 10;
  /** History window of the server, seconds. */
  history = 7200;
  /** The server's sampler had paused for idleness before the latest answer. */
  serverPaused = false;
  /** Incremented by every merge. */
  revision = 0;

  /** Whether an answer was merged yet. */
  get loaded(): boolean {
    return this.inventory !== null;
  }

  /** Number of samples held. */
  get size(): number {
    return this.t.length;
  }

  /** Time of the last sample held, or null. */
  get lastTime(): number | null {
    return this.t.length ? this.t[this.t.length - 1] : null;
  }

  /** The query that asks the server only for what is missing. */
  query(): { since?: number; inventory?: string } {
    const query: { since?: number; inventory?: string } = {};
    const last = this.lastTime;
    if (this.inventory !== null) {
      query.inventory = this.inventory;
      if (last !== null) {
        query.since = last;
      }
    }
    return query;
  }

  /** Forget everything (the next query asks for the whole history). */
  clear(): void {
    this.t = [];
    this.x = [];
    this.cpu = [];
    this.mem = [];
    this.gpu = [];
    this.gpus = [];
    this.state = [];
    this.nvml = null;
    this.host = {};
    this.inventory = null;
    this.revision++;
  }

  /** Merge one server answer. */
  merge(response: IGpuResponse): IMergeResult {
    const samples = response.samples ?? { t: [], cpu: [], mem: [], gpu: [] };
    const reset =
      response.reset === true ||
      this.inventory === null ||
      response.inventory !== this.inventory;

    let inventoryChanged = false;
    if (response.gpus !== undefined && response.gpus !== null) {
      inventoryChanged =
        this.inventory === null || !sameInventory(this.gpus, response.gpus);
      this.gpus = response.gpus;
    } else if (reset && this.inventory === null) {
      inventoryChanged = true;
      this.gpus = [];
    }
    const nGpus = this.gpus.length;

    this.now = response.now;
    this.interval = response.interval > 0 ? response.interval : this.interval;
    this.history = response.history > 0 ? response.history : this.history;
    this.serverPaused = !!response.paused;
    // nvml, host and gpus come only with a new inventory id (docs/api.md).
    if (response.nvml !== undefined) {
      this.nvml = response.nvml;
    }
    if (response.host !== undefined) {
      this.host = response.host;
    }
    const held = reset ? [] : this.state;
    this.state = (response.state ?? []).map((state, i) => ({
      ...state,
      health: mergeHealth(held[i]?.health, state.health)
    }));
    this.inventory = response.inventory ?? '';

    let added = 0;
    const times = samples.t ?? [];
    if (reset) {
      const n = times.length;
      this.t = times.slice();
      this.x = this.t.map(toLocalMs);
      this.cpu = fit(samples.cpu, n);
      this.mem = fit(samples.mem, n);
      this.gpu = [];
      for (let i = 0; i < nGpus; i++) {
        const columns = samples.gpu?.[i];
        this.gpu.push(
          columns
            ? {
                util: fit(columns.util, n),
                mem: fit(columns.mem, n),
                temp: fit(columns.temp, n),
                power: fit(columns.power, n)
              }
            : emptySeries(n)
        );
      }
      added = n;
    } else {
      // Keep the series aligned with the inventory, whatever happened.
      while (this.gpu.length < nGpus) {
        this.gpu.push(emptySeries(this.t.length));
      }
      this.gpu.length = nGpus;

      const last = this.lastTime;
      let start = 0;
      if (last !== null) {
        while (start < times.length && times[start] <= last) {
          start++;
        }
      }
      for (let k = start; k < times.length; k++) {
        this.t.push(times[k]);
        this.x.push(toLocalMs(times[k]));
        this.cpu.push(samples.cpu?.[k] ?? null);
        this.mem.push(samples.mem?.[k] ?? null);
        for (let i = 0; i < nGpus; i++) {
          const columns = samples.gpu?.[i];
          const series = this.gpu[i];
          series.util.push(columns?.util?.[k] ?? null);
          series.mem.push(columns?.mem?.[k] ?? null);
          series.temp.push(columns?.temp?.[k] ?? null);
          series.power.push(columns?.power?.[k] ?? null);
        }
        added++;
      }
    }

    this.trim();
    this.revision++;
    return { reset, inventoryChanged, added };
  }

  /** Drop the samples older than the history window. */
  trim(): void {
    if (!this.t.length) {
      return;
    }
    const cutoff = this.now - this.history;
    const k = lowerBound(this.t, cutoff);
    if (k <= 0) {
      return;
    }
    this.t.splice(0, k);
    this.x.splice(0, k);
    this.cpu.splice(0, k);
    this.mem.splice(0, k);
    for (const series of this.gpu) {
      series.util.splice(0, k);
      series.mem.splice(0, k);
      series.temp.splice(0, k);
      series.power.splice(0, k);
    }
  }

  /** The latest value of a column, or null. */
  static latest(column: Column): number | null {
    return column.length ? (column[column.length - 1] ?? null) : null;
  }
}

/** A copy of `column` with exactly `n` entries (missing ones null). */
function fit(column: Column | undefined, n: number): Column {
  if (!column) {
    return new Array<number | null>(n).fill(null);
  }
  const out = column.slice(0, n);
  while (out.length < n) {
    out.push(null);
  }
  return out;
}
