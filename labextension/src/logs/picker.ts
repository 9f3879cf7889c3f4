/**
 * A dialog that picks one of the recent jobs.
 */

import { Dialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { el } from '../dom';
import { requestAPI } from '../request';
import { jobLabel } from './format';
import type { IJob, IJobsResponse } from './types';

/** Jobs listed by the picker. */
export const PICKER_LIMIT = 50;

/**
 * The body of the dialog: a filter box and the list of jobs, newest first (a
 * listbox of our own: the dialog would restyle a `<select>` as a drop-down).
 */
export class JobPicker
  extends Widget
  implements Dialog.IBodyWidget<string | null>
{
  constructor(jobs: IJob[]) {
    super();
    this.addClass('jp-air-JobPicker');
    const sorted = [...jobs].sort((a, b) => b.created - a.created);

    const filter = el('input', 'jp-air-JobPicker-filter');
    filter.type = 'search';
    filter.placeholder = 'Filter by id, status or run name';
    filter.setAttribute('aria-label', 'Filter the jobs');
    filter.addEventListener('input', () => this._filter());
    filter.addEventListener('keydown', event => {
      if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
        event.preventDefault();
        this._move(event.key === 'ArrowDown' ? 1 : -1);
      }
    });
    this._filterInput = filter;

    const list = el('ul', 'jp-air-JobPicker-list');
    list.tabIndex = 0;
    list.setAttribute('role', 'listbox');
    list.setAttribute('aria-label', 'Recent jobs');
    for (const job of sorted) {
      const item = el('li', 'jp-air-JobPicker-item', jobLabel(job));
      item.setAttribute('role', 'option');
      item.dataset.jobId = job.id;
      item.dataset.status = job.status.toLowerCase();
      item.addEventListener('click', () => this._select(item));
      item.addEventListener('dblclick', () => {
        this._select(item);
        this.onAccept?.();
      });
      list.appendChild(item);
      this._items.push(item);
    }
    list.addEventListener('keydown', event => {
      switch (event.key) {
        case 'ArrowDown':
        case 'ArrowUp':
          event.preventDefault();
          this._move(event.key === 'ArrowDown' ? 1 : -1);
          break;
        case 'Home':
        case 'End': {
          event.preventDefault();
          const shown = this._shown();
          this._select(
            (event.key === 'Home' ? shown[0] : shown[shown.length - 1]) ?? null
          );
          break;
        }
        case 'Enter':
          event.preventDefault();
          event.stopPropagation();
          this.onAccept?.();
          break;
        default:
          break;
      }
    });

    if (sorted.length) {
      this.node.append(filter, list);
      this._select(this._items[0]);
    } else {
      this.node.appendChild(
        el(
          'p',
          'jp-air-JobPicker-empty',
          'No jobs yet: run a cell with %%air_distributed, or `air run -f workload.yaml`.'
        )
      );
    }
  }

  /** Called on a double click or Enter in the list. */
  onAccept: (() => void) | null = null;

  /** The chosen job id, or null. */
  getValue(): string | null {
    return this._selected?.dataset.jobId ?? null;
  }

  /** Choose the job `jobId` (when it is listed). */
  select(jobId: string): void {
    this._select(this._items.find(i => i.dataset.jobId === jobId) ?? null);
  }

  private _shown(): HTMLLIElement[] {
    return this._items.filter(item => !item.hidden);
  }

  private _select(item: HTMLLIElement | null): void {
    if (this._selected) {
      this._selected.classList.remove('jp-mod-selected');
      this._selected.setAttribute('aria-selected', 'false');
    }
    this._selected = item;
    if (item) {
      item.classList.add('jp-mod-selected');
      item.setAttribute('aria-selected', 'true');
      item.scrollIntoView({ block: 'nearest' });
    }
  }

  private _move(step: number): void {
    const shown = this._shown();
    if (!shown.length) {
      return;
    }
    const at = this._selected ? shown.indexOf(this._selected) : -1;
    const next = Math.min(shown.length - 1, Math.max(0, at + step));
    this._select(shown[next]);
  }

  private _filter(): void {
    const term = this._filterInput.value.trim().toLowerCase();
    for (const item of this._items) {
      item.hidden = !!term && !item.textContent?.toLowerCase().includes(term);
    }
    if (!this._selected || this._selected.hidden) {
      this._select(this._shown()[0] ?? null);
    }
  }

  private _filterInput: HTMLInputElement;
  private _items: HTMLLIElement[] = [];
  private _selected: HTMLLIElement | null = null;
}

/**
 * Ask the user to choose one of the recent jobs (all statuses). Resolves to
 * its id, or null when the dialog was cancelled.
 */
export async function pickJob(
  serverSettings?: ServerConnection.ISettings
): Promise<string | null> {
  const { jobs } = await requestAPI<IJobsResponse>(
    'jobs',
    {},
    { all: 1, limit: PICKER_LIMIT },
    serverSettings
  );
  const body = new JobPicker(jobs);
  const dialog = new Dialog<string | null>({
    title: 'Open job logs',
    body,
    buttons: [
      Dialog.cancelButton(),
      Dialog.okButton({ label: 'Open', accept: true })
    ],
    focusNodeSelector: '.jp-air-JobPicker-list'
  });
  body.onAccept = () => dialog.resolve(1);
  const result = await dialog.launch();
  return result.button.accept ? result.value : null;
}
