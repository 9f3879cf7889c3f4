/**
 * The curves of a comparison: one trace per run, named so that runs of the
 * same name stay apart, by step or by time since each run's first point.
 */

import { elapsedUnit } from '../common/time';
import type { ICompare, ICompareRun } from './types';

/** What the x axis of the comparison shows. */
export enum XAxis {
  Step = 'step',
  /** Time since each run's first point, so that runs started apart overlay. */
  Time = 'time'
}

/** Characters of a run id that tell runs apart (as MLflow's UI and git do). */
export const SHORT_ID = 7;

/**
 * The legend name of each run, in order: its name (its id when it has none),
 * with its short id added when another run has the same name.
 */
export function legendNames(runs: readonly ICompareRun[]): string[] {
  const labels = runs.map(run => run.name || run.run_id);
  const counts = new Map<string, number>();
  for (const label of labels) {
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  return runs.map((run, i) =>
    counts.get(labels[i])! > 1 && labels[i] !== run.run_id
      ? `${labels[i]} (${run.run_id.slice(0, SHORT_ID)})`
      : labels[i]
  );
}

/** One run's trace. */
export interface ICurve {
  name: string;
  x: number[];
  y: (number | null)[];
}

/** Where a resumed retry restarted, on the step axis. */
export interface IMark {
  x: number;
  label: string;
}

/** The traces of `metric`, the x axis' title, and the restarts to mark. */
export interface ICurves {
  curves: ICurve[];
  xTitle: string;
  marks: IMark[];
}

/**
 * The traces of `metric` for each compared run. By time, x is the time
 * since the run's first point (`time_origin`: the first step the training
 * logged, not MLflow's start of the run, which the job makes before its
 * ranks start), in seconds, minutes or hours as the longest run needs.
 */
export function curves(
  compare: ICompare,
  metric: string | null,
  axis: XAxis
): ICurves {
  const series = metric === null ? {} : (compare.metrics[metric] ?? {});
  const names = legendNames(compare.runs);
  const points = compare.runs.map(run => series[run.run_id] ?? []);
  if (axis === XAxis.Step) {
    return {
      xTitle: 'step',
      curves: compare.runs.map((_, i) => ({
        name: names[i],
        x: points[i].map(p => p.step),
        y: points[i].map(p => p.value)
      })),
      // A retry's curve goes on from its checkpoint's step: the line says where.
      marks: compare.runs.flatMap((run, i) =>
        run.resumed_step === null
          ? []
          : [
              {
                x: run.resumed_step,
                label: `${names[i]} resumed at step ${run.resumed_step}`
              }
            ]
      )
    };
  }
  const elapsed = compare.runs.map((run, i) => {
    const origin = run.time_origin ?? points[i][0]?.timestamp ?? 0;
    return points[i].map(p => p.timestamp - origin);
  });
  let span = 0;
  for (const times of elapsed) {
    for (const ms of times) {
      span = Math.max(span, ms);
    }
  }
  const unit = elapsedUnit(span);
  return {
    xTitle: `time since first point (${unit.label})`,
    marks: [],
    curves: compare.runs.map((_, i) => ({
      name: names[i],
      x: elapsed[i].map(ms => ms / unit.ms),
      y: points[i].map(p => p.value)
    }))
  };
}
