/**
 * The state of the runs panel: the notebook in focus, its store and
 * experiment (or another the user picked), one page of runs, the filters,
 * the selection and its comparison. Polls while a view is shown, so that
 * running runs' statuses stay live.
 */

import type { Requester } from '../common/api';
import type { IJobsResponse, IProgress } from '../logs/types';
import { FetchKind, PollingModel, pollFrequency } from '../common/model';
import { XAxis } from './curves';
import { defaultMetric, primaryMetric, splitMetrics } from './metrics';
import { comparedTrials, tableRows, TableRow } from './sweeps';
import type {
  ICompare,
  IExperiment,
  INotebookExperiment,
  IRun,
  IRunsPage,
  IStoresResponse,
  ISweep,
  ISweepsResponse,
  ITrackingStore,
  RunStatus
} from './types';

/** Runs per page: the routes allow up to 1000. */
export const PAGE_SIZE = 100;
/** Milliseconds between two reads of the experiment picker's list while shown. */
const EXPERIMENTS_REREAD_MS = 30_000;

export class RunsModel extends PollingModel {
  constructor(options: RunsModel.IOptions) {
    super({
      name: 'jupyter-air:runs',
      frequency: pollFrequency(options.interval ?? 5),
      idleTimeout: options.idleTimeout ?? 300,
      document: options.document
    });
    this._request = options.request;
    this._pageSize = options.pageSize ?? PAGE_SIZE;
  }

  /** The path of the notebook in focus (relative to the server's root). */
  get notebookPath(): string | null {
    return this._path;
  }
  set notebookPath(path: string | null) {
    if (path === this._path) {
      return;
    }
    this._path = path;
    this._store = null;
    this._notebookStore = null;
    this._chosenStore = null;
    this._wantedName = null;
    this._experimentId = null;
    this._experiments = [];
    this._resolved = false;
    this._reset();
    this.poll();
  }

  /** Runs per page (the routes allow 1 to 1000). */
  get pageSize(): number {
    return this._pageSize;
  }
  set pageSize(size: number) {
    if (size !== this._pageSize && size >= 1 && size <= 1000) {
      this._pageSize = size;
      this._firstPage();
    }
  }

  /** Seconds between two polls while shown. */
  set pollInterval(seconds: number) {
    this.frequency = pollFrequency(seconds);
  }

  /** The key of the tracking store shown: the notebook's, or one picked. */
  get store(): string | null {
    return this._store;
  }
  /** What the store picker offers: the stores the user's jobs used. */
  get stores(): readonly ITrackingStore[] {
    return this._stores;
  }
  get experimentId(): string | null {
    return this._experimentId;
  }
  /** What the experiment picker offers. */
  get experiments(): readonly IExperiment[] {
    return this._experiments;
  }
  /** Whether the store shown is one the user picked, not the notebook's. */
  get storePicked(): boolean {
    return this._chosenStore !== null;
  }
  /** Whether the notebook's experiment is known (it may have none yet). */
  get resolved(): boolean {
    return this._resolved;
  }
  get page(): IRunsPage | null {
    return this._page;
  }
  get search(): string {
    return this._search;
  }
  get status(): RunStatus | null {
    return this._status;
  }
  /** The number of the page shown, from 1. */
  get pageNumber(): number {
    return this._tokens.length + 1;
  }
  get hasNextPage(): boolean {
    return !!this._page?.next_page_token;
  }
  /** Runs picked for comparison, in the order picked. */
  get selected(): readonly string[] {
    return this._selected;
  }
  get comparison(): ICompare | null {
    return this._compare;
  }
  /** The compared metric: the one picked, else a user metric (see `defaultMetric`). */
  get compareMetric(): string | null {
    const metrics = Object.keys(this._compare?.metrics ?? {});
    return this._metric !== null && metrics.includes(this._metric)
      ? this._metric
      : defaultMetric(metrics);
  }
  /** Whether the table shows the system metrics' columns (after the user's). */
  get showSystemMetrics(): boolean {
    return this._showSystem;
  }
  /** The metric columns of the table: the user's, then the system ones if shown. */
  get tableMetrics(): readonly string[] {
    const { user, system } = splitMetrics(this._page?.metrics ?? []);
    return this._showSystem ? [...user, ...system] : user;
  }
  /** The metric column shown first, beside the run's attempt (see `primaryMetric`). */
  get primaryMetric(): string | null {
    return primaryMetric(this._page?.metrics ?? [], this._metric);
  }
  /** How many system metrics the page has (shown or not). */
  get systemMetricCount(): number {
    return splitMetrics(this._page?.metrics ?? []).system.length;
  }
  get xAxis(): XAxis {
    return this._xAxis;
  }
  /** The experiment's sweeps the caller may view, newest first. */
  get sweeps(): readonly ISweep[] {
    return this._sweeps;
  }
  /**
   * The table's rows: the page's runs, each sweep's as one row, its trials
   * under it while expanded (see `tableRows`).
   */
  get rows(): readonly TableRow[] {
    const key = [this._page, this._sweeps, this._expanded];
    if (!key.every((v, i) => v === this._rowsOf[i])) {
      this._rowsOf = key;
      this._rows = tableRows(
        this._page?.runs ?? [],
        this._sweeps,
        this._expanded
      );
    }
    return this._rows;
  }

  isExpanded(sweepId: string): boolean {
    return this._expanded.has(sweepId);
  }

  /** Show or hide a sweep's trials under it. */
  toggleSweep(sweepId: string): void {
    const expanded = new Set(this._expanded);
    if (!expanded.delete(sweepId)) {
      expanded.add(sweepId);
    }
    this._expanded = expanded;
    this.emitChanged();
  }

  /**
   * Compare a sweep's trials (see `comparedTrials`: the best first, up to
   * ten), in place of the runs picked before.
   */
  compareTrials(sweepId: string): void {
    const sweep = this._sweeps.find(s => s.id === sweepId);
    if (sweep === undefined) {
      return;
    }
    this._selected = comparedTrials(sweep, this._page?.runs ?? []);
    this._compare = null;
    this._compareDue = this._selected.length >= 2;
    this.emitChanged();
    if (this._compareDue) {
      void this.refresh().catch(() => undefined);
    }
  }

  /**
   * Show another store's runs (one an older job or a team server used), in
   * its experiment of the notebook's experiment's name if it has one; the
   * notebook's own store brings its experiment back.
   */
  setStore(key: string): void {
    if (!key || key === this._store) {
      return;
    }
    const name = this._experiments.find(e => e.id === this._experimentId)?.name;
    this._wantedName = name ?? this._wantedName;
    this._chosenStore = key === this._notebookStore ? null : key;
    this._store = this._chosenStore;
    this._experimentId = null;
    this._experiments = [];
    this._resolved = false;
    this._reset();
    void this.refresh().catch(() => undefined);
  }

  /** Switch to another experiment of the store. */
  setExperiment(id: string): void {
    if (id !== this._experimentId) {
      this._experimentId = id;
      this._reset();
      void this.refresh().catch(() => undefined);
    }
  }

  /** Words of the run name, or an MLflow filter string (as the MLflow UI's search box). */
  setSearch(search: string): void {
    if (search !== this._search) {
      this._search = search;
      this._firstPage();
    }
  }

  setStatus(status: RunStatus | null): void {
    if (status !== this._status) {
      this._status = status;
      this._firstPage();
    }
  }

  nextPage(): void {
    const token = this._page?.next_page_token;
    if (token) {
      this._tokens.push(this._token ?? '');
      this._token = token;
      void this.refresh().catch(() => undefined);
    }
  }

  previousPage(): void {
    if (this._tokens.length > 0) {
      this._token = this._tokens.pop() || null;
      void this.refresh().catch(() => undefined);
    }
  }

  isSelected(runId: string): boolean {
    return this._selected.includes(runId);
  }

  /** Pick or unpick a run; two or more picked are compared. */
  toggleSelected(runId: string): void {
    this._selected = this.isSelected(runId)
      ? this._selected.filter(id => id !== runId)
      : [...this._selected, runId];
    this._compare = null;
    this._compareDue = this._selected.length >= 2;
    this.emitChanged();
    if (this._compareDue) {
      void this.refresh().catch(() => undefined);
    }
  }

  setCompareMetric(metric: string): void {
    this._metric = metric;
    this.emitChanged();
  }

  setShowSystemMetrics(show: boolean): void {
    if (show !== this._showSystem) {
      this._showSystem = show;
      this.emitChanged();
    }
  }

  setXAxis(axis: XAxis): void {
    this._xAxis = axis;
    this.emitChanged();
  }

  /**
   * How far a running run's attempt is (its job's step marks), or null: none
   * marked yet, or the run is not running.
   */
  progressOf(run: IRun): IProgress | null {
    if (run.status !== 'RUNNING') {
      return null;
    }
    return this._progress.get(`${run.job_id}:${run.attempt}`) ?? null;
  }

  /** The run of the page with this id, if shown. */
  run(runId: string): IRun | undefined {
    return this._page?.runs.find(run => run.run_id === runId);
  }

  protected standby(): boolean {
    return super.standby() || this._path === null;
  }

  protected async fetch(_kind: FetchKind): Promise<void> {
    const path = this._path;
    if (path === null) {
      return;
    }
    if (this._chosenStore !== null) {
      if (!this._resolved) {
        await this._pickIn(path, this._chosenStore);
      }
    } else if (!this._resolved || this._experimentId === null) {
      // Until the notebook's first call makes its experiment, ask again.
      await this._resolve(path);
    }
    const store = this._store;
    const experiment = this._experimentId;
    if (!store || !experiment || path !== this._path) {
      return;
    }
    await this._rereadExperiments(path, store);
    const [page, sweeps] = await Promise.all([
      this._request<IRunsPage>('runs', undefined, {
        store,
        experiment,
        search: this._search || undefined,
        status: this._status ?? undefined,
        max_results: this._pageSize,
        page_token: this._token ?? undefined
      }),
      this._sweepsOf(store, experiment)
    ]);
    const progress = await this._progressOfRunning(page);
    if (path !== this._path || experiment !== this._experimentId) {
      return; // the panel moved on meanwhile
    }
    this._progress = progress;
    this._page = page;
    this._sweeps = sweeps;
    if (this._selected.length >= 2 && (this._compareDue || this._live())) {
      this._compareDue = false;
      this._compare = await this._request<ICompare>('runs/compare', undefined, {
        store,
        runs: this._selected.join(',')
      });
    }
  }

  /**
   * The progress of the page's running runs' attempts, by `job:attempt`: one
   * read of the active jobs, only while some run of the page runs.
   */
  private async _progressOfRunning(
    page: IRunsPage
  ): Promise<Map<string, IProgress>> {
    const found = new Map<string, IProgress>();
    if (!page.runs.some(run => run.status === 'RUNNING' && run.job_id)) {
      return found;
    }
    let answer: IJobsResponse;
    try {
      answer = await this._request<IJobsResponse>('jobs');
    } catch (error) {
      console.warn('jupyter-air: could not read the running jobs', error);
      return this._progress; // what was known: the runs are what matters
    }
    for (const job of answer.jobs) {
      for (const attempt of job.attempts) {
        if (attempt.progress) {
          found.set(`${job.id}:${attempt.attempt}`, attempt.progress);
        }
      }
    }
    return found;
  }

  /**
   * The experiment's sweeps; what was known when they cannot be read: the
   * runs are what matters.
   */
  private async _sweepsOf(
    store: string,
    experiment: string
  ): Promise<ISweep[]> {
    try {
      const answer = await this._request<ISweepsResponse>(
        'runs/sweeps',
        undefined,
        { store, experiment }
      );
      return answer.sweeps;
    } catch (error) {
      console.warn(
        "jupyter-air: could not read the experiment's sweeps",
        error
      );
      return this._sweeps;
    }
  }

  /** Whether a compared run is still running (its curves grow). */
  private _live(): boolean {
    return (this._compare?.runs ?? []).some(run => run.status === 'RUNNING');
  }

  private async _resolve(path: string): Promise<void> {
    const [found, stores] = await Promise.all([
      this._request<INotebookExperiment>('runs/notebook', undefined, { path }),
      this._request<IStoresResponse>('runs/stores')
    ]);
    if (path !== this._path || this._chosenStore !== null) {
      return;
    }
    const experiments = found.store
      ? await this._experimentsOf(found.store)
      : [];
    if (path !== this._path || this._chosenStore !== null) {
      return;
    }
    this._stores = stores.stores;
    this._notebookStore = found.store;
    this._store = found.store;
    this._experimentId = found.experiment_id;
    this._experiments = experiments;
    this._resolved = true;
  }

  /** A picked store's experiments, and the one named as the notebook's. */
  private async _pickIn(path: string, store: string): Promise<void> {
    const experiments = await this._experimentsOf(store);
    if (path !== this._path || store !== this._chosenStore) {
      return;
    }
    this._experiments = experiments;
    const same = experiments.find(e => e.name === this._wantedName);
    this._experimentId = same?.id ?? null;
    this._resolved = true;
  }

  /**
   * The picker's experiments again now and then: `air run`, a schedule or another
   * notebook make new ones while the panel is open.
   */
  private async _rereadExperiments(path: string, store: string): Promise<void> {
    if (Date.now() - this._experimentsRead < EXPERIMENTS_REREAD_MS) {
      return;
    }
    const experiments = await this._experimentsOf(store);
    if (path === this._path && store === this._store) {
      this._experiments = experiments;
    }
  }

  private async _experimentsOf(store: string): Promise<IExperiment[]> {
    this._experimentsRead = Date.now();
    const answer = await this._request<{ experiments: IExperiment[] }>(
      'runs/experiments',
      undefined,
      { store }
    );
    return answer.experiments;
  }

  private _firstPage(): void {
    this._tokens = [];
    this._token = null;
    this.emitChanged();
    void this.refresh().catch(() => undefined);
  }

  private _reset(): void {
    this._page = null;
    this._sweeps = [];
    this._tokens = [];
    this._token = null;
    this._selected = [];
    this._compare = null;
    this._compareDue = false;
    this.clearError();
    this.emitChanged();
  }

  private _request: Requester;
  private _pageSize: number;
  private _path: string | null = null;
  private _resolved = false;
  private _store: string | null = null;
  private _notebookStore: string | null = null;
  /** A store the user picked, other than the notebook's. */
  private _chosenStore: string | null = null;
  private _stores: ITrackingStore[] = [];
  /** The experiment's name to look for in a picked store. */
  private _wantedName: string | null = null;
  private _experimentId: string | null = null;
  private _experiments: IExperiment[] = [];
  private _experimentsRead = 0;
  private _page: IRunsPage | null = null;
  private _sweeps: ISweep[] = [];
  /** The sweeps whose trials are shown under them. */
  private _expanded: ReadonlySet<string> = new Set();
  private _rows: TableRow[] = [];
  private _rowsOf: unknown[] = [];
  private _progress = new Map<string, IProgress>();
  private _search = '';
  private _status: RunStatus | null = null;
  private _token: string | null = null;
  private _tokens: string[] = [];
  private _selected: string[] = [];
  private _compare: ICompare | null = null;
  private _compareDue = false;
  private _metric: string | null = null;
  private _xAxis = XAxis.Step;
  private _showSystem = false;
}

export namespace RunsModel {
  export interface IOptions {
    request: Requester;
    /** Seconds between two polls (default 5: running runs' statuses stay live). */
    interval?: number;
    /** Seconds without activity before polling pauses (default 300). */
    idleTimeout?: number;
    pageSize?: number;
    document?: Document;
  }
}
