/**
 * The JSON of the runs routes (docs/api.md, "Runs").
 */

/** MLflow's run statuses (`attributes.status`). */
export const STATUSES = [
  'RUNNING',
  'SCHEDULED',
  'FINISHED',
  'FAILED',
  'KILLED'
] as const;
export type RunStatus = (typeof STATUSES)[number];

/** `GET jupyter-air/runs/notebook?path=`: the notebook's experiment. */
export interface INotebookExperiment {
  store: string | null;
  tracking_uri: string | null;
  experiment_id: string | null;
  source: 'job' | 'default' | 'none';
}

/** A tracking store the caller's jobs used (`GET jupyter-air/runs/stores`). */
export interface ITrackingStore {
  store: string;
  /** Without credentials. */
  tracking_uri: string;
  /** The server's own store. */
  current: boolean;
}

/** `GET jupyter-air/runs/stores`: newest use first. */
export interface IStoresResponse {
  stores: ITrackingStore[];
}

export interface IExperiment {
  id: string;
  name: string;
}

/** One run, as a row of the table. */
export interface IRun {
  run_id: string;
  name: string | null;
  status: RunStatus;
  start_time: number | null;
  end_time: number | null;
  duration_ms: number | null;
  attempt: number | null;
  /** A retry that resumed from a checkpoint: the checkpoint, and its step. */
  resumed_from: string | null;
  resumed_step: number | null;
  job_id: string | null;
  cell_id: string | null;
  notebook: string | null;
  parent_run_id: string | null;
  /** A warm session's run (the parent) or one of its cells' (a child); else null. */
  kind: 'session' | 'session_cell' | null;
  experiment_id: string;
  params: Record<string, string>;
  metrics: Record<string, number | null>;
  /** 0 for a top-level run, 1 for its children, ... */
  depth: number;
  run_url: string | null;
}

/** `GET jupyter-air/runs`: one page, newest first. */
export interface IRunsPage {
  runs: IRun[];
  next_page_token: string | null;
  params: string[];
  metrics: string[];
  /** One line per job of the experiment whose runs wait for their tracking server. */
  tracking: string[];
}

export interface IMetricPoint {
  step: number;
  timestamp: number;
  value: number | null;
}

/** A compared run. */
export interface ICompareRun {
  run_id: string;
  name: string | null;
  status: RunStatus;
  /** MLflow's start time (Unix ms). */
  start_time: number | null;
  /**
   * Where the run's time starts (Unix ms): its first point of the user's
   * metrics, else its start (see `time_origin` in experiment_runs.py).
   */
  time_origin: number | null;
  /** A retry that resumed from a checkpoint: the step it restarted at. */
  resumed_step: number | null;
}

/** `GET jupyter-air/runs/compare`: curves and the params that differ. */
export interface ICompare {
  runs: ICompareRun[];
  params: Record<string, Record<string, string | null>>;
  metrics: Record<string, Record<string, IMetricPoint[]>>;
}

/** Optuna's states of a sweep's trial. */
export type TrialState = 'RUNNING' | 'COMPLETE' | 'PRUNED' | 'FAIL';

/** A sweep's states (`air sweep get`). */
export type SweepStatus =
  'RUNNING' | 'STOPPING' | 'COMPLETED' | 'STOPPED' | 'FAILED';

/** One trial of a sweep, as its study records it. */
export interface ISweepTrial {
  number: number;
  state: TrialState;
  params: Record<string, unknown>;
  /** The objective of a completed trial. */
  value: number | null;
  job_id: string | null;
  /** The run of the trial's job's first attempt, once made. */
  run_id: string | null;
  pruned_step: number | null;
  message: string | null;
}

/** A sweep of the experiment (`GET jupyter-air/runs/sweeps`). */
export interface ISweep {
  id: string;
  owner: string;
  status: SweepStatus;
  message: string | null;
  /** The sweep's own run: its trials' runs are its children. */
  run_id: string | null;
  /** `{"minimize": "val_loss"}` or `{"maximize": ...}`. */
  objective: Record<string, string>;
  trials_planned: number;
  best: ISweepTrial | null;
  trials: ISweepTrial[];
}

/** `GET jupyter-air/runs/sweeps?store=&experiment=`: newest first. */
export interface ISweepsResponse {
  sweeps: ISweep[];
}
