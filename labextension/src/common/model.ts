/**
 * The base of every view's model: it owns the polling, the user-activity
 * pause and the request state, and tells its views through `stateChanged`.
 */

import type { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { APIError } from './api';
import { ActivityMonitor } from './activity';

/** Why polling is paused: nobody used the page for a while, or the tab is hidden. */
export type PauseReason = 'idle' | 'hidden';

/** What started a request: the poll's tick, or the user (refresh button). */
export type FetchKind = 'poll' | 'refresh';

/** The text shown for a failed request. */
export function describeError(error: unknown): string {
  // A 404 of jupyter_air itself names what is missing (a node, a job).
  if (
    error instanceof APIError &&
    error.status === 404 &&
    error.code !== 'not_found'
  ) {
    return 'the jupyter_air server extension is not enabled (404)';
  }
  return error instanceof Error ? error.message : String(error);
}

/** Poll every `seconds`, backing off on errors up to six times as long (1 min at least). */
export function pollFrequency(seconds: number): IPoll.Frequency {
  const interval = seconds * 1000;
  return { interval, backoff: true, max: Math.max(interval * 6, 60 * 1000) };
}

/**
 * A model that polls the server while one of its views is shown.
 *
 * Subclasses implement `fetch` (one request and the merge of its answer) and
 * may narrow `standby`; views set `active` when shown or hidden, call
 * `refresh`/`resume` from their buttons, and re-render on `stateChanged`.
 * Requests run one at a time, so a refresh never races a poll tick.
 */
export abstract class PollingModel implements IDisposable {
  constructor(options: PollingModel.IOptions) {
    if (options.idleTimeout !== undefined) {
      this._activity = new ActivityMonitor({
        timeout: options.idleTimeout,
        document: options.document
      });
      this._activity.idle.connect(this._onIdle, this);
      this._activity.visibilityChanged.connect(this._onVisibility, this);
    }
    this._poll = new Poll({
      auto: true,
      factory: () => this._run('poll'),
      frequency: options.frequency,
      name: options.name,
      standby: () => this.standby()
    });
  }

  /** Emitted after any change of the state views show. */
  get stateChanged(): ISignal<this, void> {
    return this._stateChanged;
  }

  /** Whether a view of the model is shown (polling stands by otherwise). */
  get active(): boolean {
    return this._active;
  }
  set active(active: boolean) {
    if (active === this._active) {
      return;
    }
    this._active = active;
    if (active) {
      // Showing a view again resumes a pause; either way, fetch now.
      if (this._paused !== null) {
        this.resume();
      } else {
        this.poll();
      }
    }
    this.emitChanged();
  }

  /** Why polling is paused, or null when it is not. */
  get paused(): PauseReason | null {
    return this._paused;
  }

  /** The last request's error text, or null after a success. */
  get error(): string | null {
    return this._error;
  }

  /** When the last request succeeded (Unix ms), or null before the first. */
  get updatedAt(): number | null {
    return this._updatedAt;
  }

  /** Whether a request is on its way. */
  get busy(): boolean {
    return this._busy;
  }

  /** Seconds without activity before the poll pauses (null: never). */
  get idleTimeout(): number | null {
    return this._activity?.timeout ?? null;
  }
  set idleTimeout(seconds: number | null) {
    if (this._activity && seconds !== null) {
      this._activity.timeout = seconds;
      this.emitChanged();
    }
  }

  /** Set the poll frequency; a shown, running model applies it now. */
  set frequency(frequency: Partial<IPoll.Frequency>) {
    this._poll.frequency = { ...this._poll.frequency, ...frequency };
    if (this._active && this._paused === null) {
      this.poll();
    }
  }

  /** Ask now, outside the poll's schedule (resumes a pause first). */
  refresh(): Promise<void> {
    if (this._paused !== null) {
      this._resume(false);
    }
    return this._run('refresh');
  }

  /** Resume polling after a pause, with a request now. */
  resume(): void {
    this._resume(true);
  }

  /** Let the poll tick now (keeps its schedule and backoff). */
  poll(): void {
    void this._poll.refresh();
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    this._activity?.dispose();
    Signal.clearData(this);
  }

  /** One request and the merge of its answer; throw to report an error. */
  protected abstract fetch(kind: FetchKind): Promise<void>;

  /** Whether the poll stands by (override to add conditions, e.g. a job ended). */
  protected standby(): boolean {
    return (
      !this._active ||
      this._paused !== null ||
      (this._activity?.hidden ?? false)
    );
  }

  /** Run `fn` after the requests before it (see `fetch`). */
  protected serialize<T>(fn: () => Promise<T>): Promise<T> {
    const next = this._queue.then(fn, fn);
    this._queue = next.catch(() => undefined);
    return next;
  }

  protected emitChanged(): void {
    if (!this._isDisposed) {
      this._stateChanged.emit();
    }
  }

  /** Forget the error (e.g. the model now shows something else). */
  protected clearError(): void {
    this._error = null;
  }

  /** Record an error of a request made outside `fetch` (e.g. a reload). */
  protected setError(text: string): void {
    this._error = text;
  }

  private _run(kind: FetchKind): Promise<void> {
    return this.serialize(async () => {
      this._busy = true;
      this.emitChanged();
      try {
        await this.fetch(kind);
        this._error = null;
        this._updatedAt = Date.now();
      } catch (error) {
        this._error = describeError(error);
        throw error; // the poll backs off
      } finally {
        this._busy = false;
        this.emitChanged();
      }
    });
  }

  private _onIdle(): void {
    if (this._paused !== 'idle') {
      this._pause('idle');
    }
  }

  private _onVisibility(_: ActivityMonitor, hidden: boolean): void {
    if (hidden) {
      if (this._paused === null) {
        this._pause('hidden');
      }
    } else if (this._paused === 'hidden') {
      if (this._activity?.isIdle) {
        this._pause('idle');
      } else {
        this._resume(true);
      }
    }
  }

  private _pause(reason: PauseReason): void {
    this._paused = reason;
    this.emitChanged();
  }

  private _resume(fetch: boolean): void {
    this._paused = null;
    this._activity?.touch();
    this.emitChanged();
    if (fetch) {
      this.poll();
    }
  }

  private _poll: Poll;
  private _activity: ActivityMonitor | null = null;
  private _active = false;
  private _paused: PauseReason | null = null;
  private _error: string | null = null;
  private _updatedAt: number | null = null;
  private _busy = false;
  private _queue: Promise<unknown> = Promise.resolve();
  private _isDisposed = false;
  private _stateChanged = new Signal<this, void>(this);
}

export namespace PollingModel {
  export interface IOptions {
    /** The poll's name (shown in Lumino's debugging). */
    name: string;
    frequency: Partial<IPoll.Frequency>;
    /** Seconds without user activity before polling pauses; omit to never pause. */
    idleTimeout?: number;
    /** The document whose activity counts (tests pass their own). */
    document?: Document;
  }
}
