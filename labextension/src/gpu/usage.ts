/**
 * What the GPU panel's usage view shows: GPU-hours per user over the last
 * day or week, the idle ones, and the jobs that held the GPUs
 * (`jupyter-air/gpu/usage`, the caller's own unless they are a Hub admin).
 */

import { shortJobId } from './sessions';

/** The windows the view offers, as the server takes them. */
export const USAGE_WINDOWS = {
  '24h': 'Last 24 h',
  '7d': 'Last 7 days'
} as const;
export type UsageWindow = keyof typeof USAGE_WINDOWS;

export interface IJobHours {
  job: string;
  name: string | null;
  gpus: number;
  gpu_hours: number;
  idle_gpu_hours: number;
}

export interface IUserHours {
  user: string;
  gpu_hours: number;
  idle_gpu_hours: number;
  jobs: IJobHours[];
}

/** `GET jupyter-air/gpu/usage`. */
export interface IUsageResponse {
  window: string;
  since: number;
  now: number;
  idle_threshold: number;
  all_users: boolean;
  users: IUserHours[];
}

/** One row of the table: a user's total, or one of their jobs under it. */
export interface IUsageRow {
  kind: 'user' | 'job';
  /** The user, or the job's short id and run name. */
  label: string;
  /** The full job id (a tooltip), or the user. */
  title: string;
  gpus: string;
  hours: string;
  idle: string;
}

/** "5.5", "0.25", "12": GPU-hours, two decimals at most. */
export function formatHours(hours: number): string {
  return String(Math.round(hours * 100) / 100);
}

/** The table's rows: each user's total, then their jobs, most hours first. */
export function usageRows(doc: IUsageResponse): IUsageRow[] {
  const rows: IUsageRow[] = [];
  for (const user of doc.users) {
    rows.push({
      kind: 'user',
      label: user.user,
      title: user.user,
      gpus: '',
      hours: formatHours(user.gpu_hours),
      idle: formatHours(user.idle_gpu_hours)
    });
    for (const job of user.jobs) {
      const name = job.name ? ` ${job.name}` : '';
      rows.push({
        kind: 'job',
        label: `${shortJobId(job.job)}${name}`,
        title: `job ${job.job}`,
        gpus: String(job.gpus),
        hours: formatHours(job.gpu_hours),
        idle: formatHours(job.idle_gpu_hours)
      });
    }
  }
  return rows;
}

/** Whose figures the view shows, in words. */
export function usageScope(doc: IUsageResponse): string {
  const idle = `idle: under ${doc.idle_threshold} % utilization`;
  return doc.all_users
    ? `Every user's jobs (you are a Hub admin); ${idle}`
    : `Your jobs; ${idle}`;
}
