/**
 * The header of the "Job logs" view: the job, its attempts, the search box,
 * filters and actions, and a line of counts and messages. It renders the
 * model on every change and calls the model for what the user does; it
 * holds no state of its own.
 */

import {
  copyIcon,
  downloadIcon,
  LabIcon,
  Styling
} from '@jupyterlab/ui-components';

import { el } from '../dom';
import { isLevelKey, isRangeKey, LEVELS, RANGES } from './filters';
import { formatTime, plural } from './format';
import type { JobLogsModel } from './model';
import { IInfo, infoOf } from './status';
import type { IJob } from './types';

/** Milliseconds of typing pause before a search is sent. */
const SEARCH_DELAY = 300;

/** `[value, label]` pairs of a select; the value '' is "all". */
type Options = [string, string][];

function makeSelect(
  className: string,
  label: string,
  options: Options
): HTMLSelectElement {
  const select = el('select', className);
  select.title = label;
  select.setAttribute('aria-label', label);
  setOptions(select, options);
  return select;
}

/** Replace the options of `select`, keeping its value when it is still offered. */
function setOptions(select: HTMLSelectElement, options: Options): void {
  const value = select.value;
  select.textContent = '';
  for (const [key, text] of options) {
    const option = el('option', undefined, text);
    option.value = key;
    select.appendChild(option);
  }
  if (options.some(([key]) => key === value)) {
    select.value = value;
  }
}

function toolbarButton(
  className: string,
  label: string,
  title: string,
  icon?: LabIcon
): HTMLButtonElement {
  const button = el(
    'button',
    `jp-Button jp-mod-minimal jp-air-JobLogs-button ${className}`
  );
  button.type = 'button';
  button.title = title;
  if (icon) {
    button.appendChild(
      icon.element({ tag: 'span', stylesheet: 'toolbarButton' })
    );
  }
  button.appendChild(el('span', 'jp-air-JobLogs-buttonLabel', label));
  return button;
}

function setText(node: HTMLElement, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

export class LogsHeader {
  /** `downloadUrl`: the URL of every line matching the model's filters. */
  constructor(
    readonly model: JobLogsModel,
    downloadUrl: () => string
  ) {
    this._downloadUrl = downloadUrl;
    const jobId = model.jobId;
    const node = el('div', 'jp-air-JobLogs-header');

    const titleRow = el('div', 'jp-air-JobLogs-titleRow');
    titleRow.appendChild(el('span', 'jp-air-JobLogs-jobId', jobId));
    this._status = el('span', 'jp-air-JobLogs-status', '…');
    this._status.setAttribute('aria-label', 'Job status');
    titleRow.appendChild(this._status);
    this._meta = el('span', 'jp-air-JobLogs-meta');
    titleRow.appendChild(this._meta);

    this._attempt = makeSelect('jp-air-JobLogs-attempt', 'Attempt', []);
    this._attempt.addEventListener('change', () => {
      const attempt = Number(this._attempt.value);
      if (Number.isInteger(attempt) && attempt > 0) {
        model.setAttempt(attempt);
      }
    });
    titleRow.appendChild(Styling.wrapSelect(this._attempt));

    this._runLink = el('a', 'jp-air-JobLogs-runLink', 'MLflow run ↗');
    this._runLink.target = '_blank';
    this._runLink.rel = 'noopener noreferrer';
    this._runLink.hidden = true;
    titleRow.appendChild(this._runLink);
    node.appendChild(titleRow);

    node.appendChild(this._buildToolbar());

    const info = el('div', 'jp-air-JobLogs-info');
    this._count = el('span', 'jp-air-JobLogs-count');
    this._note = el('span', 'jp-air-JobLogs-note');
    this._message = el('span', 'jp-air-JobLogs-message');
    this._message.setAttribute('aria-live', 'polite');
    info.append(this._count, this._note, this._message);
    node.appendChild(info);

    this.node = node;
    model.stateChanged.connect(this.render, this);
    this.render();
  }

  readonly node: HTMLDivElement;

  /** Everything from the model (each part writes only what changed). */
  render(): void {
    const model = this.model;
    this.renderJob(model.job, model.filters.attempt);
    const { nodes, ranks } = model.origins;
    this.renderOrigins(nodes, ranks);
    this.renderFollow(model.following, !model.done);
    this.renderDownload();
    this.renderInfo(infoOf(model));
  }

  /** Apply the node, rank, level and time range chosen to the model. */
  private _applyChoices(): void {
    const number = (select: HTMLSelectElement) =>
      select.value === '' ? null : Number(select.value);
    const level = this._level.value;
    const range = this._range.value;
    this.model.setFilters({
      node: number(this._node),
      rank: number(this._rank),
      level: isLevelKey(level) ? level : '',
      range: isRangeKey(range) ? range : 'all'
    });
  }

  /** Status, run name and times, the attempts and the chosen one's run link. */
  renderJob(job: IJob | null, attempt: number | null): void {
    setText(this._status, job?.status ?? '…');
    this._status.dataset.status = job?.status.toLowerCase() ?? '';

    const meta: string[] = [];
    if (job) {
      if (job.run_name) {
        meta.push(job.run_name);
      }
      meta.push(job.owner);
      meta.push(
        job.nnodes > 1
          ? `${job.nnodes} nodes × ${plural(job.nproc_per_node, 'rank')}`
          : plural(job.nproc_per_node, 'rank')
      );
      if (job.started) {
        meta.push(`started ${formatTime(job.started).slice(0, 8)}`);
      }
      if (job.ended) {
        meta.push(`ended ${formatTime(job.ended).slice(0, 8)}`);
      }
    }
    setText(this._meta, meta.join(' · '));

    const attempts = job?.attempts ?? [];
    const key = attempts.map(a => `${a.attempt}:${a.status}`).join(',');
    if (key !== this._attemptsKey) {
      this._attemptsKey = key;
      setOptions(
        this._attempt,
        attempts.map(a => [
          String(a.attempt),
          `Attempt ${a.attempt} · ${a.status}`
        ])
      );
    }
    this._attempt.disabled = attempts.length < 2;
    if (attempt !== null) {
      this._attempt.value = String(attempt);
    }

    const shown = attempts.find(a => a.attempt === attempt);
    const url = shown?.run_url ?? null;
    this._runLink.hidden = !url;
    if (url && this._runLink.getAttribute('href') !== url) {
      this._runLink.href = url;
      this._runLink.title = `MLflow run ${shown?.run_id ?? ''}`.trim();
    }
  }

  /** The node and rank choices (sorted). */
  renderOrigins(nodes: number[], ranks: number[]): void {
    const key = `${nodes.join(',')}/${ranks.join(',')}`;
    if (key === this._originsKey) {
      return;
    }
    this._originsKey = key;
    setOptions(this._node, [
      ['', 'All nodes'],
      ...nodes.map((n): [string, string] => [String(n), `Node ${n}`])
    ]);
    setOptions(this._rank, [
      ['', 'All ranks'],
      ...ranks.map((r): [string, string] => [String(r), `Rank ${r}`])
    ]);
  }

  /** The follow button: pressed while following, disabled once the job ended. */
  renderFollow(following: boolean, active: boolean): void {
    const button = this._follow;
    button.disabled = !active;
    button.setAttribute('aria-pressed', String(following && active));
    button.classList.toggle('jp-mod-active', following && active);
    button.title = !active
      ? 'The job has ended: nothing more to follow'
      : following
        ? 'Following new lines: click (or scroll up) to pause'
        : 'Paused: click (or scroll to the bottom) to follow new lines';
  }

  /** The download link: every line matching the filters (as of now). */
  renderDownload(): void {
    const href = this._downloadUrl();
    if (this._download.getAttribute('href') !== href) {
      this._download.href = href;
    }
    this._download.download = this.model.filename;
  }

  renderInfo(info: IInfo): void {
    setText(this._count, info.count);
    setText(this._note, info.note);
    setText(this._message, info.message);
    this._message.classList.toggle('jp-mod-error', info.error);
  }

  dispose(): void {
    clearTimeout(this._searchTimer);
    this.model.stateChanged.disconnect(this.render, this);
  }

  private _buildToolbar(): HTMLDivElement {
    const model = this.model;
    const toolbar = el('div', 'jp-air-JobLogs-toolbar');

    const search = el('input', 'jp-mod-styled jp-air-JobLogs-search');
    search.type = 'search';
    search.placeholder = 'Search';
    search.title =
      'Show only the lines that contain this text (case-insensitive)';
    search.setAttribute('aria-label', 'Search the lines');
    search.spellcheck = false;
    const send = (delay: number) => {
      clearTimeout(this._searchTimer);
      if (delay) {
        this._searchTimer = window.setTimeout(
          () => model.setFilters({ search: search.value }),
          delay
        );
      } else {
        model.setFilters({ search: search.value });
      }
    };
    search.addEventListener('input', () => send(SEARCH_DELAY));
    search.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        send(0);
      } else if (event.key === 'Escape' && search.value) {
        event.stopPropagation();
        search.value = '';
        send(0);
      }
    });
    toolbar.appendChild(search);

    this._node = makeSelect('jp-air-JobLogs-node', 'Node', [['', 'All nodes']]);
    this._rank = makeSelect('jp-air-JobLogs-rank', 'Rank', [['', 'All ranks']]);
    this._level = makeSelect(
      'jp-air-JobLogs-level',
      'Level',
      Object.entries(LEVELS)
    );
    this._range = makeSelect(
      'jp-air-JobLogs-range',
      'Time range',
      Object.entries(RANGES).map(([key, { label }]) => [key, label])
    );
    for (const select of [this._node, this._rank, this._level, this._range]) {
      select.addEventListener('change', () => this._applyChoices());
      toolbar.appendChild(Styling.wrapSelect(select));
    }

    toolbar.appendChild(el('span', 'jp-air-JobLogs-spacer'));

    this._follow = toolbarButton(
      'jp-air-JobLogs-follow',
      'Follow',
      'Show new lines as they arrive'
    );
    this._follow.addEventListener('click', () =>
      model.setFollowing(!model.following)
    );
    toolbar.appendChild(this._follow);

    const copy = toolbarButton(
      'jp-air-JobLogs-copy',
      'Copy',
      'Copy the loaded lines as text',
      copyIcon
    );
    copy.addEventListener('click', () => void model.copy());
    toolbar.appendChild(copy);

    const download = el(
      'a',
      'jp-Button jp-mod-minimal jp-air-JobLogs-button jp-air-JobLogs-download'
    );
    download.title = 'Download every line that matches the filters';
    download.appendChild(
      downloadIcon.element({ tag: 'span', stylesheet: 'toolbarButton' })
    );
    download.appendChild(el('span', 'jp-air-JobLogs-buttonLabel', 'Download'));
    // The link is followed after the click handlers: this one can update it.
    download.addEventListener('click', () => this.renderDownload());
    this._download = download;
    toolbar.appendChild(download);
    return toolbar;
  }

  private _downloadUrl: () => string;
  private _attemptsKey = '';
  private _originsKey = '';
  private _searchTimer = 0;
  private _status: HTMLSpanElement;
  private _meta: HTMLSpanElement;
  private _attempt: HTMLSelectElement;
  private _runLink: HTMLAnchorElement;
  private _count: HTMLSpanElement;
  private _note: HTMLSpanElement;
  private _message: HTMLSpanElement;
  private _node!: HTMLSelectElement;
  private _rank!: HTMLSelectElement;
  private _level!: HTMLSelectElement;
  private _range!: HTMLSelectElement;
  private _follow!: HTMLButtonElement;
  private _download!: HTMLAnchorElement;
}
