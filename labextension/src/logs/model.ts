/**
 * The state of one "Job logs" view: the job, the filters, the lines loaded
 * and the follow position, read from `jupyter-air/jobs/<id>/logs`.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { APIError } from '../common/api';
import type { Query, Requester } from '../common/api';
import { describeError, PollingModel } from '../common/model';
import { accessDenied } from './access';
import { LineBuffer, MAX_LINES } from './buffer';
import { SessionCells } from './cells';
import { copyLines, copyText } from './clipboard';
import { filterQuery, ILogFilters, narrows, NO_FILTERS } from './filters';
import { Flash } from './flash';
import { Origins } from './origins';
import { stacksAsText } from './stacks';
import type {
  IAccessDenied,
  ICellsResponse,
  IJob,
  ILogsResponse,
  ISessionCell,
  IStackSet,
  IStacksResponse
} from './types';

/** Lines asked for when the view (re)loads: the end of the log. */
export const TAIL = 1000;
/** Lines per page while following. */
export const PAGE = 1000;
/** Pages read in one follow tick when a job prints faster than a page a second. */
const CATCH_UP_PAGES = 10;
/** Milliseconds between two follow requests. */
const FOLLOW_INTERVAL = 1000;
/** Milliseconds between two reads of a running session's cells while following. */
const CELLS_INTERVAL = 5000;
/** Milliseconds between two reads of a job whose runs wait for their tracking server. */
const TRACKING_REREAD_MS = 10000;
/** Milliseconds between two reads of a running job while following (its progress). */
export const PROGRESS_REREAD_MS = 10000;
/** The states of a job whose ranks may run. */
const ACTIVE = new Set(['PENDING', 'RUNNING']);

/**
 * Why the cell chosen has no lines from the server yet (the route knows a
 * cell's lines once it ends): `next`, the session's next cell (running, or
 * about to): the lines since the last cell ended are followed meanwhile;
 * `later`, a cell after that.
 */
export type CellWait = 'next' | 'later';

/**
 * What changed in the lines held: `cleared`, or lines appended (and old ones
 * dropped), or `relabelled`: lines held got their session cell.
 */
export interface ILinesChange {
  cleared: boolean;
  added: number;
  dropped: number;
  relabelled?: boolean;
}

/**
 * Loads the last {@link TAIL} matching lines, then follows a running job with
 * the answer's cursor every second while a view is shown; at most
 * `maxLines` lines are kept. Without the job's CAN_VIEW (a 403 naming the
 * permission and the job's owner) it holds `denied` and nothing of the job.
 */
export class JobLogsModel extends PollingModel {
  constructor(options: JobLogsModel.IOptions) {
    super({
      name: 'jupyter-air:job-logs',
      frequency: {
        interval: FOLLOW_INTERVAL,
        backoff: true,
        max: 10 * FOLLOW_INTERVAL
      }
    });
    this.jobId = options.jobId;
    this._request = options.request;
    this._filters = {
      ...NO_FILTERS,
      attempt: options.attempt ?? null,
      cell: options.cell ?? null
    };
    this._attemptPinned = options.attempt !== undefined;
    this._buffer = new LineBuffer(options.maxLines ?? MAX_LINES);
    void this.reload();
  }

  /** The job shown. */
  readonly jobId: string;

  /** Emitted when lines were appended or cleared (the list renders them). */
  get linesChanged(): ISignal<this, ILinesChange> {
    return this._linesChanged;
  }

  /** The job, as last read from the server (null before the first answer). */
  get job(): IJob | null {
    return this._job;
  }

  /** The filters in use. */
  get filters(): ILogFilters {
    return { ...this._filters };
  }

  /** The lines held (the filtered lines loaded so far). */
  get lines(): LineBuffer {
    return this._buffer;
  }

  /** Whether new lines scroll into view as they arrive. */
  get following(): boolean {
    return this._following;
  }

  /** Whether every line of the attempt has arrived (the job ended). */
  get done(): boolean {
    return this._done;
  }

  /** Whether the first answer of the current filters is awaited. */
  get loading(): boolean {
    return this._loading;
  }

  /** Whether the first answer held only the last {@link TAIL} lines. */
  get truncated(): boolean {
    return this._truncated;
  }

  /** Lines that arrived while not following. */
  get newLines(): number {
    return this._newLines;
  }

  /** A short-lived message (copy), or null. */
  get flash(): string | null {
    return this._flash.text;
  }

  /** Why the server refused this job's logs to the caller, or null. */
  get denied(): IAccessDenied | null {
    return this._denied;
  }

  /** Whether the job is a warm session (its lines each have a cell). */
  get session(): boolean {
    return this._job?.kind === 'session';
  }

  /** A session's ended cells, in order (empty for other jobs). */
  get cells(): readonly ISessionCell[] {
    return this._cells.list;
  }

  /**
   * Whether the cell chosen has not ended yet, and how the model waits: it
   * asks for the cell's own lines once the cell has ended.
   */
  get cellWait(): CellWait | null {
    return this._cellWait;
  }

  /** Whether a filter other than the attempt narrows the lines. */
  get filtered(): boolean {
    return narrows(this._filters);
  }

  /** The nodes and ranks to offer: the job's, and any seen in a line (sorted). */
  get origins(): { nodes: number[]; ranks: number[] } {
    return this._origins.of(this._job);
  }

  /** The query of every line matching the filters (the download's). */
  get query(): Query {
    // The time range ends now, or at the job's end.
    return filterQuery(this._filters, this._job?.ended ?? Date.now() / 1000);
  }

  /** The file name of a download. */
  get filename(): string {
    const { attempt, cell } = this._filters;
    return (
      this.jobId +
      (attempt === null ? '' : `-attempt-${attempt}`) +
      (cell === null ? '' : `-cell-${cell}`) +
      '.log'
    );
  }

  /** Show attempt `attempt` (1-based) of the job, and keep it. */
  setAttempt(attempt: number): void {
    this._attemptPinned = true;
    if (attempt !== this._filters.attempt) {
      this._filters.attempt = attempt;
      void this.reload();
    }
  }

  /** Change the node, rank, cell, level, range or search; reloads when one differs. */
  setFilters(filters: Partial<Omit<ILogFilters, 'attempt'>>): void {
    const next = {
      ...this._filters,
      ...filters,
      attempt: this._filters.attempt
    };
    const changed = (Object.keys(next) as (keyof ILogFilters)[]).some(
      key => next[key] !== this._filters[key]
    );
    if (changed) {
      this._filters = next;
      void this.reload();
    }
  }

  /** Follow new lines (scroll to the end) or stop following. */
  setFollowing(following: boolean): void {
    if (following === this._following) {
      return;
    }
    this._following = following;
    if (following) {
      this._newLines = 0;
      this.poll();
    }
    this.emitChanged();
  }

  /** The stacks shown: the set just taken, or the sets saved; null: none shown. */
  get stacks(): IStackSet[] | null {
    return this._stacks;
  }

  /** Whether stacks are being taken or read. */
  get stacksPending(): boolean {
    return this._stacksPending;
  }

  /**
   * Show where the ranks are: of a running job, every rank's stacks taken now
   * (which needs CAN_MANAGE_RUN); of an ended one (or when none runs any more),
   * the sets taken before (at a likely hang, at a cancel after one).
   */
  async showStacks(): Promise<void> {
    const path = `jobs/${encodeURIComponent(this.jobId)}/stacks`;
    this._stacksPending = true;
    this.emitChanged();
    try {
      if (!this._job) {
        await this._readJob(); // opened on the stacks: running or not decides
      }
      let page: IStacksResponse | null = null;
      let note = '';
      if (this._job && ACTIVE.has(this._job.status)) {
        try {
          page = await this._request<IStacksResponse>(path, { method: 'POST' });
        } catch (error) {
          // ended meanwhile (409), or taking them is not this user's (403): the saved
          if (!(
            error instanceof APIError && [403, 409].includes(error.status)
          )) {
            throw error;
          }
          if (error.status === 403) {
            note =
              'Taking stacks needs CAN_MANAGE_RUN: these were taken before.';
          }
        }
      }
      page = page ?? (await this._request<IStacksResponse>(path));
      this._stacks = page.sets;
      if (!page.sets.length) {
        this._flash.show(
          note
            ? 'Taking stacks needs CAN_MANAGE_RUN, and none were taken before.'
            : 'No stacks were taken of this job.'
        );
      } else if (note) {
        this._flash.show(note);
      }
    } catch (error) {
      this._flash.show(`Stacks: ${describeError(error)}`);
    } finally {
      this._stacksPending = false;
      this.emitChanged();
    }
  }

  /** Close the stacks shown. */
  hideStacks(): void {
    this._stacks = null;
    this.emitChanged();
  }

  /** Copy the stacks shown as plain text; resolves to whether they were copied. */
  async copyStacks(): Promise<boolean> {
    const copied = await copyText(stacksAsText(this._stacks ?? []));
    this._flash.show(
      copied ? 'Copied the stacks' : 'Could not copy to the clipboard'
    );
    return copied;
  }

  /** Copy the loaded lines as text; resolves to whether they were copied. */
  async copy(): Promise<boolean> {
    const [copied, message] = await copyLines(this._buffer.lines);
    this._flash.show(message);
    return copied;
  }

  /** Start again from the end of the log with the current filters. */
  reload(): Promise<void> {
    const generation = ++this._generation;
    this._cursor = null;
    this._done = false;
    this._truncated = false;
    this._newLines = 0;
    this.clearError();
    this._denied = null;
    this._loading = true;
    this._cellWait = null;
    this._following = true;
    this._shownAttempt = null;
    this._buffer.clear();
    this._linesChanged.emit({ cleared: true, added: 0, dropped: 0 });
    this.emitChanged();
    return this.serialize(async () => {
      if (generation !== this._generation) {
        return;
      }
      try {
        if (!this._job) {
          await this._readJob();
        }
        if (this.session) {
          await this._readCells();
        }
        if (generation !== this._generation) {
          return;
        }
        this._query = this.query;
        const cell = this._filters.cell;
        if (cell !== null && !this._cells.has(cell) && !this._job?.ended) {
          const last = this._cells.list[this._cells.list.length - 1];
          if (cell !== (last?.cell ?? 0) + 1) {
            this._loading = false;
            this._cellWait = 'later'; // asked again by each follow tick
            this.emitChanged();
            return;
          }
          this._cellWait = 'next';
          const since = Math.max(
            Number(this._query.since ?? 0),
            last?.ended ?? 0
          );
          this._query = { ...this._query, cell: null, since: since || null };
        }
        const answer = await this._fetchLogs({ ...this._query, tail: TAIL });
        if (generation !== this._generation) {
          return;
        }
        this._loading = false;
        this._truncated = answer.lines.length >= TAIL;
        this._accept(answer);
      } catch (error) {
        if (generation === this._generation) {
          this._loading = false;
          this.setError(describeError(error));
          this._showDenied(accessDenied(error));
          this.emitChanged();
        }
      }
    });
  }

  /** Whether loading failed before any answer (nothing to follow). */
  get failed(): boolean {
    return this.error !== null && this._cursor === null;
  }

  dispose(): void {
    if (this._trackingTimer) {
      clearTimeout(this._trackingTimer);
    }
    this._flash.dispose();
    super.dispose();
  }

  /** One follow tick: the lines printed since the last answer. */
  protected async fetch(): Promise<void> {
    const generation = this._generation;
    if (this._cellWait) {
      await this._readJob();
      await this._readCells();
      const cell = this._filters.cell;
      if (
        generation === this._generation &&
        (this._job?.ended || (cell !== null && this._cells.has(cell)))
      ) {
        void this.reload(); // after this tick: requests run one at a time
        return;
      }
    } else if (this.session && Date.now() - this._cellsRead >= CELLS_INTERVAL) {
      await this._readCells();
    }
    const job = this._job;
    if (
      job &&
      ACTIVE.has(job.status) &&
      Date.now() - this._jobRead >= PROGRESS_REREAD_MS
    ) {
      this._jobRead = Date.now();
      this._refreshJob(); // its attempts' progress
    }
    for (let page = 0; page < CATCH_UP_PAGES; page++) {
      const cursor = this._cursor;
      if (generation !== this._generation || this._done || cursor === null) {
        return;
      }
      let answer: ILogsResponse;
      try {
        answer = await this._fetchLogs({ ...this._query, cursor, limit: PAGE });
      } catch (error) {
        if (generation === this._generation) {
          // A 403 here: the grant was revoked while the view followed.
          this._showDenied(accessDenied(error));
        }
        throw error;
      }
      if (generation !== this._generation) {
        return;
      }
      this._accept(answer);
      if (answer.lines.length < PAGE) {
        return;
      }
    }
  }

  protected standby(): boolean {
    return (
      super.standby() ||
      this._done ||
      (this._cursor === null && this._cellWait !== 'later')
    );
  }

  private _fetchLogs(query: Query): Promise<ILogsResponse> {
    return this._request<ILogsResponse>(
      `jobs/${encodeURIComponent(this.jobId)}/logs`,
      {},
      query
    );
  }

  /** A session's cells; lines held that arrived in a cell now ended get it. */
  private async _readCells(): Promise<void> {
    const answer = await this._request<ICellsResponse>(
      `jobs/${encodeURIComponent(this.jobId)}/cells`
    );
    this._cellsRead = Date.now();
    if (this._cells.set(answer.cells)) {
      if (this._cells.assign(this._buffer.lines)) {
        this._linesChanged.emit({
          cleared: false,
          added: 0,
          dropped: 0,
          relabelled: true
        });
      }
      this.emitChanged();
    }
  }

  private async _readJob(): Promise<void> {
    const job = await this._request<IJob>(
      `jobs/${encodeURIComponent(this.jobId)}`
    );
    this._job = job;
    if (!this._attemptPinned && job.attempts.length) {
      this._filters.attempt = Math.max(...job.attempts.map(a => a.attempt));
    }
    this.emitChanged();
    this._watchTracking();
  }

  /**
   * While something of the job's runs waits for its tracking server (or its run's
   * tail is under way), read the job again now and then: the line changes, then
   * goes, after the logs have ended.
   */
  private _watchTracking(): void {
    const job = this._job;
    if (!job || (!job.tracking && !job.finishing) || this._trackingTimer) {
      return;
    }
    this._trackingTimer = setTimeout(() => {
      this._trackingTimer = null;
      if (!this.isDisposed) {
        this._refreshJob();
      }
    }, TRACKING_REREAD_MS);
  }

  /** The job changed on the server: read it again (once at a time). */
  private _refreshJob(): void {
    if (this._jobRefresh) {
      return;
    }
    this._jobRefresh = this._readJob()
      .catch(error => {
        console.warn('jupyter-air: could not read the job again', error);
      })
      .then(() => {
        this._jobRefresh = null;
        this._switchToLatestAttempt();
      });
  }

  /** Unless the user chose an attempt, show a new one as soon as it starts. */
  private _switchToLatestAttempt(): void {
    const job = this._job;
    if (this._attemptPinned || !job || !job.attempts.length) {
      return;
    }
    const latest = Math.max(...job.attempts.map(a => a.attempt));
    if (this._shownAttempt !== null && latest > this._shownAttempt) {
      this._filters.attempt = latest;
      void this.reload();
    }
  }

  /**
   * Without CAN_VIEW, nothing of the job stays (it may have been shown before
   * the grant was revoked): say so, and who can grant it.
   */
  private _showDenied(denied: IAccessDenied | null): void {
    if (!denied) {
      return;
    }
    this._denied = denied;
    this._job = null;
    this._cursor = null;
    this._buffer.clear();
    this._linesChanged.emit({ cleared: true, added: 0, dropped: 0 });
    this.emitChanged();
  }

  /** Take one answer: its lines, cursor, and what it says of the job. */
  private _accept(answer: ILogsResponse): void {
    this._cursor = answer.next;
    // An ended cell's lines all came with the first answer.
    this._done =
      answer.done || (this._filters.cell !== null && this._cellWait === null);
    this._shownAttempt = answer.attempt;
    if (this._filters.attempt === null) {
      this._filters.attempt = answer.attempt;
    }
    if (answer.lines.length) {
      const dropped = this._buffer.append(answer.lines);
      this._origins.add(answer.lines);
      if (!this._following) {
        this._newLines += answer.lines.length;
      }
      this._linesChanged.emit({
        cleared: false,
        added: answer.lines.length,
        dropped
      });
    }
    const job = this._job;
    if (
      job &&
      (job.status !== answer.status || job.attempts.length < answer.attempts)
    ) {
      job.status = answer.status;
      this._refreshJob();
    }
    this.emitChanged();
  }

  private _request: Requester;
  private _filters: ILogFilters;
  private _attemptPinned: boolean;
  private _shownAttempt: number | null = null;
  private _query: Query = {};
  private _job: IJob | null = null;
  /** When a follow tick last asked for the job again (Date.now()). */
  private _jobRead = Date.now();
  private _stacks: IStackSet[] | null = null;
  private _stacksPending = false;
  private _jobRefresh: Promise<void> | null = null;
  private _trackingTimer: ReturnType<typeof setTimeout> | null = null;
  private _buffer: LineBuffer;
  private _generation = 0;
  private _cursor: string | null = null;
  private _done = false;
  private _truncated = false;
  private _loading = false;
  private _denied: IAccessDenied | null = null;
  private _following = true;
  private _newLines = 0;
  private _flash = new Flash(() => this.emitChanged());
  private _origins = new Origins();
  private _cells = new SessionCells();
  private _cellsRead = 0;
  private _cellWait: CellWait | null = null;
  private _linesChanged = new Signal<this, ILinesChange>(this);
}

export namespace JobLogsModel {
  export interface IOptions {
    /** The job to show. */
    jobId: string;
    /** Calls the server API (`requester(serverSettings)`). */
    request: Requester;
    /** The attempt to show (default: the latest, and each new one). */
    attempt?: number;
    /** A session's cell to show (default: the whole session). */
    cell?: number;
    /** Lines kept in the browser (default {@link MAX_LINES}). */
    maxLines?: number;
  }
}
