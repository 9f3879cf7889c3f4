/**
 * The documents of the schedules routes (docs/api.md, "Schedules").
 */

/** Whether a schedule fires. */
export type PauseStatus = 'PAUSED' | 'UNPAUSED';

/** What a schedule run, or one task of it, came to (or is doing). */
export const RUN_STATUSES = [
  'PENDING',
  'RUNNING',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'SKIPPED'
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** The caller's permission on a schedule (the jobs' levels). */
export type Level = 'CAN_VIEW' | 'CAN_MANAGE_RUN' | 'CAN_MANAGE';

/** One task of a schedule's graph. */
export interface ITask {
  task_key: string;
  kind: 'workload' | 'notebook';
  depends_on: string[];
  run_if: string;
  experiment_name: string | null;
  notebook: string | null;
}

/** One task of one schedule run: its job, once submitted. */
export interface ITaskRun {
  task_key: string;
  status: RunStatus;
  job_id: string | null;
  /** The MLflow page of the job's latest attempt. */
  run_url: string | null;
}

export interface IScheduleRun {
  id: string;
  schedule_id: string;
  /** ISO 8601 with the schedule's offset. */
  scheduled_time: string;
  status: RunStatus;
  /** Why it was SKIPPED or FAILED, in words. */
  reason: string | null;
  started: number | null;
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

/** The fields of the "Schedule this notebook" form, as `POST schedules` takes them. */
export interface INotebookScheduleFields {
  notebook: string;
  name: string;
  cron: string;
  timezone: string;
  nproc_per_node: number;
  experiment: string;
}
