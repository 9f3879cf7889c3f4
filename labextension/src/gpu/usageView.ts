/**
 * The GPU panel's usage view (see `usage.ts`): a folded section that asks the
 * server when opened, and again on a change of window; the figures move by
 * the hour, not with the panel's poll.
 */

import { Widget } from '@lumino/widgets';

import type { Requester } from '../common/api';
import { el } from '../dom';
import { IUsageResponse, USAGE_WINDOWS, usageRows, usageScope } from './usage';

const PREFIX = 'jp-air-GpuUsage';

/** A folded section of the panel; opening it asks the server. */
export class GpuUsageView extends Widget {
  constructor(private readonly _request: Requester) {
    super();
    this.addClass(PREFIX);
    const details = el('details', `${PREFIX}-details`);
    const summary = el('summary', `${PREFIX}-summary`, 'GPU usage');
    this._window = el('select', `${PREFIX}-window`);
    this._window.setAttribute('aria-label', 'Usage window');
    for (const [value, label] of Object.entries(USAGE_WINDOWS)) {
      const option = el('option', '', label);
      option.value = value;
      this._window.appendChild(option);
    }
    this._status = el('div', `${PREFIX}-status`);
    this._table = el('table', `${PREFIX}-table`);
    details.append(summary, this._window, this._status, this._table);
    this.node.appendChild(details);
    details.addEventListener('toggle', () => {
      if (details.open) {
        void this.load();
      }
    });
    this._window.addEventListener('change', () => void this.load());
  }

  /** Ask the server for the window picked, and show the answer. */
  async load(): Promise<void> {
    const asked = ++this._asked;
    this._status.textContent = 'Loading…';
    try {
      const doc = await this._request<IUsageResponse>(
        'gpu/usage',
        {},
        {
          since: this._window.value
        }
      );
      if (asked === this._asked) {
        this._show(doc);
      }
    } catch (error) {
      if (asked === this._asked) {
        this._status.textContent = `Could not load the usage: ${
          error instanceof Error ? error.message : String(error)
        }`;
        this._table.replaceChildren();
      }
    }
  }

  private _show(doc: IUsageResponse): void {
    const rows = usageRows(doc);
    this._status.textContent = rows.length
      ? usageScope(doc)
      : 'No job held a GPU in this window.';
    const head = el('tr');
    for (const text of ['', 'GPUs', 'GPU-h', 'idle GPU-h']) {
      head.appendChild(el('th', '', text));
    }
    const body = rows.map(row => {
      const tr = el('tr', `${PREFIX}-${row.kind}`);
      const label = el('td', `${PREFIX}-label`, row.label);
      label.title = row.title;
      tr.append(label, el('td', '', row.gpus), el('td', '', row.hours));
      tr.appendChild(el('td', '', row.idle));
      return tr;
    });
    this._table.replaceChildren(head, ...body);
  }

  private _asked = 0;
  private _window: HTMLSelectElement;
  private _status: HTMLDivElement;
  private _table: HTMLTableElement;
}
