/**
 * A sweep in the runs table: one row for the sweep (its state, trials and
 * best objective), its trials under it when expanded, each with its run of
 * the page when there is one; the runs of its trials leave the table's top
 * level, so that a sweep of 50 trials is one row until opened.
 */

import { formatMetric } from './format';
import type { IRun, ISweep, ISweepTrial } from './types';

/** One row of the runs table. */
export type TableRow =
  | { kind: 'run'; run: IRun }
  | { kind: 'sweep'; sweep: ISweep; run: IRun | null; expanded: boolean }
  | { kind: 'trial'; sweep: ISweep; trial: ISweepTrial; run: IRun | null };

/** The most runs one comparison overlays (the compare route's limit). */
export const MAX_COMPARED = 10;

/** What a sweep optimizes: its metric and whether lower is better. */
export function objectiveOf(sweep: ISweep): {
  metric: string;
  minimize: boolean;
} {
  const [direction, metric] = Object.entries(sweep.objective)[0] ?? [
    'minimize',
    ''
  ];
  return { metric, minimize: direction === 'minimize' };
}

/**
 * The runs of a page as the table shows them: a sweep where its first run
 * of the page (its own, or a trial's) is, its trials after it when expanded
 * (by number, each with its job's newest run of the page), the other runs
 * as they are. A sweep with no run on this page is not shown here.
 */
export function tableRows(
  runs: readonly IRun[],
  sweeps: readonly ISweep[],
  expanded: ReadonlySet<string>
): TableRow[] {
  const byRun = new Map<string, ISweep>();
  const byJob = new Map<string, ISweep>();
  for (const sweep of sweeps) {
    if (sweep.run_id) {
      byRun.set(sweep.run_id, sweep);
    }
    for (const trial of sweep.trials) {
      if (trial.run_id) {
        byRun.set(trial.run_id, sweep);
      }
      if (trial.job_id) {
        byJob.set(trial.job_id, sweep);
      }
    }
  }
  const sweepOf = (run: IRun): ISweep | undefined =>
    byRun.get(run.run_id) ??
    (run.job_id ? byJob.get(run.job_id) : undefined) ??
    (run.parent_run_id ? ownRun(sweeps, run.parent_run_id) : undefined);

  const rows: TableRow[] = [];
  const placed = new Set<string>();
  for (const run of runs) {
    const sweep = sweepOf(run);
    if (sweep === undefined) {
      rows.push({ kind: 'run', run });
      continue;
    }
    if (placed.has(sweep.id)) {
      continue; // under its sweep
    }
    placed.add(sweep.id);
    const open = expanded.has(sweep.id);
    const own = runs.find(r => r.run_id === sweep.run_id) ?? null;
    rows.push({ kind: 'sweep', sweep, run: own, expanded: open });
    if (open) {
      for (const trial of [...sweep.trials].sort(
        (a, b) => a.number - b.number
      )) {
        rows.push({ kind: 'trial', sweep, trial, run: trialRun(runs, trial) });
      }
    }
  }
  return rows;
}

function ownRun(sweeps: readonly ISweep[], runId: string): ISweep | undefined {
  return sweeps.find(sweep => sweep.run_id === runId);
}

/** A trial's run of the page: its job's newest (a retry's), else its first. */
export function trialRun(
  runs: readonly IRun[],
  trial: ISweepTrial
): IRun | null {
  return (
    (trial.job_id && runs.find(run => run.job_id === trial.job_id)) ||
    runs.find(run => run.run_id === trial.run_id) ||
    null
  );
}

/** The trials that ended, in the study's words. */
function ended(sweep: ISweep): number {
  return sweep.trials.filter(t => t.state !== 'RUNNING').length;
}

/** `2 of 3 trials · 1 running · best loss 0.5 (trial 0)`. */
export function sweepSummary(sweep: ISweep): string {
  const parts = [`${ended(sweep)} of ${sweep.trials_planned} trials`];
  const running = sweep.trials.length - ended(sweep);
  if (running > 0) {
    parts.push(`${running} running`);
  }
  if (sweep.best !== null && sweep.best.value !== null) {
    const { metric } = objectiveOf(sweep);
    parts.push(
      `best ${metric} ${formatMetric(sweep.best.value)} (trial ${sweep.best.number})`
    );
  }
  return parts.join(' · ');
}

/** A parameter's value, short: a number to 4 significant digits. */
function paramText(value: unknown): string {
  return typeof value === 'number' ? formatMetric(value) : String(value);
}

/** `x=2 lr=0.001`, in the order the study gives them. */
export function trialParams(trial: ISweepTrial): string {
  return Object.entries(trial.params)
    .map(([name, value]) => `${name}=${paramText(value)}`)
    .join(' ');
}

/** `pruned at step 3`, `loss 0.5 ★` (the best), `running`, `failed`. */
export function trialOutcome(sweep: ISweep, trial: ISweepTrial): string {
  switch (trial.state) {
    case 'COMPLETE': {
      const best = sweep.best?.number === trial.number ? ' ★' : '';
      return `${objectiveOf(sweep).metric} ${formatMetric(trial.value ?? undefined)}${best}`;
    }
    case 'PRUNED':
      return trial.pruned_step === null
        ? 'pruned'
        : `pruned at step ${trial.pruned_step}`;
    case 'FAIL':
      return 'failed';
    default:
      return 'running';
  }
}

/**
 * The runs to compare of a sweep's trials: those with a run, the completed
 * best first, then the others by number; at most `MAX_COMPARED`.
 */
export function comparedTrials(sweep: ISweep, runs: readonly IRun[]): string[] {
  const { minimize } = objectiveOf(sweep);
  const score = (t: ISweepTrial) =>
    t.value === null ? Infinity : minimize ? t.value : -t.value;
  const order = [...sweep.trials].sort(
    (a, b) => score(a) - score(b) || a.number - b.number
  );
  const ids: string[] = [];
  for (const trial of order) {
    const runId = trialRun(runs, trial)?.run_id ?? trial.run_id;
    if (runId && !ids.includes(runId)) {
      ids.push(runId);
    }
  }
  return ids.slice(0, MAX_COMPARED);
}
