import { curves, legendNames, XAxis } from '../../src/runs/curves';
import type { ICompare, ICompareRun } from '../../src/runs/types';

const MINUTE = 60_000;

function run(
  id: string,
  name: string | null,
  origin: number | null = 0
): ICompareRun {
  return {
    run_id: id,
    name,
    status: 'FINISHED',
    start_time: origin === null ? null : origin - 17_000,
    time_origin: origin,
    resumed_step: null
  };
}

describe('legend names', () => {
  it('tell runs of the same name apart by their short ids', () => {
    const names = legendNames([
      run('0123456789abcdef', 'lr-sweep'),
      run('fedcba9876543210', 'lr-sweep'),
      run('aaaaaaaaaaaaaaaa', 'baseline')
    ]);
    expect(names).toEqual([
      'lr-sweep (0123456)',
      'lr-sweep (fedcba9)',
      'baseline'
    ]);
    expect(new Set(names).size).toBe(3);
  });

  it('name a run without a name by its id', () => {
    expect(legendNames([run('abc', null), run('def', 'x')])).toEqual([
      'abc',
      'x'
    ]);
  });
});

describe('the curves of a comparison', () => {
  // Two runs started an hour apart, each logging for 10 minutes.
  const hour = 3_600_000;
  const compare: ICompare = {
    runs: [run('a', 'first', 1_000_000), run('b', 'second', 1_000_000 + hour)],
    params: {},
    metrics: {
      loss: {
        a: [
          { step: 0, timestamp: 1_000_000 + MINUTE, value: 1 },
          { step: 1, timestamp: 1_000_000 + 10 * MINUTE, value: 0.5 }
        ],
        b: [
          { step: 0, timestamp: 1_000_000 + hour + MINUTE, value: 0.9 },
          { step: 1, timestamp: 1_000_000 + hour + 5 * MINUTE, value: null }
        ]
      }
    }
  };

  it('by time, start each run at its time origin: runs an hour apart overlay', () => {
    // The origin (the server's: the run's first point of the user's metrics), not
    // MLflow's start, made 17 s before.
    const drawn = curves(compare, 'loss', XAxis.Time);
    expect(drawn.xTitle).toBe('time since first point (min)');
    expect(drawn.curves.map(c => c.name)).toEqual(['first', 'second']);
    expect(drawn.curves.map(c => c.x)).toEqual([
      [1, 10],
      [1, 5]
    ]);
    expect(drawn.curves[1].y).toEqual([0.9, null]);
  });

  it('by time, count from the first point of a run without an origin', () => {
    const unknown = { ...compare, runs: [run('a', 'first', null)] };
    const drawn = curves(unknown, 'loss', XAxis.Time);
    expect(drawn.curves[0].x).toEqual([0, 9]);
  });

  it('by time, count in seconds when the runs are short', () => {
    const short: ICompare = {
      ...compare,
      runs: [run('a', 'first', 0)],
      metrics: { loss: { a: [{ step: 0, timestamp: 45_000, value: 1 }] } }
    };
    const drawn = curves(short, 'loss', XAxis.Time);
    expect(drawn.xTitle).toBe('time since first point (s)');
    expect(drawn.curves[0].x).toEqual([45]);
  });

  it('by step, plot the steps under the legend names', () => {
    const drawn = curves(compare, 'loss', XAxis.Step);
    expect(drawn.xTitle).toBe('step');
    expect(drawn.curves.map(c => [c.name, c.x])).toEqual([
      ['first', [0, 1]],
      ['second', [0, 1]]
    ]);
  });

  it("by step, mark where a resumed retry's curve goes on from", () => {
    const retried = {
      ...compare,
      runs: [compare.runs[0], { ...compare.runs[1], resumed_step: 1 }]
    };
    expect(curves(retried, 'loss', XAxis.Step).marks).toEqual([
      { x: 1, label: 'second resumed at step 1' }
    ]);
    expect(curves(retried, 'loss', XAxis.Time).marks).toEqual([]);
    expect(curves(compare, 'loss', XAxis.Step).marks).toEqual([]);
  });

  it('draw empty traces for a metric a run did not log', () => {
    const drawn = curves(compare, 'accuracy', XAxis.Step);
    expect(drawn.curves.map(c => c.x)).toEqual([[], []]);
  });
});
