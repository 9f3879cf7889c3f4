/**
 * The state of one "Job logs" view: the job, the filters, the lines loaded
 * and the follow position, read from `jupyter-air/jobs/<id>/logs`.
 */

import { ISignal, Signal } from '@lumino/signaling';

import type { Query, Requester } from '../common/api';
import { describeError, PollingModel } from '../common/model';
import { accessDenied } from './access';
import { LineBuffer, MAX_LINES } from './buffer';
import { copyLines } from './clipboard';
import { filterQuery, ILogFilters, narrows, NO_FILTERS } from './filters';
import { Flash } from './flash';
import { Origins } from './origins';
import type { IAccessDenied, IJob, ILogsResponse } from './types';

/** Lines asked for when the view (re)loads: the end of the log. */
export const TAIL = 1000;
/** Lines per page while following. */
export const PAGE = 1000;
/** Pages read in one follow tick when a job prints faster than a page a second. */
const CATCH_UP_PAGES = 10;
/** Milliseconds between two follow requests. */
const FOLLOW_INTERVAL = 1000;

/** What changed in the lines held: `cleared`, or lines appended (and old ones dropped). */
export interface ILinesChange {
  cleared: boolean;
  added: number;
  dropped: number;
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
    this._filters = { ...NO_FILTERS, attempt: options.attempt ?? null };
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
    const attempt = this._filters.attempt;
    return attempt === null
      ? `${this.jobId}.log`
      : `${this.jobId}-attempt-${attempt}.log`;
  }

  /** Show attempt `attempt` (1-based) of the job, and keep it. */
  setAttempt(attempt: number): void {
    this._attemptPinned = true;
    if (attempt !== this._filters.attempt) {
      this._filters.attempt = attempt;
      void this.reload();
    }
  }

  /** Change the node, rank, level, range or search; reloads when one differs. */
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
        if (generation !== this._generation) {
          return;
        }
        this._query = this.query;
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
    this._flash.dispose();
    super.dispose();
  }

  /** One follow tick: the lines printed since the last answer. */
  protected async fetch(): Promise<void> {
    const generation = this._generation;
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
    return super.standby() || this._done || this._cursor === null;
  }

  private _fetchLogs(query: Query): Promise<ILogsResponse> {
    return this._request<ILogsResponse>(
      `jobs/${encodeURIComponent(this.jobId)}/logs`,
      {},
      query
    );
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
    this._done = answer.done;
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
  private _jobRefresh: Promise<void> | null = null;
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
    /** Lines kept in the browser (default {@link MAX_LINES}). */
    maxLines?: number;
  }
}
