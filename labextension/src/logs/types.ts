/**
 * The answers of the jobs and logs routes (docs/api.md, "Jobs and logs"): the
 * server's models in jupyter_air/jobs/api_models.py, which tests/jobs/test_api_types.py
 * checks these against.
 */

/** A node of an attempt on a cluster (Ray, Slurm), once the job's nodes are placed. */
export interface IAttemptNode {
  node: number;
  node_id: string;
  ip: string;
  hostname: string;
  /** The node in its cluster's words (`Slurm node gpu-b`); null before labels. */
  label?: string | null;
}

/** An attempt's MFU: a fraction of its GPUs' peak, or why it has none. */
export interface IMfu {
  value: number | null;
  /** How it was computed, or why it is absent ("no GPU", "unknown GPU 'X'"). */
  why: string;
}

/** How far an attempt is, from its ranks' step marks. */
export interface IProgress {
  /** The latest step marked. */
  step: number;
  /** Its planned steps; null when unknown (no percentage, no ETA). */
  total: number | null;
  /** `step / total` (at most 1); null when its length is unknown. */
  fraction: number | null;
  /** Smoothed seconds per step. */
  step_time_s: number | null;
  samples_per_s: number | null;
  tokens_per_s: number | null;
  /** Seconds left; null without a total or a step time, and once it ended. */
  eta_s: number | null;
  /** Unix seconds of the latest mark. */
  updated: number;
  /** `step 4,210 / 10,000 (42 %), ETA 18:40 (23 min)`. */
  line: string;
  mfu: IMfu;
}

/** One try of a job. */
export interface IAttempt {
  attempt: number;
  status: string;
  run_id: string | null;
  started: number;
  ended: number | null;
  exit_codes: (number | null)[] | null;
  failed_rank: number | null;
  message: string | null;
  /** The attempt's MLflow run page, or null. */
  run_url: string | null;
  /** Empty on one machine. */
  nodes: IAttemptNode[];
  /** The checkpoint it started from (a retry's, or `--resume JOB`'s), and its step. */
  resumed_from: string | null;
  resumed_step: number | null;
  /** Null before its first step is marked (or where no marks are at hand). */
  progress: IProgress | null;
  /** The collective its ranks were last seen waiting in, if a set of stacks named one. */
  hang: string | null;
}

/** `GET jupyter-air/jobs/<id>`. */
export interface IJob {
  id: string;
  /** The outcome as soon as the last attempt settles it (`finishing` then true). */
  status: string;
  /** Its supervisor is ending the MLflow run and attaching the logs. */
  finishing: boolean;
  /** What waits for the tracking server, in one line; null when nothing does. */
  tracking: string | null;
  owner: string;
  created: number;
  started: number | null;
  ended: number | null;
  message: string | null;
  kind: string;
  nproc_per_node: number;
  nnodes: number;
  /** `local` or `ray`. */
  backend: string;
  max_retries: number;
  /** Where its checkpoints go (`AIR_CHECKPOINT_DIR`), the same for every attempt. */
  checkpoint_dir: string | null;
  experiment_id: string | null;
  run_name: string | null;
  /** Without credentials. */
  tracking_uri: string | null;
  logs_expired: boolean;
  attempts: IAttempt[];
  /** The job that submitted this one (a scheduled notebook's task, for its cells). */
  parent_id: string | null;
  /** The jobs this one submitted that the caller may view, oldest first. */
  children: string[];
  /** Its notifications, one line each; for its owner only (empty for anyone else). */
  notifications: string[];
}

/** `GET jupyter-air/jobs`. */
export interface IJobsResponse {
  jobs: IJob[];
}

export type Level = 'info' | 'warning' | 'error';

/** One log line. */
export interface ILogLine {
  /** Unix seconds when the line arrived. */
  t: number;
  node: number;
  rank: number;
  stream: 'out' | 'err';
  level: Level;
  text: string;
  /**
   * A session's lines only: the session cell whose time span holds the line
   * (null between cells, or while its cell still runs).
   */
  cell?: number | null;
  /** A session's lines only: the notebook cell's id, when it was known. */
  cell_id?: string | null;
}

/** One ended cell of a session (`GET jupyter-air/jobs/<id>/cells`). */
export interface ISessionCell {
  /** Its number in the session, from 1. */
  cell: number;
  /** Its child MLflow run. */
  run_id: string;
  /** The notebook cell's id, or null. */
  cell_id: string | null;
  /** Unix seconds. */
  started: number;
  ended: number;
  /** The job status its run ended with. */
  status: string;
}

/** `GET jupyter-air/jobs/<id>/cells`. */
export interface ICellsResponse {
  job: string;
  cells: ISessionCell[];
}

/** `GET jupyter-air/jobs/<id>/logs`. */
export interface ILogsResponse {
  job: string;
  attempt: number;
  /** Number of attempts of the job so far. */
  attempts: number;
  /** The job's status. */
  status: string;
  lines: ILogLine[];
  /** Pass back as `cursor` for the lines after these. */
  next: string;
  /** The job ended and every log of the attempt was read to its end. */
  done: boolean;
}

/** A job permission, lowest first (docs/api.md, "Permissions"). */
export type PermissionLevel = 'CAN_VIEW' | 'CAN_MANAGE_RUN' | 'CAN_MANAGE';

/** What a 403 of the jobs routes says when the caller lacks a job permission. */
export interface IAccessDenied {
  job: string;
  /** The permission missing. */
  needed: PermissionLevel | string;
  /** The job's owner: who can grant it. */
  owner: string;
}

/** One rank's Python stacks (py-spy's dump), or why they could not be read. */
export interface IRankStacks {
  rank: number;
  node: number;
  pid: number;
  text: string | null;
  error: string | null;
}

/** Where the ranks of a set wait, from their flight recorders. */
export interface IHang {
  kind: 'absent' | 'mismatch' | 'waiting' | 'none' | 'unknown';
  /** `rank 0 waits in all_reduce #812 (float32[1024], gloo); rank 1 never entered it…` */
  line: string;
  /** A line a rank. */
  details: string[];
  group: string | null;
  seq: number | null;
  op: string | null;
  waiting: number[];
  /** The ranks that never entered it, or entered another one. */
  culprits: number[];
}

/** One set of stacks of an attempt's ranks. */
export interface IStackSet {
  attempt: number;
  name: string;
  /** Why it was taken: asked for, a likely hang, a cancel after one. */
  reason: string;
  time: number;
  ranks: IRankStacks[];
  /** What the ranks' flight recorders say; null when none was on. */
  hang: IHang | null;
}

/** `GET`/`POST jupyter-air/jobs/<id>/stacks`. */
export interface IStacksResponse {
  job: string;
  sets: IStackSet[];
}
