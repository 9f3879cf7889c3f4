/**
 * The texts a logs view shows of its model: the line under the toolbar and
 * the note in place of lines.
 */

import { failureText } from '../common/status';
import { plural } from './format';
import { JobLogsModel, TAIL } from './model';

const NUMBER = new Intl.NumberFormat();

/** The line under the toolbar. */
export interface IInfo {
  /** "1,234 lines" (empty while loading). */
  count: string;
  /** Truncation and expiry notes. */
  note: string;
  message: string;
  /** Whether the message is an error. */
  error: boolean;
}

/** The count, the notes and the message of `model`. */
export function infoOf(model: JobLogsModel): IInfo {
  const notes: string[] = [];
  if (model.job?.logs_expired) {
    notes.push('The logs of this job have expired.');
  }
  const buffer = model.lines;
  if (buffer.dropped > 0) {
    notes.push(
      `Keeping the last ${NUMBER.format(buffer.capacity)} lines ` +
        `(${NUMBER.format(buffer.dropped)} older ones dropped); ` +
        'download for all.'
    );
  } else if (model.truncated) {
    notes.push(
      `Showing the last ${NUMBER.format(TAIL)} lines` +
        (model.done ? '' : ' and those printed since') +
        '; download for all.'
    );
  }
  let message: string;
  let error = false;
  if (model.flash !== null) {
    message = model.flash;
  } else if (model.denied) {
    message = 'No access.';
    error = true;
  } else if (model.error !== null) {
    message = failureText(model.error);
    error = true;
  } else if (model.loading) {
    message = 'Loading…';
  } else if (model.cellWait === 'later') {
    message = `Cell ${model.filters.cell} has not started: its lines show when it ends.`;
  } else if (model.cellWait === 'next') {
    message =
      `Cell ${model.filters.cell} has not ended: following the lines ` +
      'since the cell before it.';
  } else if (model.done && model.filters.cell !== null) {
    message = `All lines of cell ${model.filters.cell} loaded: it has ended.`;
  } else if (model.done) {
    message = 'All lines loaded: the job has ended.';
  } else if (!model.following) {
    message = model.newLines
      ? `Paused: ${plural(model.newLines, 'new line')} below.`
      : 'Paused.';
  } else {
    message = 'Following new lines…';
  }
  return {
    count: model.loading ? '' : plural(buffer.size, 'line'),
    note: notes.join(' '),
    message,
    error
  };
}

/** What the list shows without lines ('' when it has lines or a denial). */
export function emptyTextOf(model: JobLogsModel): string {
  if (model.lines.size > 0 || model.denied) {
    return '';
  }
  if (model.loading) {
    return 'Loading…';
  }
  if (model.cellWait === 'later') {
    return `Cell ${model.filters.cell} has not started yet.`;
  }
  if (model.failed) {
    return `Could not load the logs: ${model.error}`;
  }
  if (model.filtered) {
    return 'No line matches the filters.';
  }
  return model.done ? 'This attempt printed nothing.' : 'No line yet.';
}
