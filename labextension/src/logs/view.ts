/**
 * The "Job logs" view: one job's log lines, searched, filtered, followed.
 */

import { ServerConnection } from '@jupyterlab/services';
import type { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { el } from '../dom';
import { APIError, apiUrl, Query, requestAPI } from '../request';
import { accessDenied, renderAccessDenied } from './access';
import { LineBuffer, MAX_LINES } from './buffer';
import { copyText } from './clipboard';
import { filterQuery, ILogFilters, NO_FILTERS } from './filters';
import { lineAsText, matcher } from './format';
import { LogsHeader, plural } from './header';
import { LogList } from './list';
import type { IAccessDenied, IJob, ILogsResponse } from './types';

/** Lines asked for when the view (re)loads: the end of the log. */
export const TAIL = 1000;
/** Lines per page while following. */
export const PAGE = 1000;
/** Pages read in one follow tick when a job prints faster than a page a second. */
const CATCH_UP_PAGES = 10;
/** Milliseconds between two follow requests. */
const FOLLOW_INTERVAL = 1000;

const NUMBER = new Intl.NumberFormat();

/** The text shown for a failed request. */
function describeError(error: unknown): string {
  if (error instanceof APIError) {
    return error.message;
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * One job's log lines: a header (job, status, attempt, MLflow run link), a
 * search box and filters, then the lines of the chosen attempt, time-ordered
 * across nodes and ranks, from `jupyter-air/jobs/<id>/logs`.
 *
 * The view loads the last {@link TAIL} matching lines, then follows a running
 * job with the answer's cursor every second; at most {@link MAX_LINES} lines
 * are kept, and only the rows in view are in the DOM.
 *
 * Without the job's CAN_VIEW (a 403 naming the permission and the job's owner),
 * the view says so and who can grant it, instead of an error.
 */
export class JobLogsView extends Widget {
  constructor(options: JobLogsView.IOptions) {
    super();
    this.jobId = options.jobId;
    this.addClass('jp-air-JobLogs');
    this.node.dataset.jobId = options.jobId;
    this.title.label = `Job logs — ${options.jobId}`;
    this.title.caption = `Logs of job ${options.jobId}`;
    this._serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._filters = { ...NO_FILTERS, attempt: options.attempt ?? null };
    this._attemptPinned = options.attempt !== undefined;
    this._buffer = new LineBuffer(options.maxLines ?? MAX_LINES);
    this._list = new LogList(this._buffer);
    this._list.onScroll = (atBottom, up) => this._onListScroll(atBottom, up);

    this._buildDom();

    this._poll = new Poll({
      auto: true,
      factory: () => this._serialize(() => this._follow()),
      frequency: {
        interval: FOLLOW_INTERVAL,
        backoff: true,
        max: 10 * FOLLOW_INTERVAL
      },
      name: 'jupyter-air:job-logs',
      standby: () => this._done || this._cursor === null || !this.isVisible
    });

    void this._reload();
  }

  /** The job shown. */
  readonly jobId: string;

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

  /** Why the server refused this job's logs to the caller, or null. */
  get denied(): IAccessDenied | null {
    return this._denied;
  }

  /** Show attempt `attempt` (1-based) of the job. */
  setAttempt(attempt: number): void {
    this._attemptPinned = true;
    if (attempt !== this._filters.attempt) {
      this._filters.attempt = attempt;
      void this._reload();
    }
  }

  /** Follow new lines (scroll to the end) or stop following. */
  setFollowing(following: boolean): void {
    if (following === this._following) {
      if (following) {
        this._list.scrollToBottom();
      }
      return;
    }
    this._following = following;
    if (following) {
      this._newLines = 0;
      this._list.scrollToBottom();
      if (!this._done && this._cursor !== null) {
        void this._poll.refresh();
      }
    }
    this._renderFollow();
    this._renderInfo();
  }

  /** Read the job and its lines again with the current filters. */
  refresh(): Promise<void> {
    return this._reload();
  }

  /** Copy the loaded lines as text; resolves to whether they were copied. */
  async copy(): Promise<boolean> {
    const lines = this._buffer.lines;
    const text = lines.map(lineAsText).join('\n');
    const copied = lines.length > 0 && (await copyText(text));
    this._flash(
      copied
        ? `Copied ${plural(lines.length, 'line')}`
        : lines.length
          ? 'Could not copy to the clipboard'
          : 'Nothing to copy'
    );
    return copied;
  }

  /** The download URL of every line matching the current filters. */
  downloadUrl(): string {
    const query: Query = { ...this._filterQuery() };
    return apiUrl(
      `jobs/${encodeURIComponent(this.jobId)}/logs/download`,
      query,
      this._serverSettings
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this._list.dispose();
    this._resizeObserver?.disconnect();
    this._header.dispose();
    clearTimeout(this._flashTimer);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this._onResize());
      this._resizeObserver.observe(this._list.node);
    }
  }

  protected onBeforeDetach(msg: Message): void {
    this._resizeObserver?.disconnect();
    this._resizeObserver = null;
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._onResize();
    if (!this._done && this._cursor !== null) {
      void this._poll.refresh();
    }
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._onResize();
  }

  protected onActivateRequest(msg: Message): void {
    super.onActivateRequest(msg);
    if (!this.node.contains(document.activeElement)) {
      this._list.node.focus({ preventScroll: true });
    }
  }

  // ---------------------------------------------------------------- loading

  /** Run the requests one at a time (load, follow ticks). */
  private _serialize(fn: () => Promise<void>): Promise<void> {
    const next = this._queue.then(fn, fn);
    this._queue = next.catch(() => undefined);
    return next;
  }

  /** The query of the current filters (the time range ends now or at the job's end). */
  private _filterQuery(): Query {
    const end = this._job?.ended ?? Date.now() / 1000;
    return filterQuery(this._filters, end);
  }

  private _fetchLogs(query: Query): Promise<ILogsResponse> {
    return requestAPI<ILogsResponse>(
      `jobs/${encodeURIComponent(this.jobId)}/logs`,
      {},
      query,
      this._serverSettings
    );
  }

  private async _readJob(): Promise<void> {
    const job = await requestAPI<IJob>(
      `jobs/${encodeURIComponent(this.jobId)}`,
      {},
      {},
      this._serverSettings
    );
    this._job = job;
    if (!this._attemptPinned && job.attempts.length) {
      this._filters.attempt = Math.max(...job.attempts.map(a => a.attempt));
    }
    this._renderHeader();
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
      void this._reload();
    }
  }

  /** Start again from the end of the log with the current filters. */
  private _reload(): Promise<void> {
    const generation = ++this._generation;
    this._cursor = null;
    this._done = false;
    this._truncated = false;
    this._newLines = 0;
    this._error = null;
    this._denied = null;
    this._loading = true;
    this._following = true;
    this._shownAttempt = null;
    this._buffer.clear();
    this._list.highlight = matcher(this._filters.search);
    this._renderHeader();
    this._renderFollow();
    this._renderBody();
    this._renderDownload();
    return this._serialize(async () => {
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
        this._query = this._filterQuery();
        this._renderDownload();
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
          this._error = describeError(error);
          this._showDenied(accessDenied(error));
          this._renderBody();
        }
      }
    });
  }

  /** One follow tick: the lines printed since the last answer. */
  private async _follow(): Promise<void> {
    const generation = this._generation;
    for (let page = 0; page < CATCH_UP_PAGES; page++) {
      const cursor = this._cursor;
      if (generation !== this._generation || this._done || cursor === null) {
        return;
      }
      let answer: ILogsResponse;
      try {
        answer = await this._fetchLogs({
          ...this._query,
          cursor,
          limit: PAGE
        });
      } catch (error) {
        if (generation === this._generation) {
          this._error = describeError(error);
          // A 403 here: the grant was revoked while the view followed.
          this._showDenied(accessDenied(error));
          this._renderInfo();
        }
        throw error;
      }
      if (generation !== this._generation) {
        return;
      }
      this._error = null;
      this._accept(answer);
      if (answer.lines.length < PAGE) {
        return;
      }
    }
  }

  /**
   * Without CAN_VIEW, nothing of the job stays on screen (it may have been shown
   * before the grant was revoked): say so, and who can grant it.
   */
  private _showDenied(denied: IAccessDenied | null): void {
    if (!denied) {
      return;
    }
    this._denied = denied;
    this._job = null;
    this._cursor = null;
    this._buffer.clear();
    this._list.clearRows();
    this._renderHeader();
    this._renderBody();
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
      let grew = false;
      for (const line of answer.lines) {
        grew = this._addSeen(this._seenNodes, line.node) || grew;
        grew = this._addSeen(this._seenRanks, line.rank) || grew;
      }
      if (grew) {
        this._renderOrigins();
      }
      this._list.update(dropped);
      if (this._following) {
        this._list.scrollToBottom();
      } else {
        this._newLines += answer.lines.length;
      }
    }

    const job = this._job;
    if (job) {
      const changed =
        job.status !== answer.status || job.attempts.length < answer.attempts;
      if (changed) {
        job.status = answer.status;
        this._refreshJob();
      }
    }
    this._renderHeader();
    this._renderBody();
  }

  private _addSeen(seen: Set<number>, value: number): boolean {
    if (seen.has(value)) {
      return false;
    }
    seen.add(value);
    return true;
  }

  // ---------------------------------------------------------------- events

  private _onListScroll(atBottom: boolean, up: boolean): void {
    if (atBottom) {
      if (!this._following) {
        this.setFollowing(true);
      }
    } else if (up && this._following) {
      this.setFollowing(false);
    }
  }

  private _onResize(): void {
    if (!this.isVisible) {
      return;
    }
    if (this._following) {
      this._list.scrollToBottom();
    } else {
      this._list.render();
    }
  }

  private _onFilterChange(): void {
    Object.assign(this._filters, this._header.choices);
    void this._reload();
  }

  private _onSearch(search: string): void {
    if (search !== this._filters.search) {
      this._filters.search = search;
      void this._reload();
    }
  }

  /** Show a short-lived message (copy). */
  private _flash(text: string): void {
    clearTimeout(this._flashTimer);
    this._flashText = text;
    this._renderInfo();
    this._flashTimer = window.setTimeout(() => {
      this._flashText = null;
      this._renderInfo();
    }, 3000);
  }

  // ---------------------------------------------------------------- DOM

  private _buildDom(): void {
    this._header = new LogsHeader(this.jobId, {
      attempt: attempt => this.setAttempt(attempt),
      filters: () => this._onFilterChange(),
      search: text => this._onSearch(text),
      follow: () => this.setFollowing(!this._following),
      copy: () => void this.copy(),
      download: () => this._renderDownload()
    });
    this.node.appendChild(this._header.node);

    const body = el('div', 'jp-air-JobLogs-body');
    body.appendChild(this._list.node);
    this._empty = el('div', 'jp-air-JobLogs-empty');
    body.appendChild(this._empty);
    this.node.appendChild(body);

    this._renderHeader();
    this._renderFollow();
    this._renderDownload();
  }

  private _renderHeader(): void {
    this._header.renderJob(this._job, this._filters.attempt);
    this._renderOrigins();
  }

  /** The node and rank choices: the job's nodes and ranks, and any seen. */
  private _renderOrigins(): void {
    const job = this._job;
    const nodes = new Set(this._seenNodes);
    const ranks = new Set(this._seenRanks);
    if (job) {
      for (let n = 0; n < job.nnodes; n++) {
        nodes.add(n);
      }
      for (let r = 0; r < job.nnodes * job.nproc_per_node; r++) {
        ranks.add(r);
      }
    }
    const sorted = (values: Set<number>) =>
      Array.from(values).sort((a, b) => a - b);
    this._header.renderOrigins(sorted(nodes), sorted(ranks));
  }

  private _renderFollow(): void {
    this._header.renderFollow(this._following, !this._done);
  }

  private _renderDownload(): void {
    const attempt = this._filters.attempt;
    this._header.renderDownload(
      this.downloadUrl(),
      attempt === null
        ? `${this.jobId}.log`
        : `${this.jobId}-attempt-${attempt}.log`
    );
  }

  /** Count, notes, message, empty state and follow button. */
  private _renderBody(): void {
    const size = this._buffer.size;
    let empty = '';
    if (this._deniedShown !== this._denied) {
      this._deniedShown = this._denied;
      this._deniedNode?.remove();
      this._deniedNode = this._denied ? renderAccessDenied(this._denied) : null;
      if (this._deniedNode) {
        this._empty.before(this._deniedNode);
      }
    }
    if (size === 0 && !this._denied) {
      if (this._loading) {
        empty = 'Loading…';
      } else if (this._error !== null && this._cursor === null) {
        empty = `Could not load the logs: ${this._error}`;
      } else if (this._isFiltered()) {
        empty = 'No line matches the filters.';
      } else {
        empty = this._done ? 'This attempt printed nothing.' : 'No line yet.';
      }
    }
    this._empty.hidden = !empty;
    this._empty.classList.toggle(
      'jp-mod-error',
      this._error !== null && this._cursor === null
    );
    if (this._empty.textContent !== empty) {
      this._empty.textContent = empty;
    }
    this.node.classList.toggle('jp-mod-done', this._done);
    this._renderFollow();
    this._renderInfo();
  }

  /** The line under the toolbar: count, notes and the message. */
  private _renderInfo(): void {
    const notes: string[] = [];
    if (this._job?.logs_expired) {
      notes.push('The logs of this job have expired.');
    }
    if (this._buffer.dropped > 0) {
      notes.push(
        `Keeping the last ${NUMBER.format(this._buffer.capacity)} lines ` +
          `(${NUMBER.format(this._buffer.dropped)} older ones dropped); ` +
          'download for all.'
      );
    } else if (this._truncated) {
      notes.push(
        `Showing the last ${NUMBER.format(TAIL)} lines` +
          (this._done ? '' : ' and those printed since') +
          '; download for all.'
      );
    }

    let message: string;
    let error = false;
    if (this._flashText !== null) {
      message = this._flashText;
    } else if (this._denied) {
      message = 'No access.';
      error = true;
    } else if (this._error !== null) {
      message = `Update failed: ${this._error}`;
      error = true;
    } else if (this._loading) {
      message = 'Loading…';
    } else if (this._done) {
      message = 'All lines loaded: the job has ended.';
    } else if (!this._following) {
      message = this._newLines
        ? `Paused: ${plural(this._newLines, 'new line')} below.`
        : 'Paused.';
    } else {
      message = 'Following new lines…';
    }
    this._header.renderInfo({
      count: this._loading ? '' : plural(this._buffer.size, 'line'),
      note: notes.join(' '),
      message,
      error
    });
  }

  private _isFiltered(): boolean {
    const f = this._filters;
    return (
      f.node !== null ||
      f.rank !== null ||
      f.level !== '' ||
      f.range !== 'all' ||
      f.search !== ''
    );
  }

  private _serverSettings: ServerConnection.ISettings;
  private _filters: ILogFilters;
  private _attemptPinned: boolean;
  private _shownAttempt: number | null = null;
  private _query: Query = {};
  private _job: IJob | null = null;
  private _jobRefresh: Promise<void> | null = null;
  private _buffer: LineBuffer;
  private _list: LogList;
  private _poll: Poll;
  private _queue: Promise<void> = Promise.resolve();
  private _generation = 0;
  private _cursor: string | null = null;
  private _done = false;
  private _truncated = false;
  private _loading = false;
  private _error: string | null = null;
  private _denied: IAccessDenied | null = null;
  private _following = true;
  private _newLines = 0;
  private _flashText: string | null = null;
  private _flashTimer = 0;
  private _seenNodes = new Set<number>();
  private _seenRanks = new Set<number>();
  private _resizeObserver: ResizeObserver | null = null;

  private _header!: LogsHeader;
  private _empty!: HTMLDivElement;
  private _deniedNode: HTMLElement | null = null;
  private _deniedShown: IAccessDenied | null = null;
}

export namespace JobLogsView {
  export interface IOptions {
    /** The job to show. */
    jobId: string;
    /** The attempt to show (default: the latest, and each new one). */
    attempt?: number;
    /** Server connection settings (default: the page's). */
    serverSettings?: ServerConnection.ISettings;
    /** Lines kept in the browser (default {@link MAX_LINES}). */
    maxLines?: number;
  }
}
