/**
 * The user's job and schedule notifications (a `jupyterlab` target of
 * `notify`) as this tab receives them: a long poll of
 * `GET jupyter-air/notifications`.
 *
 * A first call answers the newest id (a tab opened now replays nothing
 * older); each later one asks for what came after the last id seen and waits
 * on the server until something does. Nothing here imports JupyterLab, so
 * the model runs under jest as it is.
 */

import type { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import type { Requester } from '../common/api';

/** The route, under `{base_url}jupyter-air/`. */
export const NOTIFICATIONS_ENDPOINT = 'notifications';

/** A notification's severity, as JupyterLab's notifications have it. */
export type NotificationLevel = 'info' | 'success' | 'warning' | 'error';

export interface INotificationLink {
  label: string;
  /** Absolute (an MLflow run's page, the job's logs in this lab). */
  url: string;
}

/** One notification, as the route answers it. */
export interface IAirNotification {
  id: number;
  /** Unix seconds. */
  created: number;
  /** start, success, failure, cancelled, retry, hint, duration, skipped. */
  event: string;
  level: NotificationLevel;
  /** One line: "air job 20261204-... failed: rank 1 exited with code 1". */
  title: string;
  /** Label and value: what ran, how it ended, how long, where. */
  facts: string[][];
  /** The last lines of the failing rank (or a hint's text). */
  lines: string[];
  links: INotificationLink[];
  /** What shows the logs in a terminal: `air logs ID`. */
  command: string | null;
  job_id: string | null;
  schedule_id: string | null;
}

/** The route's answer. */
export interface INotificationsAnswer {
  notifications: IAirNotification[];
  /** The last id seen: the next poll's `after`. */
  last: number;
}

/** The label of a notification's link to its MLflow run. */
export const RUN_LINK_LABEL = 'MLflow run';

/** JupyterLab's toast keeps 140 characters of a message. */
export const TOAST_LENGTH = 140;

/** The toast's text: the title, and the failing rank's last line when there is room. */
export function toastMessage(notification: IAirNotification): string {
  const { title } = notification;
  const line = [...notification.lines]
    .reverse()
    .map(text => text.trim())
    .find(text => text.length > 0);
  const room = TOAST_LENGTH - title.length - 1;
  if (!line || room < 10) {
    return title;
  }
  return `${title}\n${line.length > room ? line.slice(0, room - 1) + '…' : line}`;
}

/** An error or a warning stays until dismissed; the rest close after a while (ms). */
export function autoClose(level: NotificationLevel): number | false {
  return level === 'error' || level === 'warning' ? false : 10000;
}

/** The level as JupyterLab's notification type (an unknown one: info). */
export function toastType(level: string): NotificationLevel {
  return level === 'error' || level === 'warning' || level === 'success'
    ? level
    : 'info';
}

/**
 * The MLflow run's page, when the notification links one: an http(s) URL, or a path of
 * this server (what the route gives: its MLflow UI under the server's base URL). A
 * scheme-relative `//host` or any other scheme (`javascript:`) is refused.
 */
export function runLink(notification: IAirNotification): string | null {
  const link = notification.links.find(l => l.label === RUN_LINK_LABEL);
  if (!link) {
    return null;
  }
  const ok = /^https?:\/\//i.test(link.url) || /^\/(?!\/)/.test(link.url);
  return ok ? link.url : null;
}

/**
 * The long-poll loop of one tab: `start` it once; each new notification is
 * signalled once, oldest first. Failed calls are retried after a backoff
 * (5 s, doubling up to 60 s); `dispose` aborts the call under way and ends
 * the loop.
 */
export class NotificationsModel implements IDisposable {
  constructor(options: NotificationsModel.IOptions) {
    this._request = options.request;
    this._wait = options.wait ?? 25;
    this._retry = options.retry ?? { first: 5000, max: 60000 };
    this._minInterval = options.minInterval ?? 2000;
  }

  /** Emitted once for each new notification, oldest first. */
  get received(): ISignal<this, IAirNotification> {
    return this._received;
  }

  /** The last id seen (null before the first answer). */
  get last(): number | null {
    return this._last;
  }

  /** The last call's error, or null after a success. */
  get error(): unknown {
    return this._error;
  }

  /** Start the loop (again: nothing). */
  start(): void {
    if (this._running || this._isDisposed) {
      return;
    }
    this._running = true;
    void this._loop();
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._abort?.abort();
    this._wake?.();
    Signal.clearData(this);
  }

  private async _loop(): Promise<void> {
    let retry = 0;
    while (!this._isDisposed) {
      const began = Date.now();
      let pause: number;
      try {
        await this._poll();
        retry = 0;
        this._error = null;
        // A server that answers at once (too many of this user's polls
        // waiting, a proxy cutting them) is not asked again at once.
        pause = Math.max(0, this._minInterval - (Date.now() - began));
      } catch (error) {
        if (this._isDisposed) {
          break;
        }
        this._error = error;
        retry = retry
          ? Math.min(retry * 2, this._retry.max)
          : this._retry.first;
        pause = retry;
      }
      await this._sleep(pause);
    }
  }

  /** One call, and its news signalled. */
  private async _poll(): Promise<void> {
    const first = this._last === null;
    const query = first ? {} : { after: this._last, wait: this._wait };
    const abort = new AbortController();
    this._abort = abort;
    let answer: INotificationsAnswer;
    try {
      answer = await this._request<INotificationsAnswer>(
        NOTIFICATIONS_ENDPOINT,
        { method: 'GET', signal: abort.signal },
        query
      );
    } finally {
      this._abort = null;
    }
    if (this._isDisposed) {
      return;
    }
    let last = this._last ?? 0;
    for (const notification of answer.notifications ?? []) {
      if (!first && notification.id > last) {
        last = notification.id;
        this._last = last;
        this._received.emit(notification);
        if (this._isDisposed) {
          return; // a slot disposed of it
        }
      }
    }
    if (typeof answer.last === 'number' && answer.last > last) {
      last = answer.last;
    }
    this._last = last;
  }

  /** Wait `ms`, or less when disposed. */
  private _sleep(ms: number): Promise<void> {
    if (ms <= 0 || this._isDisposed) {
      return Promise.resolve();
    }
    return new Promise(resolve => {
      const timer = setTimeout(() => {
        this._wake = null;
        resolve();
      }, ms);
      this._wake = () => {
        clearTimeout(timer);
        this._wake = null;
        resolve();
      };
    });
  }

  private _request: Requester;
  private _wait: number;
  private _retry: { first: number; max: number };
  private _minInterval: number;
  private _last: number | null = null;
  private _error: unknown = null;
  private _running = false;
  private _abort: AbortController | null = null;
  private _wake: (() => void) | null = null;
  private _isDisposed = false;
  private _received = new Signal<this, IAirNotification>(this);
}

export namespace NotificationsModel {
  export interface IOptions {
    /** Calls the server (tests answer for it). */
    request: Requester;
    /** Seconds a poll waits on the server for news (default 25). */
    wait?: number;
    /** Pause after a failed call, doubling up to `max` (ms; default 5 s → 60 s). */
    retry?: { first: number; max: number };
    /** Least time between the starts of two polls (ms; default 2 s). */
    minInterval?: number;
  }
}
