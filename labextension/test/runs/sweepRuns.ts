/**
 * A sweep of `x` minimizing loss and its page of runs, as the runs routes
 * give them: trial 0 completed (loss 0.5, the best), trial 1 pruned at step
 * 3, trial 2 running; a run of the notebook made outside the sweep before
 * and after it.
 */

import type { IRun, ISweep, ISweepTrial } from '../../src/runs/types';

export function runOf(id: string, extra: Partial<IRun> = {}): IRun {
  return {
    run_id: id,
    name: id,
    status: 'FINISHED',
    start_time: 1000,
    end_time: 2000,
    duration_ms: 1000,
    attempt: 1,
    resumed_from: null,
    resumed_step: null,
    job_id: null,
    cell_id: null,
    notebook: null,
    parent_run_id: null,
    kind: null,
    experiment_id: '1',
    params: {},
    metrics: {},
    depth: 0,
    run_url: null,
    ...extra
  };
}

function trial(
  number: number,
  state: ISweepTrial['state'],
  value: number | null,
  pruned: number | null = null
): ISweepTrial {
  return {
    number,
    state,
    params: { x: number, lr: 0.00012345 },
    value,
    job_id: `job-${number}`,
    run_id: `t${number}`,
    pruned_step: pruned,
    message: null
  };
}

export function sweepOf(extra: Partial<ISweep> = {}): ISweep {
  const trials = [
    trial(0, 'COMPLETE', 0.5),
    trial(1, 'PRUNED', null, 3),
    trial(2, 'RUNNING', null)
  ];
  return {
    id: 'sw-0000abcd',
    owner: 'ada',
    status: 'RUNNING',
    message: null,
    run_id: 's',
    objective: { minimize: 'loss' },
    trials_planned: 4,
    best: trials[0],
    trials,
    ...extra
  };
}

/** The page as the route nests it: the trials (newest first) under the sweep's run. */
export function sweepPage(): IRun[] {
  const trialRun = (n: number, status: IRun['status']) =>
    runOf(`t${n}`, {
      name: `cell-trial-${n}`,
      status,
      job_id: `job-${n}`,
      parent_run_id: 's',
      depth: 1,
      params: { x: String(n) },
      metrics: { loss: 1 - n / 10 }
    });
  return [
    runOf('after', { job_id: 'job-after' }),
    runOf('s', { name: 'cell-sweep', status: 'RUNNING', attempt: null }),
    trialRun(2, 'RUNNING'),
    trialRun(1, 'KILLED'),
    trialRun(0, 'FINISHED'),
    runOf('before', { job_id: 'job-before' })
  ];
}
