/**
 * The "Job logs" view: one job's log lines, searched, filtered, followed.
 */

import { ServerConnection } from '@jupyterlab/services';
import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { activateWhileShown } from '../common/activation';
import { el } from '../dom';
import { apiUrl, requester } from '../request';
import { renderAccessDenied } from './access';
import { logsTabTitle, matcher } from './format';
import { LogsHeader } from './header';
import { LogList } from './list';
import { ILinesChange, JobLogsModel } from './model';
import { ProfilePanel } from './profile';
import { emptyTextOf } from './status';
import type { IAccessDenied } from './types';

/**
 * One job's log lines (see `JobLogsModel`): a header (job, status, attempt,
 * MLflow run link, search, filters, actions), then the lines of the chosen
 * attempt, time-ordered across nodes and ranks; only the rows in view are in
 * the DOM. Without the job's CAN_VIEW the view says so and who can grant it.
 */
export class JobLogsView extends Widget {
  constructor(options: JobLogsView.IOptions) {
    super();
    const serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    const model = options.model;
    this.model = model;
    this.jobId = model.jobId;
    this.addClass('jp-air-JobLogs');
    this.node.dataset.jobId = model.jobId;

    this._list = new LogList(model.lines);
    this._list.scrolled.connect(this._onListScroll, this);
    this._header = new LogsHeader(
      model,
      () =>
        apiUrl(
          `jobs/${encodeURIComponent(model.jobId)}/logs/download`,
          model.query,
          serverSettings
        ),
      options.openJob
    );
    this.profile = new ProfilePanel({
      jobId: model.jobId,
      request: requester(serverSettings),
      traceUrl: id =>
        apiUrl(
          `jobs/${encodeURIComponent(model.jobId)}/profiles/${id}/trace`,
          {},
          serverSettings
        )
    });
    const body = el('div', 'jp-air-JobLogs-body');
    this._body = body;
    body.appendChild(this._list.node);
    this._empty = el('div', 'jp-air-JobLogs-empty');
    body.appendChild(this._empty);
    this.node.appendChild(body);

    model.linesChanged.connect(this._onLines, this);
    model.stateChanged.connect(this._render, this);
    activateWhileShown(this, model);
    this._render();
  }

  /** The state shown. */
  readonly model: JobLogsModel;

  /** The job shown. */
  readonly jobId: string;

  /** The Profile action and the job's latest profile, under the header. */
  readonly profile: ProfilePanel;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    this._list.dispose();
    this.profile.dispose();
    this._resizeObserver?.disconnect();
    this._header.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    // The header is a React widget outside any layout: attached with the view.
    if (!this._header.isAttached) {
      Widget.attach(this._header, this.node, this._body);
    }
    if (this.profile.node.nextSibling !== this._body) {
      this._body.before(this.profile.node); // under the header
    }
    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this._onResize());
      this._resizeObserver.observe(this._list.node);
    }
  }

  protected onBeforeDetach(msg: Message): void {
    this._resizeObserver?.disconnect();
    this._resizeObserver = null;
    if (this._header.isAttached) {
      Widget.detach(this._header);
    }
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._onResize();
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

  private _onLines(_: JobLogsModel, change: ILinesChange): void {
    if (change.cleared) {
      // A new query: its search term is highlighted in the new rows.
      this._list.highlight = matcher(this.model.filters.search);
    } else if (change.relabelled) {
      this._list.clearRows(); // rows drawn before their cell was known
    }
    this._list.update(change.dropped);
    if (this.model.following) {
      this._list.scrollToBottom();
    }
  }

  private _onListScroll(
    _: LogList,
    { atBottom, up }: { atBottom: boolean; up: boolean }
  ): void {
    if (atBottom) {
      this.model.setFollowing(true);
    } else if (up && this.model.following) {
      this.model.setFollowing(false);
    }
  }

  private _onResize(): void {
    if (!this.isVisible) {
      return;
    }
    if (this.model.following) {
      this._list.scrollToBottom();
    } else {
      this._list.render();
    }
  }

  /** The tab's title, the denial notice, the empty state, and following's scroll. */
  private _render(): void {
    const model = this.model;
    const { label, caption } = logsTabTitle(model.jobId, model.job);
    this.title.label = label;
    this.title.caption = caption;
    if (this._deniedShown !== model.denied) {
      this._deniedShown = model.denied;
      this._deniedNode?.remove();
      this._deniedNode = model.denied ? renderAccessDenied(model.denied) : null;
      if (this._deniedNode) {
        this._empty.before(this._deniedNode);
      }
    }
    const empty = emptyTextOf(model);
    this._empty.hidden = !empty;
    this._empty.classList.toggle('jp-mod-error', model.failed);
    if (this._empty.textContent !== empty) {
      this._empty.textContent = empty;
    }
    this.node.classList.toggle('jp-mod-done', model.done);
    if (model.job) {
      this.profile.setRunning(!model.done);
    }
    if (model.following && !this._following) {
      this._list.scrollToBottom(); // following again: go to the newest line
    }
    this._following = model.following;
  }

  private _list: LogList;
  private _header: LogsHeader;
  private _body: HTMLDivElement;
  private _empty: HTMLDivElement;
  private _resizeObserver: ResizeObserver | null = null;
  private _deniedNode: HTMLElement | null = null;
  private _deniedShown: IAccessDenied | null = null;
  /** Whether following was on at the last render (to scroll when it turns on). */
  private _following = true;
}

export namespace JobLogsView {
  export interface IOptions {
    /** The state shown; the view disposes of it with itself. */
    model: JobLogsModel;
    /** Server connection settings of the download link (default: the page's). */
    serverSettings?: ServerConnection.ISettings;
    /** Open another job's logs: the job that started this one, or one it started. */
    openJob?: (jobId: string) => void;
  }
}
