import type { Query } from '../../src/common/api';
import { RunsModel } from '../../src/runs/model';
import { sleep, until } from '../helpers';
import type { IProgress } from '../../src/logs/types';
import type { IRun, IRunsPage, ISweep } from '../../src/runs/types';
import { runOf, sweepOf, sweepPage } from './sweepRuns';
import {
  formatMetric,
  formatRunDuration,
  formatStart,
  storeLabel
} from '../../src/runs/format';

const last = <T>(items: T[]): T => items[items.length - 1];

function run(
  id: string,
  name: string,
  status: IRun['status'] = 'FINISHED'
): IRun {
  return runOf(id, {
    name,
    status,
    job_id: `job-${id}`,
    params: { lr: id === 'a' ? '0.1' : '0.2' },
    metrics: { loss: 0.5 }
  });
}

/** Answers like the runs routes: two pages of one run each for train.ipynb. */
class FakeServer {
  calls: [string, Query][] = [];
  /** Experiments of store `k` made since the panel opened (`air run`, a schedule). */
  madeLater: { id: string; name: string }[] = [];
  /** The first page's run's status. */
  firstStatus: IRun['status'] = 'FINISHED';
  /** `jobs`' answer: the active jobs' attempts' progress. */
  jobs: {
    id: string;
    attempts: { attempt: number; progress: IProgress | null }[];
  }[] = [];
  /** `runs/sweeps`' answer; a page of a sweep's runs in place of the first. */
  sweeps: ISweep[] = [];
  sweepRuns: IRun[] | null = null;

  request = async <T>(
    endPoint: string,
    _init?: RequestInit,
    query: Query = {}
  ): Promise<T> => {
    this.calls.push([endPoint, query]);
    switch (endPoint) {
      case 'runs/notebook':
        return (
          query.path === 'train.ipynb'
            ? {
                store: 'k',
                tracking_uri: 'sqlite:///x',
                experiment_id: '1',
                source: 'job'
              }
            : {
                store: null,
                tracking_uri: null,
                experiment_id: null,
                source: 'none'
              }
        ) as T;
      case 'runs/stores':
        return {
          stores: [
            { store: 'k', tracking_uri: 'sqlite:///x', current: true },
            {
              store: 'old',
              tracking_uri: 'sqlite:///p/mlflow.db',
              current: false
            }
          ]
        } as T;
      case 'runs/experiments':
        return {
          experiments:
            query.store === 'old'
              ? [
                  { id: '7', name: 'other' },
                  { id: '8', name: '/Users/ada/train' }
                ]
              : [{ id: '1', name: '/Users/ada/train' }, ...this.madeLater]
        } as T;
      case 'runs': {
        const second = query.page_token === 'p2';
        const page: IRunsPage = {
          runs: second
            ? [run('b', 'second', 'FAILED')]
            : (this.sweepRuns ?? [run('a', 'first', this.firstStatus)]),
          next_page_token: second ? null : 'p2',
          params: ['lr'],
          metrics: ['loss', 'system/cpu_utilization_percentage'],
          tracking: []
        };
        return page as T;
      }
      case 'jobs':
        return { jobs: this.jobs } as T;
      case 'runs/sweeps':
        return { sweeps: this.sweeps } as T;
      case 'runs/compare':
        return {
          runs: [
            { run_id: 'a', name: 'first', status: 'FINISHED', start_time: 0 },
            { run_id: 'b', name: 'second', status: 'FAILED', start_time: 0 }
          ],
          params: { lr: { a: '0.1', b: '0.2' } },
          // Sorted as the route sorts them: a system metric before the user's.
          metrics: {
            acc: {},
            'system/cpu_utilization_percentage': {},
            train_loss: { a: [], b: [] }
          }
        } as T;
    }
    throw new Error(`unexpected ${endPoint}`);
  };

  queries(endPoint: string): Query[] {
    return this.calls.filter(([e]) => e === endPoint).map(([, q]) => q);
  }
}

describe('RunsModel', () => {
  let server: FakeServer;
  let model: RunsModel;
  beforeEach(() => {
    server = new FakeServer();
    model = new RunsModel({ request: server.request, interval: 3600 });
  });
  afterEach(() => model.dispose());

  it("asks nothing until shown, then shows the notebook's experiment and its first page", async () => {
    model.notebookPath = 'train.ipynb';
    await sleep(50);
    expect(server.calls).toEqual([]);
    model.active = true;
    await until(() => model.page !== null);
    expect(server.queries('runs/notebook')).toEqual([{ path: 'train.ipynb' }]);
    expect(model.experiments).toEqual([{ id: '1', name: '/Users/ada/train' }]);
    expect(model.page!.runs.map(r => r.name)).toEqual(['first']);
    expect(server.queries('runs')[0]).toMatchObject({
      store: 'k',
      experiment: '1',
      max_results: 100
    });
  });

  it('reads the experiment picker again while shown: new experiments appear', async () => {
    const now = jest.spyOn(Date, 'now');
    try {
      now.mockReturnValue(1_000_000);
      model.notebookPath = 'train.ipynb';
      model.active = true;
      await until(() => model.page !== null);
      server.madeLater = [{ id: '2', name: 'cli' }];
      await model.refresh();
      expect(model.experiments.map(e => e.name)).toEqual(['/Users/ada/train']);

      now.mockReturnValue(1_000_000 + 30_000);
      await model.refresh();
      expect(model.experiments.map(e => e.name)).toEqual([
        '/Users/ada/train',
        'cli'
      ]);
    } finally {
      now.mockRestore();
    }
  });

  it('asks for pages of the size the settings give', async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    model.pageSize = 1000;
    await until(() => last(server.queries('runs')).max_results === 1000);
    model.pageSize = 5000; // beyond what the route serves: ignored
    expect(model.pageSize).toBe(1000);
  });

  it('a notebook without an experiment shows no page and asks for no runs', async () => {
    model.notebookPath = 'other.ipynb';
    model.active = true;
    await until(() => model.resolved);
    expect(model.experimentId).toBeNull();
    expect(server.queries('runs')).toEqual([]);
  });

  it('pages forward and back with the page tokens', async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    expect(model.hasNextPage).toBe(true);
    model.nextPage();
    await until(() => model.page!.runs[0].name === 'second');
    expect(model.pageNumber).toBe(2);
    expect(model.hasNextPage).toBe(false);
    model.previousPage();
    await until(() => model.page!.runs[0].name === 'first');
    expect(model.pageNumber).toBe(1);
    expect(last(server.queries('runs')).page_token).toBeUndefined();
  });

  it('search and status filter go to the server and restart at the first page', async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    model.nextPage();
    await until(
      () => model.pageNumber === 2 && model.page!.runs[0].name === 'second'
    );
    model.setStatus('FAILED');
    model.setSearch("params.lr = '0.2'");
    await until(() => last(server.queries('runs')).search !== undefined);
    expect(last(server.queries('runs'))).toMatchObject({
      status: 'FAILED',
      search: "params.lr = '0.2'",
      page_token: undefined
    });
    expect(model.pageNumber).toBe(1);
  });

  it("two picked runs are compared; the user's loss is shown until another metric is picked", async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    model.toggleSelected('a');
    await sleep(20);
    expect(server.queries('runs/compare')).toEqual([]);
    model.toggleSelected('b');
    await until(() => model.comparison !== null);
    expect(server.queries('runs/compare')).toEqual([
      { store: 'k', runs: 'a,b' }
    ]);
    expect(model.comparison!.params).toEqual({ lr: { a: '0.1', b: '0.2' } });
    expect(model.compareMetric).toBe('train_loss');
    model.setCompareMetric('acc');
    expect(model.compareMetric).toBe('acc');
    // The table's primary metric is the pick only when the page has that metric.
    expect(model.primaryMetric).toBe('loss');
    model.toggleSelected('a');
    expect(model.comparison).toBeNull();
  });

  it("groups a sweep's trials under it, and compares them in one click", async () => {
    server.sweeps = [sweepOf()];
    server.sweepRuns = sweepPage();
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    expect(last(server.queries('runs/sweeps'))).toEqual({
      store: 'k',
      experiment: '1'
    });
    const kinds = () => model.rows.map(row => row.kind);
    expect(kinds()).toEqual(['run', 'sweep', 'run']);
    expect(model.rows).toBe(model.rows); // the same rows until something changes

    model.toggleSweep('sw-0000abcd');
    expect(model.isExpanded('sw-0000abcd')).toBe(true);
    expect(kinds()).toEqual(['run', 'sweep', 'trial', 'trial', 'trial', 'run']);
    await model.refresh(); // a poll keeps it open
    expect(kinds()).toHaveLength(6);

    model.compareTrials('sw-0000abcd');
    expect(model.selected).toEqual(['t0', 't1', 't2']);
    await until(() => model.comparison !== null);
    expect(last(server.queries('runs/compare')).runs).toBe('t0,t1,t2');

    model.toggleSweep('sw-0000abcd');
    expect(kinds()).toEqual(['run', 'sweep', 'run']);
  });

  it("reads its running runs' progress from their jobs, and only while some run", async () => {
    const progress: IProgress = {
      step: 12,
      total: null,
      fraction: null,
      step_time_s: 0.5,
      samples_per_s: null,
      tokens_per_s: null,
      eta_s: null,
      updated: 1,
      line: 'step 12, 2 steps/s',
      mfu: { value: null, why: 'no GPU' }
    };
    server.jobs = [{ id: 'job-a', attempts: [{ attempt: 1, progress }] }];
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    expect(server.queries('jobs')).toEqual([]); // nothing runs: no question
    expect(model.progressOf(model.page!.runs[0])).toBeNull();

    server.firstStatus = 'RUNNING';
    await model.refresh();
    expect(server.queries('jobs')).toHaveLength(1);
    expect(model.progressOf(model.page!.runs[0])).toEqual(progress);
  });

  it("shows the user's metric columns, and the system ones one click away", async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    expect(model.tableMetrics).toEqual(['loss']);
    expect(model.systemMetricCount).toBe(1);
    model.setShowSystemMetrics(true);
    expect(model.tableMetrics).toEqual([
      'loss',
      'system/cpu_utilization_percentage'
    ]);
    expect(model.primaryMetric).toBe('loss');
    model.setCompareMetric('system/cpu_utilization_percentage');
    expect(model.primaryMetric).toBe('system/cpu_utilization_percentage');
  });

  it("lists the stores the user's jobs used; another store shows its experiment of the same name", async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    expect(model.stores.map(s => s.store)).toEqual(['k', 'old']);
    expect(model.storePicked).toBe(false);

    model.setStore('old');
    expect(model.page).toBeNull();
    await until(() => model.page !== null);
    expect(model.storePicked).toBe(true);
    expect(model.experiments.map(e => e.id)).toEqual(['7', '8']);
    expect(model.experimentId).toBe('8');
    expect(last(server.queries('runs'))).toMatchObject({
      store: 'old',
      experiment: '8'
    });
    await model.refresh(); // polling keeps the picked store
    expect(last(server.queries('runs')).store).toBe('old');

    model.setStore('k');
    await until(() => last(server.queries('runs')).store === 'k');
    expect(model.storePicked).toBe(false);
    expect(model.experimentId).toBe('1');
  });

  it('a store without an experiment of that name waits for a pick', async () => {
    model.notebookPath = 'other.ipynb'; // no experiment in its own store
    model.active = true;
    await until(() => model.resolved);
    model.setStore('old');
    await until(() => model.resolved);
    expect(model.experimentId).toBeNull();
    expect(server.queries('runs')).toEqual([]);
    model.setExperiment('7');
    await until(() => model.page !== null);
    expect(last(server.queries('runs'))).toMatchObject({
      store: 'old',
      experiment: '7'
    });
  });

  it('another notebook in focus forgets the experiment, the page and the selection', async () => {
    model.notebookPath = 'train.ipynb';
    model.active = true;
    await until(() => model.page !== null);
    model.toggleSelected('a');
    model.notebookPath = 'other.ipynb';
    expect(model.page).toBeNull();
    expect(model.selected).toEqual([]);
    await until(() => model.resolved);
    expect(model.experimentId).toBeNull();
  });
});

describe('runs formatting', () => {
  it('words durations as the MLflow UI does', () => {
    expect(formatRunDuration(null)).toBe('');
    expect(formatRunDuration(850)).toBe('850ms');
    expect(formatRunDuration(12_340)).toBe('12.3s');
    expect(formatRunDuration(270_000)).toBe('4.5min');
    expect(formatRunDuration(7_200_000)).toBe('2.0h');
  });

  it('writes the start as short as it can, 24-hour, date first', () => {
    const now = new Date(2026, 10, 30, 21, 0, 0).getTime();
    const at = (...parts: [number, number, number, number, number, number]) =>
      formatStart(new Date(...parts).getTime(), now);
    expect(at(2026, 10, 30, 19, 0, 1)).toBe('19:00:01'); // today
    expect(at(2026, 1, 3, 7, 5, 9)).toBe('02-03 07:05'); // this year
    expect(at(2025, 10, 30, 19, 0, 1)).toBe('2025-11-30'); // before
    expect(formatStart(null)).toBe('');
  });

  it('names a store by what tells it apart in a narrow sidebar', () => {
    const named = (tracking_uri: string, current = false) =>
      storeLabel({ store: 'k', tracking_uri, current });
    expect(named('sqlite:////home/ada/air/mlflow.db', true)).toBe(
      'Default store'
    );
    expect(named('sqlite:////home/ada/project/mlflow.db')).toBe(
      'project/mlflow.db'
    );
    expect(named('file:///data/runs/mlruns')).toBe('runs/mlruns');
    expect(named('http://mlflow.team:5000')).toBe('mlflow.team:5000');
  });

  it('shows metrics in 4 significant digits and a diverged one as NaN', () => {
    expect(formatMetric(0.123456)).toBe('0.1235');
    expect(formatMetric(null)).toBe('NaN');
    expect(formatMetric(undefined)).toBe('');
  });
});
