/**
 * The state of the "Schedule this notebook" form: its fields, the preview of
 * the cron (its words and next fire times, asked of the server a moment after
 * the user stops typing) and the save.
 */

import { Debouncer } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import type { Requester } from '../common/api';
import { describeError } from '../common/model';
import type { INotebookScheduleFields, IPreview, ISchedule } from './types';

/** Fire times the preview shows. */
export const PREVIEW_COUNT = 5;

/** Most ranks the form takes (the server checks the machine's own limits). */
export const MAX_RANKS = 1024;

/** The name a new schedule of `notebook` gets: its file name without `.ipynb`. */
export function defaultName(notebook: string): string {
  const file = notebook.split('/').pop() ?? notebook;
  return file.replace(/\.ipynb$/i, '') || 'notebook';
}

/** The browser's IANA time zone, else UTC. */
export function browserTimeZone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

export class ScheduleForm {
  constructor(options: ScheduleForm.IOptions) {
    this._request = options.request;
    this._fields = {
      notebook: options.notebook,
      name: defaultName(options.notebook),
      cron: '0 2 * * *',
      timezone: options.timezone ?? browserTimeZone(),
      nproc_per_node: 1,
      experiment: ''
    };
    this._debouncer = new Debouncer(
      () => this._preview(),
      options.debounce ?? 300
    );
    void this._debouncer.invoke();
  }

  /** Emitted when a field, the preview or the save's state changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get fields(): Readonly<INotebookScheduleFields> {
    return this._fields;
  }

  /** The words and next fire times of the cron and time zone as they are now. */
  get preview(): IPreview | null {
    return this._previewDoc;
  }

  /** Why the server refused the cron or time zone (it names the field). */
  get previewError(): string | null {
    return this._previewError;
  }

  get saving(): boolean {
    return this._saving;
  }

  get saveError(): string | null {
    return this._saveError;
  }

  /** What keeps the form from saving, in words, or null. */
  get problem(): string | null {
    const f = this._fields;
    if (!f.name.trim()) {
      return 'Give the schedule a name.';
    }
    if (!f.cron.trim()) {
      return 'Give a cron expression.';
    }
    if (
      !Number.isInteger(f.nproc_per_node) ||
      f.nproc_per_node < 1 ||
      f.nproc_per_node > MAX_RANKS
    ) {
      return `Ranks must be a whole number from 1 to ${MAX_RANKS}.`;
    }
    return this._previewError;
  }

  /** Change a field; a new cron or time zone is previewed once typing pauses. */
  set<K extends keyof INotebookScheduleFields>(
    key: K,
    value: INotebookScheduleFields[K]
  ): void {
    if (this._fields[key] === value) {
      return;
    }
    this._fields = { ...this._fields, [key]: value };
    this._saveError = null;
    if (key === 'cron' || key === 'timezone') {
      this._previewDoc = null;
      this._previewError = null;
      void this._debouncer.invoke();
    }
    this._changed.emit();
  }

  /** Create the schedule; null (with `saveError` set) when the server refused it. */
  async save(): Promise<ISchedule | null> {
    if (this._saving || this.problem !== null) {
      return null;
    }
    this._saving = true;
    this._saveError = null;
    this._changed.emit();
    try {
      const f = this._fields;
      const body = {
        ...f,
        name: f.name.trim(),
        cron: f.cron.trim(),
        experiment: f.experiment.trim() || undefined
      };
      return await this._request<ISchedule>('schedules', {
        method: 'POST',
        body: JSON.stringify(body)
      });
    } catch (error) {
      this._saveError = describeError(error);
      return null;
    } finally {
      this._saving = false;
      this._changed.emit();
    }
  }

  dispose(): void {
    this._debouncer.dispose();
    Signal.clearData(this);
  }

  private async _preview(): Promise<void> {
    const { cron, timezone } = this._fields;
    const asked = ++this._asked;
    if (!cron.trim()) {
      return;
    }
    let doc: IPreview | null = null;
    let error: string | null = null;
    try {
      doc = await this._request<IPreview>('schedules/preview', undefined, {
        cron: cron.trim(),
        timezone: timezone.trim() || 'UTC',
        count: PREVIEW_COUNT
      });
    } catch (reason) {
      error = describeError(reason);
    }
    if (asked !== this._asked) {
      return; // the user typed on meanwhile
    }
    this._previewDoc = doc;
    this._previewError = error;
    this._changed.emit();
  }

  private _request: Requester;
  private _fields: INotebookScheduleFields;
  private _debouncer: Debouncer;
  private _asked = 0;
  private _previewDoc: IPreview | null = null;
  private _previewError: string | null = null;
  private _saving = false;
  private _saveError: string | null = null;
  private _changed = new Signal<this, void>(this);
}

export namespace ScheduleForm {
  export interface IOptions {
    request: Requester;
    /** The notebook to schedule, relative to the server's root. */
    notebook: string;
    /** Default: the browser's. */
    timezone?: string;
    /** Milliseconds after the last keystroke before the preview is asked (default 300). */
    debounce?: number;
  }
}
