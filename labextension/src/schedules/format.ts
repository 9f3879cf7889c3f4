/**
 * Words and orders of the Schedules view that need no DOM.
 */

import type { ISweepTask, ITask } from './types';

/**
 * A fire time as the schedule's clock reads it, with its offset:
 * `2026-12-02T02:30:00+01:00` -> `2026-12-02 02:30:00 +01:00`.
 */
export function formatFireTime(iso: string): string {
  const match =
    /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)?$/.exec(
      iso
    );
  if (!match) {
    return iso;
  }
  const offset = match[3] === 'Z' || !match[3] ? 'UTC' : match[3];
  return `${match[1]} ${match[2]} ${offset}`;
}

/** How far `iso` is from `now` (ms): "in 5 s", "in 3 min", "2 h ago". */
export function relativeTime(iso: string, now: number = Date.now()): string {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) {
    return '';
  }
  const seconds = Math.round((at - now) / 1000);
  const size = Math.abs(seconds);
  let text: string;
  if (size < 60) {
    text = `${size} s`;
  } else if (size < 3600) {
    text = `${Math.round(size / 60)} min`;
  } else if (size < 48 * 3600) {
    text = `${Math.round(size / 3600)} h`;
  } else {
    text = `${Math.round(size / 86400)} d`;
  }
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

/**
 * The tasks in the order they can run, in stages: a task comes one stage
 * after the last of the tasks it depends on. Keys the graph lacks are
 * ignored, and a cycle (the server refuses one) cannot loop.
 */
export function taskStages(tasks: readonly ITask[]): ITask[][] {
  const byKey = new Map(tasks.map(t => [t.task_key, t]));
  const stage = new Map<string, number>();
  const visiting = new Set<string>();
  const stageOf = (task: ITask): number => {
    const known = stage.get(task.task_key);
    if (known !== undefined) {
      return known;
    }
    if (visiting.has(task.task_key)) {
      return 0;
    }
    visiting.add(task.task_key);
    let value = 0;
    for (const key of task.depends_on) {
      const before = byKey.get(key);
      if (before) {
        value = Math.max(value, stageOf(before) + 1);
      }
    }
    visiting.delete(task.task_key);
    stage.set(task.task_key, value);
    return value;
  };
  const stages: ITask[][] = [];
  for (const task of tasks) {
    const index = stageOf(task);
    (stages[index] ??= []).push(task);
  }
  return stages.filter(s => s !== undefined);
}

/**
 * What a sweep task searches, in a few words:
 * `minimize loss, 20 trials, 4 at once`.
 */
export function sweepLine(sweep: ISweepTask): string {
  const { minimize, maximize } = sweep.objective;
  const goal = minimize ? `minimize ${minimize}` : `maximize ${maximize}`;
  const trials = `${sweep.trials} trial${sweep.trials === 1 ? '' : 's'}`;
  return `${goal}, ${trials}, ${sweep.parallel} at once`;
}
