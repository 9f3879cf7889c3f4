import { Signal } from '@lumino/signaling';

import type { RunsModel } from '../../src/runs/model';
import type { RunsTable as RunsTableType } from '../../src/runs/table';
import type { IProgress } from '../../src/logs/types';
import { tableRows } from '../../src/runs/sweeps';
import type { IRun, IRunsPage, ISweep } from '../../src/runs/types';
import { runOf, sweepOf, sweepPage } from './sweepRuns';

let RunsTable: typeof RunsTableType;
beforeAll(async () => {
  // jsdom has no DragEvent, which @lumino/dragdrop extends when imported.
  (globalThis as any).DragEvent ??= class extends MouseEvent {};
  ({ RunsTable } = await import('../../src/runs/table'));
});

function run(id: string, name: string, url: string | null): IRun {
  return runOf(id, { name, metrics: { loss: 0.5 }, run_url: url });
}

/** What the table reads of its model. */
class FakeModel {
  readonly stateChanged = new Signal<this, void>(this);
  page: IRunsPage | null = null;
  selected: readonly string[] = [];
  showSystemMetrics = false;
  systemMetricCount = 0;
  primaryMetric: string | null = 'loss';
  get tableMetrics(): readonly string[] {
    return this.page?.metrics ?? [];
  }
  isSelected(): boolean {
    return false;
  }
  sweeps: ISweep[] = [];
  expanded = new Set<string>();
  get rows() {
    return tableRows(this.page?.runs ?? [], this.sweeps, this.expanded);
  }
  toggleSweep = jest.fn((id: string) => {
    this.expanded.add(id);
    this.stateChanged.emit();
  });
  compareTrials = jest.fn();
  /** By run id. */
  progress: Record<string, IProgress> = {};
  progressOf(run: IRun): IProgress | null {
    return this.progress[run.run_id] ?? null;
  }
}

describe('RunsTable', () => {
  const long = 'resnet50-lr0.1-bs256-with-a-very-long-name';
  let model: FakeModel;
  let table: RunsTableType;
  beforeEach(() => {
    model = new FakeModel();
    table = new RunsTable(model as unknown as RunsModel, {
      openLogs: () => undefined,
      hasCell: () => false,
      openCell: () => undefined
    });
    model.page = {
      runs: [run('a', long, '/mlflow/a'), run('b', 'plain', null)],
      next_page_token: null,
      params: [],
      metrics: ['loss'],
      tracking: []
    };
    model.stateChanged.emit();
  });
  afterEach(() => table.dispose());

  it('holds each name in a label that a narrow sidebar cuts, whole in its tooltip', () => {
    const labels = [
      ...table.node.querySelectorAll<HTMLElement>(
        '.jp-air-RunsPanel-name > .jp-air-RunsPanel-label'
      )
    ];
    expect(labels.map(l => [l.tagName, l.textContent])).toEqual([
      ['A', long],
      ['SPAN', 'plain']
    ]);
    expect(labels[0].title).toBe(`${long}: open the run in MLflow`);
    expect(labels[1].title).toBe('plain');
  });

  it('marks the heads that the sidebar styles: status, sticky name, short heads, metric', () => {
    const heads = [...table.node.querySelectorAll('th')];
    const marked = heads
      .filter(th => th.className)
      .map(th => [th.textContent, th.className, th.title]);
    expect(marked).toEqual([
      ['Status', 'jp-air-RunsPanel-statusHead', ''],
      ['Run', 'jp-air-RunsPanel-nameHead', ''],
      ['Duration', 'jp-air-RunsPanel-durationHead', 'Duration'],
      ['Attempt', 'jp-air-RunsPanel-attemptHead', 'Attempt'],
      ['loss', 'jp-air-RunsPanel-primaryHead', 'loss (the metric compared)']
    ]);
  });

  it('puts what tells runs apart first: status, name, duration, attempt, primary metric', () => {
    model.page = {
      ...model.page!,
      params: ['lr'],
      metrics: ['acc', 'loss'],
      runs: [{ ...run('a', 'a', null), metrics: { acc: 0.9, loss: 0.25 } }]
    };
    model.stateChanged.emit();
    const heads = () =>
      [...table.node.querySelectorAll('th')].map(th => th.textContent);
    const cells = () =>
      [...table.node.querySelectorAll('td')].map(td => td.textContent);
    const first = ['', 'Status', 'Run', 'Duration', 'Attempt'];
    expect(heads()).toEqual([
      ...first,
      'loss',
      'Start',
      'Job',
      'param lr',
      'acc'
    ]);
    expect(cells().slice(1, 6)).toEqual(['finished', 'a', '1.0s', '1', '0.25']);
    expect(cells()[9]).toBe('0.9');

    // Another metric picked for comparison takes the primary place.
    model.primaryMetric = 'acc';
    model.stateChanged.emit();
    expect(heads().slice(5)).toEqual([
      'acc',
      'Start',
      'Job',
      'param lr',
      'loss'
    ]);

    // Runs with no metric of the user's have no metric column.
    model.primaryMetric = null;
    model.page = { ...model.page!, params: [], metrics: [] };
    model.stateChanged.emit();
    expect(heads()).toEqual([...first, 'Start', 'Job']);
  });

  it("says where a retry resumed, its checkpoint and step in the cell's tooltip", () => {
    const retry = {
      ...run('c', 'retry', null),
      attempt: 2,
      resumed_from: '/ckpt/checkpoint-400',
      resumed_step: 400
    };
    model.page = { ...model.page!, runs: [retry, run('d', 'first', null)] };
    model.stateChanged.emit();
    const marks = [...table.node.querySelectorAll('.jp-air-RunsPanel-resumed')];
    expect(marks).toHaveLength(1); // the first attempt has none
    const cell = marks[0].parentElement as HTMLTableCellElement;
    expect(cell.textContent).toBe('2 ↻ 400');
    // The step is its own part, which a narrow sidebar leaves to the tooltip.
    const step = cell.querySelector('.jp-air-RunsPanel-resumedStep');
    expect(step?.textContent).toBe(' 400');
    expect(cell.title).toBe('Resumed from /ckpt/checkpoint-400, step 400');
  });

  it("shows a running run's progress under its name, its speed and MFU in the tooltip", () => {
    model.progress = {
      a: {
        step: 4210,
        total: 10000,
        fraction: 0.421,
        step_time_s: 0.33,
        samples_per_s: 194,
        tokens_per_s: null,
        eta_s: 1914,
        updated: new Date(2026, 11, 6, 9, 0, 0).getTime() / 1000,
        line: 'step 4,210 / 10,000 (42 %), ETA 09:31 (32 min)',
        mfu: { value: null, why: 'no GPU' }
      }
    };
    model.page = { ...model.page! };
    model.stateChanged.emit();
    const rows = table.node.querySelectorAll('tr.jp-air-RunsPanel-run');
    const shown = rows[0].querySelector<HTMLElement>(
      '.jp-air-RunsPanel-name .jp-air-RunsPanel-progress'
    )!;
    expect(shown.textContent).toBe('42 % · ETA 09:31');
    expect(shown.querySelector('progress')!.value).toBeCloseTo(0.421);
    expect(shown.title).toBe(
      'step 4,210 / 10,000 (42 %), ETA 09:31 (32 min)\n0.33 s/step, 194 samples/s\nMFU: none: no GPU'
    );
    expect(rows[1].querySelector('.jp-air-RunsPanel-progress')).toBeNull();
  });

  it('shows a sweep as one row: its state, trials and best; its trials under it, PRUNED with its step', () => {
    model.sweeps = [sweepOf()];
    model.page = { ...model.page!, runs: sweepPage(), params: ['x'] };
    model.stateChanged.emit();
    const rows = () => [
      ...table.node.querySelectorAll<HTMLTableRowElement>(
        'tr.jp-air-RunsPanel-run'
      )
    ];
    expect(rows().map(tr => tr.dataset.runId)).toEqual([
      'after',
      's',
      'before'
    ]);
    const sweep = rows()[1];
    expect(sweep.classList).toContain('jp-air-RunsPanel-sweep');
    const cells = [...sweep.cells].map(td => td.textContent);
    expect(cells[1]).toBe('running');
    expect(cells[2]).toBe(
      'cell-sweep sweep2 of 4 trials · 1 running · best loss 0.5 (trial 0) · compare'
    );
    expect(sweep.cells.length).toBe(rows()[0].cells.length); // the columns line up
    const expand = sweep.querySelector<HTMLButtonElement>(
      '.jp-air-RunsPanel-expand'
    )!;
    expect(expand.getAttribute('aria-expanded')).toBe('false');

    expand.click();
    expect(model.toggleSweep).toHaveBeenCalledWith('sw-0000abcd');
    const trials = rows().filter(tr => tr.dataset.trial !== undefined);
    expect(
      trials.map(tr => [
        tr.dataset.runId,
        tr.cells[1].textContent,
        tr.querySelector('.jp-air-RunsPanel-trialLine')!.textContent
      ])
    ).toEqual([
      ['t0', 'complete', 'x=0 lr=0.0001234 · loss 0.5 ★'],
      ['t1', 'pruned', 'x=1 lr=0.0001234 · pruned at step 3'],
      ['t2', 'running', 'x=2 lr=0.0001234 · running']
    ]);
    expect(trials[1].cells[1].className).toContain('jp-mod-pruned');
    expect(trials[0].querySelector('.jp-air-RunsPanel-pick')).not.toBeNull();
    expect(trials[0].cells.length).toBe(rows()[0].cells.length);

    rows()[1]
      .querySelector<HTMLButtonElement>('.jp-air-RunsPanel-compareTrials')!
      .click();
    expect(model.compareTrials).toHaveBeenCalledWith('sw-0000abcd');
  });
});
