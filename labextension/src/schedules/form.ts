/**
 * The state of the "Schedule this notebook" form: its fields, the preview of
 * the cron (its words and next fire times, asked of the server a moment after
 * the user stops typing) and the save. The notebook is the schedule's one task
 * until the user adds others: then the form holds the whole task graph (other
 * notebooks, commands, what each waits for), which is saved as such.
 */

import { Debouncer } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import type { Requester } from '../common/api';
import { describeError } from '../common/model';
import type {
  INotebookScheduleFields,
  IPreview,
  ISchedule,
  ITaskDraft
} from './types';

/** Fire times the preview shows. */
export const PREVIEW_COUNT = 5;

/** Most ranks the form takes (the server checks the machine's own limits). */
export const MAX_RANKS = 1024;

/** What a task key may be, as schedule files say. */
const TASK_KEY = /^[A-Za-z0-9_-]{1,100}$/;

/** The key of the notebook's own task (as `%air_schedule` names it). */
export const NOTEBOOK_TASK = 'notebook';

/** A task of the form in a schedule file's words, as the route takes it. */
export function taskDocument(task: ITaskDraft): Record<string, unknown> {
  const doc: Record<string, unknown> = { task_key: task.key.trim() };
  if (task.kind === 'notebook') {
    doc.notebook = task.target.trim();
    doc.parameters = { nproc_per_node: task.ranks };
  } else {
    doc.workload = {
      command: task.target.trim(),
      compute: { nproc_per_node: task.ranks }
    };
  }
  if (task.dependsOn.length > 0) {
    doc.depends_on = task.dependsOn.map(key => ({ task_key: key }));
    doc.run_if = task.runIf;
  }
  return doc;
}

/** A loop in what the tasks wait for, as keys (`a`, `b`, `a`), or null. */
export function dependencyCycle(tasks: readonly ITaskDraft[]): string[] | null {
  const waits = new Map(tasks.map(t => [t.key, t.dependsOn]));
  const done = new Set<string>();
  const visit = (key: string, path: string[]): string[] | null => {
    if (path.includes(key)) {
      return [...path.slice(path.indexOf(key)), key];
    }
    if (done.has(key)) {
      return null;
    }
    for (const next of waits.get(key) ?? []) {
      const cycle = visit(next, [...path, key]);
      if (cycle) {
        return cycle;
      }
    }
    done.add(key);
    return null;
  };
  for (const task of tasks) {
    const cycle = visit(task.key, []);
    if (cycle) {
      return cycle;
    }
  }
  return null;
}

function ranksProblem(ranks: number): string | null {
  return Number.isInteger(ranks) && ranks >= 1 && ranks <= MAX_RANKS
    ? null
    : `Ranks must be a whole number from 1 to ${MAX_RANKS}.`;
}

/** What is wrong with the task graph, in words, or null. */
function tasksProblem(tasks: readonly ITaskDraft[]): string | null {
  const keys = tasks.map(t => t.key);
  for (const task of tasks) {
    const name = task.key || 'a task without a key';
    if (!TASK_KEY.test(task.key)) {
      return `Task "${name}": a key is letters, digits, _ and - (at most 100).`;
    }
    if (keys.indexOf(task.key) !== keys.lastIndexOf(task.key)) {
      return `Two tasks are called "${task.key}".`;
    }
    if (!task.target.trim()) {
      return `Task "${name}": give ${task.kind === 'notebook' ? "the notebook's path" : 'a command'}.`;
    }
    if (task.kind === 'notebook' && !/\.ipynb$/i.test(task.target.trim())) {
      return `Task "${name}": a notebook's path ends in .ipynb.`;
    }
    const ranks = ranksProblem(task.ranks);
    if (ranks) {
      return `Task "${name}": ${ranks}`;
    }
  }
  const cycle = dependencyCycle(tasks);
  return cycle ? `The tasks wait for each other: ${cycle.join(' → ')}.` : null;
}

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

  /**
   * The task graph, once the user added a task (the notebook's task first);
   * empty while the notebook is the one task, with the form's ranks.
   */
  get tasks(): readonly ITaskDraft[] {
    return this._tasks;
  }

  /** Add a task waiting for the last one (a chain, the usual case). */
  addTask(kind: ITaskDraft['kind']): void {
    if (this._tasks.length === 0) {
      this._tasks = [
        {
          key: NOTEBOOK_TASK,
          kind: 'notebook',
          target: this._fields.notebook,
          ranks: this._fields.nproc_per_node,
          dependsOn: [],
          runIf: 'ALL_SUCCESS'
        }
      ];
    }
    const keys = new Set(this._tasks.map(t => t.key));
    let n = this._tasks.length + 1;
    while (keys.has(`task_${n}`)) {
      n++;
    }
    const last = this._tasks[this._tasks.length - 1];
    this._tasks = [
      ...this._tasks,
      {
        key: `task_${n}`,
        kind,
        target: '',
        ranks: 1,
        dependsOn: last.key ? [last.key] : [],
        runIf: 'ALL_SUCCESS'
      }
    ];
    this._edited();
  }

  /** Change a task; a new key is followed by the tasks that wait for it. */
  setTask(index: number, change: Partial<ITaskDraft>): void {
    const before = this._tasks[index];
    if (!before) {
      return;
    }
    const after = { ...before, ...change };
    this._tasks = this._tasks.map((task, i) => {
      if (i === index) {
        return after;
      }
      return after.key === before.key
        ? task
        : {
            ...task,
            dependsOn: task.dependsOn.map(k =>
              k === before.key ? after.key : k
            )
          };
    });
    this._edited();
  }

  /** Make `index` wait for `key`, or no longer. */
  setWaitsFor(index: number, key: string, waits: boolean): void {
    const task = this._tasks[index];
    if (!task) {
      return;
    }
    const others = task.dependsOn.filter(k => k !== key);
    this.setTask(index, { dependsOn: waits ? [...others, key] : others });
  }

  /** Remove a task (not the last one); the tasks that waited for it no longer do. */
  removeTask(index: number): void {
    const gone = this._tasks[index];
    if (!gone || this._tasks.length < 2) {
      return;
    }
    this._tasks = this._tasks
      .filter((_, i) => i !== index)
      .map(task => ({
        ...task,
        dependsOn: task.dependsOn.filter(k => k !== gone.key)
      }));
    this._edited();
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
    const tasks =
      this._tasks.length > 0
        ? tasksProblem(this._tasks)
        : ranksProblem(f.nproc_per_node);
    return tasks ?? this._previewError;
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
    if (key === 'cron' || key === 'timezone') {
      this._previewDoc = null;
      this._previewError = null;
      void this._debouncer.invoke();
    }
    this._edited();
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
      const graph = this._tasks.length > 0;
      const body = {
        ...f,
        name: f.name.trim(),
        cron: f.cron.trim(),
        experiment: f.experiment.trim() || undefined,
        nproc_per_node: graph ? undefined : f.nproc_per_node,
        tasks: graph ? this._tasks.map(taskDocument) : undefined
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

  /** A field or task changed: a refused save's message no longer holds. */
  private _edited(): void {
    this._saveError = null;
    this._changed.emit();
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
  private _tasks: ITaskDraft[] = [];
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
