/**
 * The answers of `GET jupyter-air/gpu`, `POST jupyter-air/gpu/sample` and
 * `GET jupyter-air/jobs/<id>/gpu` (see docs/api.md).
 */

/** NVML status. */
export interface INvmlStatus {
  available: boolean;
  reason: string | null;
  driver_version?: string | null;
  cuda_driver_version?: string | null;
}

/** Host figures. */
export interface IHostInfo {
  hostname?: string | null;
  cpu_count?: number | null;
  mem_total_mib?: number | null;
}

/** One GPU of the inventory. */
export interface IGpuInfo {
  index: number;
  name: string | null;
  uuid?: string | null;
  mem_total_mib: number | null;
  power_limit_w: number | null;
  /** The SM clock's maximum, what a throttled clock is a share of. */
  max_sm_clock_mhz?: number | null;
}

/** One column per metric for one GPU, aligned with `samples.t`. */
export interface IGpuColumns {
  util: (number | null)[];
  mem: (number | null)[];
  temp: (number | null)[];
  power: (number | null)[];
}

/** Columnar samples. */
export interface ISamples {
  t: number[];
  cpu: (number | null)[];
  mem: (number | null)[];
  gpu: IGpuColumns[];
}

/** What a running warm session's ranks do: run a cell, or hold their GPUs idle. */
export type SessionActivityKind = 'idle' | 'running';

/** A running warm session's activity (`owner.session`, docs/api.md). */
export interface ISessionActivity {
  activity: SessionActivityKind;
  /** Unix seconds: when it became idle, or when the running cell started. */
  since: number;
  /** The running cell, or the latest that ended (null before the first). */
  cell: number | null;
  /** Seconds without a cell after which it stops; 0: never; null: not known. */
  idle_timeout_s: number | null;
}

/**
 * Owner of a GPU process: `kernel`, `job`, or `other`: a job the caller may
 * not view, sent with no id, name or pid, only its memory.
 */
export interface IProcessOwner {
  kind: string;
  id?: string | null;
  name?: string | null;
  /** A running job's efficiency hints (idle GPUs, full memory, a silent rank). */
  hints?: string[];
  /** Present when the job is a running warm session. */
  session?: ISessionActivity;
}

/** A process holding memory on a GPU (`pid` and `name` are null for another user's job). */
export interface IGpuProcess {
  pid: number | null;
  name: string | null;
  mem_mib: number | null;
  owner: IProcessOwner | null;
}

/** One thing wrong with a GPU's hardware (`state[i].health.problems`). */
export interface IGpuProblem {
  /** thermal, power, hw_slowdown, ecc, retired_pages, remapped_rows, xid */
  kind: string;
  text: string;
  severity: 'warn' | 'error' | string;
  /** Unix seconds: since when a throttle lasts; when an XID was received. */
  since: number | null;
  /** A throttled GPU's SM clock, in % of its maximum. */
  clock_percent: number | null;
}

/** ECC error counts; null where the GPU does not report that counter. */
export interface IEccCounts {
  corrected_volatile: number | null;
  uncorrected_volatile: number | null;
  corrected_aggregate: number | null;
  uncorrected_aggregate: number | null;
}

/**
 * What NVML says of a GPU's hardware: its problems in every answer; the figures
 * (`ecc` to `unavailable`) only when they changed after the request's `since`
 * (the client keeps those it holds). null where the GPU does not report one.
 */
export interface IGpuHealth {
  problems: IGpuProblem[];
  ecc?: IEccCounts | null;
  retired_pages?: {
    single_bit: number;
    double_bit: number;
    pending: boolean;
  } | null;
  remapped_rows?: {
    corrected: number;
    uncorrected: number;
    pending: boolean;
    failed: boolean;
  } | null;
  /** Why this GPU's XID events are not watched (MIG, vGPU), or null. */
  xids_unwatched?: string | null;
  unavailable?: Record<string, string>;
}

/**
 * One MIG slice of a GPU in MIG mode: its instance ids, profile ("1g.10gb"),
 * memory, and the processes on it, by their place in its GPU's `processes`
 * (so that what is hidden there stays hidden here).
 */
export interface IMigSlice {
  index: number;
  uuid: string | null;
  gpu_instance: number | null;
  compute_instance: number | null;
  profile: string | null;
  mem_total_mib: number | null;
  mem_used_mib: number | null;
  processes: number[];
}

/** Latest state of one GPU. */
export interface IGpuState {
  status: 'ok' | 'lost' | 'error' | string;
  message: string | null;
  processes: IGpuProcess[];
  health?: IGpuHealth;
  /** Its MIG slices; only a GPU in MIG mode has them. */
  mig?: IMigSlice[];
}

/** A node of a running multi-node job, whose GPUs the panel can show. */
export interface IJobNode {
  job: string;
  attempt: number;
  node: number;
  node_id?: string | null;
  ip?: string | null;
  hostname?: string | null;
}

/** The whole answer. */
export interface IGpuResponse {
  now: number;
  interval: number;
  history: number;
  paused: boolean;
  reset?: boolean;
  /** Left out when the client's inventory id is current, as are host and gpus. */
  nvml?: INvmlStatus;
  host?: IHostInfo;
  inventory: string;
  gpus?: IGpuInfo[];
  samples: ISamples;
  state: IGpuState[];
  /** The nodes of running multi-node jobs (answers about this server only). */
  nodes?: IJobNode[];
}

/** The answer about one node of a job. */
export interface IJobGpuResponse extends IGpuResponse {
  job: string;
  attempt: number;
  node: number;
  running: boolean;
}
