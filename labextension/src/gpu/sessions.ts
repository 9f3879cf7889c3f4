/**
 * Warm sessions on a GPU: what their processes' owners say they are doing.
 *
 * A session keeps its ranks, and the GPUs they hold, between cells. One that
 * runs no cell holds them for nothing until its idle timeout stops it: the
 * panel shows it as waste ("session a1b2c3 idle 12 min (stops after 30 min)"),
 * and a session in a cell as "running cell 4".
 */

import type { IGpuState, ISessionActivity } from './types';

/** What the panel shows of one session on one GPU. */
export interface ISessionView {
  /** The session's job id. */
  job: string;
  idle: boolean;
  /** "idle 12 min (stops after 30 min)", "running cell 4". */
  activity: string;
  /** Its badge: "session a1b2c3 idle 12 min (stops after 30 min)" or "... running cell 4". */
  badge: string;
  /** The whole story, for a tooltip. */
  title: string;
}

/** "45 s", "12 min", "2 h", "2 h 5 min": a span, rounded down. */
export function formatSpan(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return rest ? `${hours} h ${rest} min` : `${hours} h`;
}

/** The short form of a job id: its random tail ("20261202-061203-a1b2c3" -> "a1b2c3"). */
export function shortJobId(job: string): string {
  const tail = job.split('-').pop();
  return tail || job;
}

/** When an idle session stops on its own: " (stops after 30 min)", or nothing if unknown. */
function stopsAfter(timeout: number | null): string {
  if (timeout === null || !Number.isFinite(timeout) || timeout < 0) {
    return '';
  }
  return timeout === 0
    ? ' (no idle timeout)'
    : ` (stops after ${formatSpan(timeout)})`;
}

/** "idle 12 min (stops after 30 min)" or "running cell 4", at server time `now`. */
export function formatActivity(session: ISessionActivity, now: number): string {
  if (session.activity === 'running') {
    return session.cell === null
      ? 'running a cell'
      : `running cell ${session.cell}`;
  }
  return `idle ${formatSpan(now - session.since)}${stopsAfter(session.idle_timeout_s)}`;
}

/** The view of one session, at server time `now`. */
export function sessionView(
  job: string,
  session: ISessionActivity,
  now: number
): ISessionView {
  const idle = session.activity === 'idle';
  const activity = formatActivity(session, now);
  const title = idle
    ? `Warm session ${job} holds this GPU and runs no cell: ${activity}. ` +
      `Stop it with %air_session stop in its notebook, or air cancel ${job}.`
    : `Warm session ${job}: ${activity}.`;
  return {
    job,
    idle,
    activity,
    badge: `session ${shortJobId(job)} ${activity}`,
    title
  };
}

/** The sessions whose processes are on a GPU, once each, in the order of their processes. */
export function sessionsOn(
  state: IGpuState | undefined,
  now: number
): ISessionView[] {
  const seen = new Map<string, ISessionView>();
  for (const process of state?.processes ?? []) {
    const owner = process.owner;
    if (owner?.kind === 'job' && owner.id && owner.session) {
      if (!seen.has(owner.id)) {
        seen.set(owner.id, sessionView(owner.id, owner.session, now));
      }
    }
  }
  return [...seen.values()];
}
