/**
 * The runs table: plain DOM (a page holds up to 1000 rows of a few dozen
 * cells), rebuilt only when the page or the selection changes.
 */

import { Widget } from '@lumino/widgets';

import { el } from '../dom';
import { progressShort, progressTitle } from '../common/progress';
import { formatDateTime } from '../common/time';
import type { IProgress } from '../logs/types';
import { formatMetric, formatRunDuration, formatStart } from './format';
import { isSystemMetric } from './metrics';
import { RunsModel } from './model';
import {
  objectiveOf,
  sweepSummary,
  TableRow,
  trialOutcome,
  trialParams
} from './sweeps';
import type {
  IRun,
  IRunsPage,
  ISweep,
  ISweepTrial,
  SweepStatus
} from './types';

/** What a row's buttons open; the plugin knows the shell and the notebook. */
export interface IRunActions {
  openLogs(jobId: string): void;
  /** Whether the notebook in focus holds this cell. */
  hasCell(cellId: string): boolean;
  openCell(cellId: string): void;
}

/**
 * The columns a narrow sidebar shows, then the primary metric (`primaryMetric`),
 * then `LATER`, the params and the other metrics, which a wider one shows (the
 * table scrolls sideways meanwhile, the run's name staying in view).
 */
const FIRST = ['', 'Status', 'Run', 'Duration', 'Attempt'];
const LATER = ['Start', 'Job'];

/** The fixed columns' heads that runs.css styles (narrow sidebar, sticky name). */
const HEAD_CLASSES: Record<string, string> = {
  Status: 'jp-air-RunsPanel-statusHead',
  Run: 'jp-air-RunsPanel-nameHead',
  Duration: 'jp-air-RunsPanel-durationHead',
  Attempt: 'jp-air-RunsPanel-attemptHead'
};

/** A sweep's state as the run status it is drawn like (its color, its dot). */
const SWEEP_LOOK: Record<SweepStatus, string> = {
  RUNNING: 'running',
  STOPPING: 'running',
  COMPLETED: 'finished',
  STOPPED: 'killed',
  FAILED: 'failed'
};

export class RunsTable extends Widget {
  constructor(
    readonly model: RunsModel,
    private readonly _actions: IRunActions
  ) {
    super();
    this.addClass('jp-air-RunsPanel-tableWrap');
    model.stateChanged.connect(this._update, this);
  }

  dispose(): void {
    this.model.stateChanged.disconnect(this._update, this);
    super.dispose();
  }

  private _update(): void {
    const page = this.model.page;
    const rows = this.model.rows;
    const selected = this.model.selected;
    const system = this.model.showSystemMetrics;
    const primary = this.model.primaryMetric;
    if (
      page === this._page &&
      rows === this._rows &&
      selected === this._selected &&
      system === this._system &&
      primary === this._primary
    ) {
      return;
    }
    this._page = page;
    this._rows = rows;
    this._selected = selected;
    this._system = system;
    this._primary = primary;
    this.node.replaceChildren();
    if (page && page.runs.length > 0) {
      if (this.model.systemMetricCount > 0) {
        const bar = el('div', 'jp-air-RunsPanel-tableBar');
        bar.appendChild(this._systemToggle());
        this.node.appendChild(bar);
      }
      this.node.appendChild(this._table(page));
    }
  }

  private _table(page: IRunsPage): HTMLTableElement {
    const table = document.createElement('table');
    table.className = 'jp-air-RunsPanel-table';
    const head = table.createTHead().insertRow();
    const primary = this._primary;
    const metrics = this.model.tableMetrics.filter(key => key !== primary);
    const heading = (title: string) => {
      const th = head.appendChild(el('th', HEAD_CLASSES[title] ?? '', title));
      if (title === 'Duration' || title === 'Attempt') {
        th.title = title; // shortened in a narrow sidebar
      }
    };
    FIRST.forEach(heading);
    if (primary !== null) {
      // A long metric name is cut in a narrow sidebar: the tooltip has it whole.
      const th = head.appendChild(
        el('th', 'jp-air-RunsPanel-primaryHead', primary)
      );
      th.title = `${primary} (the metric compared)`;
    }
    [...LATER, ...page.params.map(p => `param ${p}`)].forEach(heading);
    for (const key of metrics) {
      const system = isSystemMetric(key);
      head.appendChild(
        el('th', system ? 'jp-air-RunsPanel-systemMetric' : '', key)
      );
    }
    const body = table.createTBody();
    for (const row of this._rows) {
      body.appendChild(
        row.kind === 'run'
          ? this._row(row.run, page, metrics)
          : row.kind === 'sweep'
            ? this._sweepRow(row.sweep, row.run, row.expanded, page, metrics)
            : this._trialRow(row.sweep, row.trial, row.run, page, metrics)
      );
    }
    return table;
  }

  /** Show or hide the system metrics' columns: one click away, after the user's. */
  private _systemToggle(): HTMLButtonElement {
    const shown = this.model.showSystemMetrics;
    const count = this.model.systemMetricCount;
    const button = this._button(
      shown ? 'Hide system metrics' : `+ ${count} system metrics`,
      shown
        ? 'Hide the system metrics (CPU, memory, GPU) MLflow logged'
        : 'Show the system metrics (CPU, memory, GPU) MLflow logged'
    );
    button.classList.add('jp-air-RunsPanel-systemToggle');
    button.setAttribute('aria-expanded', String(shown));
    button.addEventListener('click', () =>
      this.model.setShowSystemMetrics(!shown)
    );
    return button;
  }

  private _row(
    run: IRun,
    page: IRunsPage,
    metrics: readonly string[]
  ): HTMLTableRowElement {
    const tr = document.createElement('tr');
    tr.className = 'jp-air-RunsPanel-run';
    tr.dataset.runId = run.run_id;
    tr.dataset.status = run.status;
    if (run.kind) {
      tr.dataset.kind = run.kind;
    }

    tr.insertCell().appendChild(this._pick(run.run_id, 'Compare this run'));
    const status = run.status.toLowerCase();
    this._statusCell(tr, status, status);
    const name = this._nameCell(tr, run, run.name ?? run.run_id, run.depth);
    if (run.kind === 'session') {
      const badge = el('span', 'jp-air-RunsPanel-kind', 'session');
      badge.title =
        'A warm session: one run for the session, a child run per cell (listed under it)';
      name.append(' ', badge);
    }
    if (run.cell_id && this._actions.hasCell(run.cell_id)) {
      const cell = this._button('cell', 'Go to the cell that made this run');
      cell.classList.add('jp-air-RunsPanel-cell');
      cell.addEventListener('click', () =>
        this._actions.openCell(run.cell_id!)
      );
      name.append(' ', cell);
    }

    const progress = this.model.progressOf(run);
    if (progress) {
      name.appendChild(this._progress(progress));
    }
    this._cells(tr, run, page, metrics);
    return tr;
  }

  /**
   * A sweep: its expander, its state, its run's name with a `sweep` badge,
   * a Compare button and a line of its trials and best objective; the rest
   * of its run's cells.
   */
  private _sweepRow(
    sweep: ISweep,
    run: IRun | null,
    expanded: boolean,
    page: IRunsPage,
    metrics: readonly string[]
  ): HTMLTableRowElement {
    const tr = document.createElement('tr');
    tr.className = 'jp-air-RunsPanel-run jp-air-RunsPanel-sweep';
    tr.dataset.sweepId = sweep.id;
    tr.dataset.status = sweep.status;
    if (run) {
      tr.dataset.runId = run.run_id;
    }
    const count = sweep.trials.length;
    const expand = this._button(
      expanded ? '▾' : '▸',
      `${expanded ? 'Hide' : 'Show'} the sweep's ${count} trial${count === 1 ? '' : 's'}`
    );
    expand.classList.add('jp-air-RunsPanel-expand');
    expand.setAttribute('aria-expanded', String(expanded));
    expand.addEventListener('click', () => this.model.toggleSweep(sweep.id));
    tr.insertCell().appendChild(expand);

    this._statusCell(tr, SWEEP_LOOK[sweep.status], sweep.status.toLowerCase());

    const { metric, minimize } = objectiveOf(sweep);
    const name = this._nameCell(tr, run, run?.name ?? sweep.id, 0);
    const badge = el('span', 'jp-air-RunsPanel-kind', 'sweep');
    badge.title = `Sweep ${sweep.id}: ${minimize ? 'minimize' : 'maximize'} ${metric}; its trials are listed under it`;
    name.append(' ', badge);
    const summary = sweepSummary(sweep);
    const line = el('div', 'jp-air-RunsPanel-sweepSummary', summary);
    line.title = sweep.message ? `${summary}. ${sweep.message}` : summary;
    if (sweep.trials.filter(t => t.run_id).length >= 2) {
      const compare = this._button(
        'compare',
        "Compare the sweep's trials (the best first, up to ten)"
      );
      compare.classList.add('jp-air-RunsPanel-compareTrials');
      compare.addEventListener('click', () =>
        this.model.compareTrials(sweep.id)
      );
      line.append(' · ', compare);
    }
    name.appendChild(line);
    this._cells(tr, run, page, metrics);
    return tr;
  }

  /**
   * A trial under its sweep: picked for comparison as any run, its state
   * (PRUNED included), its parameters and its objective under its name.
   */
  private _trialRow(
    sweep: ISweep,
    trial: ISweepTrial,
    run: IRun | null,
    page: IRunsPage,
    metrics: readonly string[]
  ): HTMLTableRowElement {
    const tr = document.createElement('tr');
    tr.className = 'jp-air-RunsPanel-run jp-air-RunsPanel-trial';
    tr.dataset.trial = String(trial.number);
    tr.dataset.status = trial.state;
    const runId = run?.run_id ?? trial.run_id;
    const pickCell = tr.insertCell();
    if (runId) {
      tr.dataset.runId = runId;
      pickCell.appendChild(this._pick(runId, 'Compare this trial'));
    }
    this._statusCell(tr, trial.state.toLowerCase(), trial.state.toLowerCase());
    const name = this._nameCell(tr, run, `trial ${trial.number}`, 1);
    const outcome = trialOutcome(sweep, trial);
    const params = trialParams(trial);
    const line = el(
      'div',
      'jp-air-RunsPanel-trialLine',
      params ? `${params} · ${outcome}` : outcome
    );
    line.title = trial.message ?? line.textContent ?? '';
    name.appendChild(line);
    this._cells(tr, run, page, metrics);
    return tr;
  }

  private _pick(runId: string, title: string): HTMLInputElement {
    const pick = document.createElement('input');
    pick.type = 'checkbox';
    pick.className = 'jp-air-RunsPanel-pick';
    pick.title = title;
    pick.checked = this.model.isSelected(runId);
    pick.addEventListener('change', () => this.model.toggleSelected(runId));
    return pick;
  }

  private _statusCell(
    tr: HTMLTableRowElement,
    look: string,
    text: string
  ): void {
    const status = tr.insertCell();
    status.className = `jp-air-RunsPanel-runStatus jp-mod-${look}`;
    status.textContent = text;
    status.title = text; // shown as a dot in a narrow sidebar
  }

  /**
   * A row's name cell: its run's link, else the label. A long name is cut
   * with an ellipsis (runs.css): the whole name is its tooltip.
   */
  private _nameCell(
    tr: HTMLTableRowElement,
    run: IRun | null,
    label: string,
    depth: number
  ): HTMLTableCellElement {
    const name = tr.insertCell();
    name.className = 'jp-air-RunsPanel-name';
    name.style.paddingLeft = `${4 + 12 * depth}px`;
    if (run?.run_url) {
      const a = el('a', 'jp-air-RunsPanel-label', label);
      a.href = run.run_url;
      a.target = '_blank';
      a.rel = 'noopener';
      a.title = `${label}: open the run in MLflow`;
      name.appendChild(a);
    } else {
      name.appendChild(el('span', 'jp-air-RunsPanel-label', label)).title =
        label;
    }
    return name;
  }

  /** A row's cells after its name: its run's, blank where it has none yet. */
  private _cells(
    tr: HTMLTableRowElement,
    run: IRun | null,
    page: IRunsPage,
    metrics: readonly string[]
  ): void {
    const primary = this._primary;
    if (run === null) {
      // Duration, Attempt, the primary metric, Start, Job; params, metrics.
      const fixed = primary === null ? 4 : 5;
      for (let i = 0; i < fixed + page.params.length + metrics.length; i++) {
        tr.insertCell();
      }
      return;
    }
    const duration = tr.insertCell();
    duration.className = 'jp-air-RunsPanel-duration';
    duration.textContent = formatRunDuration(run.duration_ms);
    const attempt = tr.insertCell();
    attempt.className = 'jp-air-RunsPanel-attempt';
    attempt.textContent = run.attempt === null ? '' : String(run.attempt);
    if (run.resumed_from) {
      const mark = el('span', 'jp-air-RunsPanel-resumed', ' ↻');
      if (run.resumed_step !== null) {
        // Left out in a narrow sidebar (runs.css): the tooltip has it.
        const step = ` ${run.resumed_step}`;
        mark.append(el('span', 'jp-air-RunsPanel-resumedStep', step));
      }
      attempt.append(mark);
      attempt.title = `Resumed from ${run.resumed_from}${
        run.resumed_step === null ? '' : `, step ${run.resumed_step}`
      }`;
    }
    if (primary !== null) {
      const cell = tr.insertCell();
      cell.className = 'jp-air-RunsPanel-metric jp-air-RunsPanel-primary';
      cell.textContent = formatMetric(run.metrics[primary]);
    }
    const start = tr.insertCell();
    start.className = 'jp-air-RunsPanel-start';
    start.textContent = formatStart(run.start_time);
    start.title = run.start_time === null ? '' : formatDateTime(run.start_time);
    const job = tr.insertCell();
    if (run.job_id) {
      const logs = this._button(run.job_id, "Open the job's logs");
      logs.classList.add('jp-air-RunsPanel-logs');
      logs.addEventListener('click', () => this._actions.openLogs(run.job_id!));
      job.appendChild(logs);
    }
    for (const key of page.params) {
      tr.insertCell().textContent = run.params[key] ?? '';
    }
    for (const key of metrics) {
      const cell = tr.insertCell();
      cell.className = 'jp-air-RunsPanel-metric';
      cell.textContent = formatMetric(run.metrics[key]);
    }
  }

  /** A running run's progress under its name: a bar, `42 % · ETA 18:40`. */
  private _progress(progress: IProgress): HTMLElement {
    const shown = el('div', 'jp-air-RunsPanel-progress');
    shown.title = progressTitle(progress);
    const fraction = progress.fraction;
    if (fraction !== null) {
      const bar = el('progress', 'jp-air-RunsPanel-progressBar');
      bar.max = 1;
      bar.value = fraction;
      shown.appendChild(bar);
    }
    shown.appendChild(
      el('span', 'jp-air-RunsPanel-progressText', progressShort(progress))
    );
    return shown;
  }

  private _button(text: string, title: string): HTMLButtonElement {
    const button = document.createElement('button');
    button.className = 'jp-air-RunsPanel-link';
    button.type = 'button';
    button.textContent = text;
    button.title = title;
    return button;
  }

  private _page: IRunsPage | null = null;
  private _rows: readonly TableRow[] = [];
  private _selected: readonly string[] = [];
  private _system = false;
  private _primary: string | null = null;
}
