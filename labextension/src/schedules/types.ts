/**
 * The documents of the schedules routes (docs/api.md, "Schedules").
 */

/** Whether a schedule fires. */
export type PauseStatus = 'PAUSED' | 'UNPAUSED';

/** A schedule run: RUNNING while a task is pending or running, then its outcome. */
export type RunStatus =
  'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'SKIPPED';

/**
 * A task of a run: PENDING until the tasks it depends on end, SUBMITTING while
 * a scheduler holds it, RUNNING once its job exists, then its job's outcome,
 * or SKIPPED (its `run_if` did not hold).
 */
export type TaskStatus = 'PENDING' | 'SUBMITTING' | RunStatus;

/** The caller's permission on a schedule (the jobs' levels). */
export type Level = 'CAN_VIEW' | 'CAN_MANAGE_RUN' | 'CAN_MANAGE';

/** When a task whose upstream tasks all ended runs (else it is SKIPPED). */
export type RunIf = 'ALL_SUCCESS' | 'ALL_DONE' | 'NONE_FAILED';

/** One task of a schedule's graph. */
export interface ITask {
  task_key: string;
  kind: 'workload' | 'notebook' | 'sweep';
  depends_on: string[];
  run_if: RunIf;
  experiment_name: string | null;
  notebook: string | null;
  /** A workload task's command line (secrets redacted). */
  command: string | null;
  /** What a sweep task searches; null for any other task. */
  sweep: ISweepTask | null;
}

/** A sweep task's search: `minimize` or `maximize` names the metric. */
export interface ISweepTask {
  objective: { minimize?: string; maximize?: string };
  trials: number;
  parallel: number;
  /** Where its study lives (a password masked); null: the owner's AIR_HOME. */
  storage: string | null;
}

/** One task of one schedule run: its job, once submitted. */
export interface ITaskRun {
  task_key: string;
  status: TaskStatus;
  job_id: string | null;
  /** Why it was skipped or failed, in words. */
  message: string | null;
  /** The MLflow run of the job's latest attempt, its experiment and its page. */
  run_id: string | null;
  experiment_id: string | null;
  run_url: string | null;
  /** The jobs of earlier tries of this task in this run (before a repair). */
  previous_job_ids: string[];
  /** A sweep task's sweep, once started (its run is the task's MLflow run). */
  sweep_id: string | null;
  /** The sweeps of earlier tries of a sweep task in this run (before a repair). */
  previous_sweep_ids: string[];
  /** The jobs the task's job started (a notebook task's cells), oldest first. */
  children: IChildJob[];
  /**
   * Where a notebook task's job kept its executed notebook (its newest
   * attempt's), on the server's machine; null for a workload task, or before
   * the notebook has run.
   */
  executed_notebook: string | null;
}

/** A job a task's job started, with its MLflow run. */
export interface IChildJob {
  job_id: string;
  status: string;
  run_name: string | null;
  run_id: string | null;
  experiment_id: string | null;
  run_url: string | null;
}

export interface IScheduleRun {
  id: number;
  schedule_id: string;
  /** ISO 8601 with the schedule's offset. */
  scheduled_time: string;
  /** CRON: the schedule fired; RUN_NOW: someone asked. */
  trigger: 'CRON' | 'RUN_NOW';
  status: RunStatus;
  /** Why it was SKIPPED or FAILED, in words. */
  message: string | null;
  created: number;
  ended: number | null;
  tasks: ITaskRun[];
}

export interface ICron {
  expression: string;
  kind: 'quartz' | 'unix';
  timezone: string;
  /** "every day at 02:30 Europe/Paris". */
  words: string;
}

export interface ISchedule {
  id: string;
  name: string;
  owner: string;
  level: Level;
  cron: ICron;
  pause_status: PauseStatus;
  max_concurrent_runs: number;
  catch_up: string;
  /** ISO 8601 with the schedule's offset; empty when paused. */
  next_fire_times: string[];
  created: number;
  updated: number;
  tasks: ITask[];
  /** Newest first. */
  last_runs: IScheduleRun[];
}

/** What `schedules/preview` says of a cron and time zone. */
export interface IPreview {
  kind: 'quartz' | 'unix';
  words: string;
  next_fire_times: string[];
}

/**
 * A task of the form's graph, before it is saved: a notebook (its path from
 * the server's root) or a command line, with its ranks and the tasks it waits for.
 */
export interface ITaskDraft {
  key: string;
  kind: 'notebook' | 'command';
  /** The notebook's path, or the command line. */
  target: string;
  ranks: number;
  dependsOn: string[];
  runIf: RunIf;
}

/** The fields of the "Schedule this notebook" form, as `POST schedules` takes them. */
export interface INotebookScheduleFields {
  notebook: string;
  name: string;
  cron: string;
  timezone: string;
  nproc_per_node: number;
  experiment: string;
}
