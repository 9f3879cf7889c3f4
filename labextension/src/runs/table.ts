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
import type { IRun, IRunsPage } from './types';

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
    const selected = this.model.selected;
    const system = this.model.showSystemMetrics;
    const primary = this.model.primaryMetric;
    if (
      page === this._page &&
      selected === this._selected &&
      system === this._system &&
      primary === this._primary
    ) {
      return;
    }
    this._page = page;
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
    for (const run of page.runs) {
      body.appendChild(this._row(run, page, primary, metrics));
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
    primary: string | null,
    metrics: readonly string[]
  ): HTMLTableRowElement {
    const tr = document.createElement('tr');
    tr.className = 'jp-air-RunsPanel-run';
    tr.dataset.runId = run.run_id;
    tr.dataset.status = run.status;
    if (run.kind) {
      tr.dataset.kind = run.kind;
    }

    const pick = document.createElement('input');
    pick.type = 'checkbox';
    pick.className = 'jp-air-RunsPanel-pick';
    pick.title = 'Compare this run';
    pick.checked = this.model.isSelected(run.run_id);
    pick.addEventListener('change', () =>
      this.model.toggleSelected(run.run_id)
    );
    tr.insertCell().appendChild(pick);

    const status = tr.insertCell();
    status.className = `jp-air-RunsPanel-runStatus jp-mod-${run.status.toLowerCase()}`;
    status.textContent = run.status.toLowerCase();
    status.title = status.textContent; // shown as a dot in a narrow sidebar

    const name = tr.insertCell();
    name.className = 'jp-air-RunsPanel-name';
    name.style.paddingLeft = `${4 + 12 * run.depth}px`;
    const label = run.name ?? run.run_id;
    // A long name is cut with an ellipsis (runs.css): the whole name is its tooltip.
    if (run.run_url) {
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
    return tr;
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
  private _selected: readonly string[] = [];
  private _system = false;
  private _primary: string | null = null;
}
