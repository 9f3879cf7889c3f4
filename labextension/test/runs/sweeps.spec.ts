import {
  comparedTrials,
  MAX_COMPARED,
  sweepSummary,
  tableRows,
  TableRow,
  trialOutcome,
  trialParams
} from '../../src/runs/sweeps';
import type { ISweepTrial } from '../../src/runs/types';
import { runOf, sweepOf, sweepPage } from './sweepRuns';

/** A row as `kind:what`, what reads best in an expectation. */
function shown(rows: TableRow[]): string[] {
  return rows.map(row =>
    row.kind === 'run'
      ? `run:${row.run.run_id}`
      : row.kind === 'sweep'
        ? `sweep:${row.sweep.id}:${row.run?.run_id ?? '-'}`
        : `trial:${row.trial.number}:${row.run?.run_id ?? '-'}`
  );
}

describe('a sweep in the runs table', () => {
  it('is one row where its run is, its trial runs under it only when expanded', () => {
    const runs = sweepPage();
    const sweep = sweepOf();
    expect(shown(tableRows(runs, [sweep], new Set()))).toEqual([
      'run:after',
      'sweep:sw-0000abcd:s',
      'run:before'
    ]);
    expect(shown(tableRows(runs, [sweep], new Set([sweep.id])))).toEqual([
      'run:after',
      'sweep:sw-0000abcd:s',
      'trial:0:t0',
      'trial:1:t1',
      'trial:2:t2',
      'run:before'
    ]);
    expect(tableRows(runs, [], new Set()).map(r => r.kind)).toEqual(
      runs.map(() => 'run')
    ); // no sweep known: the runs as they are
  });

  it('stands where its first run is when its own run is on another page or hidden', () => {
    const runs = sweepPage().filter(run => run.run_id !== 's');
    const rows = tableRows(runs, [sweepOf()], new Set(['sw-0000abcd']));
    expect(shown(rows)).toEqual([
      'run:after',
      'sweep:sw-0000abcd:-',
      'trial:0:t0',
      'trial:1:t1',
      'trial:2:t2',
      'run:before'
    ]);
  });

  it("shows a trial with its job's newest run (a retry's), none before its run is made", () => {
    const retry = runOf('t1-retry', {
      job_id: 'job-1',
      attempt: 2,
      parent_run_id: 's',
      depth: 1
    });
    const sweep = sweepOf();
    sweep.trials[2] = { ...sweep.trials[2], run_id: null, job_id: null };
    const runs = sweepPage().filter(run => run.run_id !== 't2');
    runs.splice(2, 0, retry); // newest first
    const rows = tableRows(runs, [sweep], new Set([sweep.id]));
    expect(shown(rows)).toEqual([
      'run:after',
      'sweep:sw-0000abcd:s',
      'trial:0:t0',
      'trial:1:t1-retry',
      'trial:2:-',
      'run:before'
    ]);
  });

  it('sums up its trials and its best objective in one line', () => {
    expect(sweepSummary(sweepOf())).toBe(
      '2 of 4 trials · 1 running · best loss 0.5 (trial 0)'
    );
    const none = sweepOf({ best: null, status: 'RUNNING' });
    expect(sweepSummary({ ...none, trials: [] })).toBe('0 of 4 trials');
  });

  it('words each trial: its params, its objective (the best starred), PRUNED at its step', () => {
    const sweep = sweepOf();
    const [done, pruned, running] = sweep.trials;
    expect(trialParams(done)).toBe('x=0 lr=0.0001234');
    expect(trialOutcome(sweep, done)).toBe('loss 0.5 ★');
    expect(trialOutcome(sweep, pruned)).toBe('pruned at step 3');
    expect(trialOutcome(sweep, running)).toBe('running');
    const failed: ISweepTrial = { ...running, state: 'FAIL' };
    expect(trialOutcome(sweep, failed)).toBe('failed');
    const other: ISweepTrial = { ...done, number: 5, value: 0.75 };
    expect(trialOutcome(sweep, other)).toBe('loss 0.75');
  });

  it('compares its trials best first, then the others by number, ten at most', () => {
    const sweep = sweepOf();
    const better = {
      ...sweep.trials[0],
      number: 3,
      value: 0.25,
      run_id: 't3',
      job_id: 'job-3'
    };
    sweep.trials.push(better);
    expect(comparedTrials(sweep, sweepPage())).toEqual([
      't3',
      't0',
      't1',
      't2'
    ]);
    const maximized = { ...sweep, objective: { maximize: 'loss' } };
    expect(comparedTrials(maximized, sweepPage())).toEqual([
      't0',
      't3',
      't1',
      't2'
    ]);

    const many = sweepOf({
      trials: Array.from({ length: 12 }, (_, n) => ({
        ...sweep.trials[0],
        number: n,
        value: n,
        run_id: `r${n}`,
        job_id: `j${n}`
      }))
    });
    expect(comparedTrials(many, [])).toHaveLength(MAX_COMPARED);
    expect(comparedTrials(many, [])[0]).toBe('r0');
  });
});
