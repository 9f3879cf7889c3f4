/**
 * What the status line of a polling view says: one rule for every panel.
 */

import type { PollingModel } from './model';
import { formatClock, formatDuration } from './time';

/** Which state the status line reports, in the rule's order. */
export enum StatusKind {
  Error = 'error',
  Paused = 'paused',
  Ready = 'ready'
}

/** A line of text and its tooltip. */
export interface IStatusText {
  text: string;
  title: string;
}

export interface IStatus extends IStatusText {
  kind: StatusKind;
}

/** The words of a failed request. */
export function failureText(error: string): string {
  return `Update failed: ${error}`;
}

/**
 * The status line of `model`:
 *
 * 1. the last request's error, first: what is shown is stale for a reason
 *    the user may have to fix (a server extension not enabled, a refused
 *    permission), and a Resume would only meet it again;
 * 2. then a pause: the user's own doing (idle, tab hidden), which the pause
 *    notice under the line also says, with its Resume button;
 * 3. else the view's own text (`own`: what it shows, how fresh).
 *
 * `notice`, a passing message of the view, leads the paused and ready lines.
 */
export function statusOf(
  model: PollingModel,
  own: () => IStatusText,
  notice: string | null = null
): IStatus {
  if (model.error !== null) {
    const text = failureText(model.error);
    return { kind: StatusKind.Error, text, title: text };
  }
  let status: IStatus;
  if (model.paused !== null) {
    const updated = model.updatedAt;
    status = {
      kind: StatusKind.Paused,
      text: 'Paused',
      title: updated === null ? '' : `Last update ${formatClock(updated)}`
    };
  } else {
    status = { kind: StatusKind.Ready, ...own() };
  }
  if (notice) {
    status.text = `${notice} · ${status.text}`;
    status.title = status.title ? `${notice}\n${status.title}` : notice;
  }
  return status;
}

/** Why `model` is paused, in words, or '' when it is not. */
export function pausedText(model: PollingModel): string {
  switch (model.paused) {
    case 'idle':
      return (
        `Paused after ${formatDuration(model.idleTimeout ?? 0)} ` +
        'without activity. Reopen the panel or click Resume to continue.'
      );
    case 'hidden':
      return 'Paused while this browser tab is hidden.';
    default:
      return '';
  }
}
