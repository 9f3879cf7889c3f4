/**
 * User activity in the JupyterLab window, to pause polling when nobody looks.
 */

import type { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

/** The events that count as user activity. */
const ACTIVITY_EVENTS = [
  'pointerdown',
  'pointermove',
  'keydown',
  'wheel',
  'touchstart'
] as const;

/**
 * Tracks the time of the last user activity (pointer, key and wheel events on
 * the document) and the visibility of the browser tab.
 *
 * `idle` is emitted once when `timeout` seconds pass without activity; a new
 * activity starts a new idle window. `visibilityChanged` is emitted with the
 * new `document.hidden` value.
 */
export class ActivityMonitor implements IDisposable {
  constructor(options: ActivityMonitor.IOptions) {
    this._document = options.document ?? document;
    this._timeout = Math.max(0, options.timeout);
    for (const type of ACTIVITY_EVENTS) {
      this._document.addEventListener(type, this._onActivity, {
        capture: true,
        passive: true
      });
    }
    this._document.addEventListener(
      'visibilitychange',
      this._onVisibilityChange
    );
    this._schedule();
  }

  /** Emitted when the idle limit is reached. */
  get idle(): ISignal<this, void> {
    return this._idle;
  }

  /** Emitted with `document.hidden` when the tab visibility changes. */
  get visibilityChanged(): ISignal<this, boolean> {
    return this._visibilityChanged;
  }

  /** Seconds without activity after which `idle` is emitted. */
  get timeout(): number {
    return this._timeout;
  }
  set timeout(seconds: number) {
    this._timeout = Math.max(0, seconds);
    this._idleEmitted = false;
    this._schedule();
  }

  /** Seconds since the last activity. */
  get idleFor(): number {
    return (Date.now() - this._last) / 1000;
  }

  /** Whether the idle limit is reached. */
  get isIdle(): boolean {
    return this.idleFor >= this._timeout;
  }

  /** Whether the browser tab is hidden. */
  get hidden(): boolean {
    return this._document.hidden;
  }

  /** Count an activity now (e.g. the user asked to resume). */
  touch(): void {
    this._last = Date.now();
    if (this._idleEmitted || this._timer === null) {
      this._idleEmitted = false;
      this._schedule();
    }
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    for (const type of ACTIVITY_EVENTS) {
      this._document.removeEventListener(type, this._onActivity, {
        capture: true
      });
    }
    this._document.removeEventListener(
      'visibilitychange',
      this._onVisibilityChange
    );
    this._clear();
    Signal.clearData(this);
  }

  private _onActivity = (): void => {
    // Cheap on purpose (pointermove): the timer re-checks when it fires.
    this._last = Date.now();
    if (this._idleEmitted) {
      this._idleEmitted = false;
      this._schedule();
    }
  };

  private _onVisibilityChange = (): void => {
    this._visibilityChanged.emit(this._document.hidden);
  };

  private _schedule(): void {
    this._clear();
    if (this._isDisposed) {
      return;
    }
    const remaining = this._timeout - this.idleFor;
    this._timer = window.setTimeout(
      this._check,
      Math.max(0, remaining * 1000) + 50
    );
  }

  private _check = (): void => {
    this._timer = null;
    if (this._isDisposed || this._idleEmitted) {
      return;
    }
    if (this.isIdle) {
      this._idleEmitted = true;
      this._idle.emit();
    } else {
      this._schedule();
    }
  };

  private _clear(): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  private _document: Document;
  private _timeout: number;
  private _last = Date.now();
  private _timer: number | null = null;
  private _idleEmitted = false;
  private _isDisposed = false;
  private _idle = new Signal<this, void>(this);
  private _visibilityChanged = new Signal<this, boolean>(this);
}

export namespace ActivityMonitor {
  export interface IOptions {
    /** Seconds without activity after which `idle` is emitted. */
    timeout: number;
    /** The document to watch (default: the page's). */
    document?: Document;
  }
}
