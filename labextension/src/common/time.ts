/**
 * Every time the front end shows, in one rule: the browser's local time zone,
 * written 24-hour, date first (`2026-11-30 19:00:20`), whatever the locale.
 *
 * Why not the browser locale's own format: the same times are also drawn by
 * plotly in the notebook's cells (the live view, `%air_gpu`), printed by
 * `air logs` and shown by MLflow, all 24-hour; a locale's 12-hour form
 * ("07:00:20 PM") would make the panel disagree with the chart beside it.
 * Fixed-width 24-hour times also keep table columns and axis ticks aligned
 * and sort as text.
 */

function pad(value: number, width = 2): string {
  return String(value).padStart(width, '0');
}

/** How much of the time of day to write. */
export type ClockPrecision = 'minutes' | 'seconds' | 'milliseconds';

/**
 * The 24-hour time of day of `ms` (Unix milliseconds) in local time:
 * `19:00` / `19:00:20` / `19:00:20.250`.
 *
 * `utc`: read `ms` in UTC instead, for numbers that already encode local
 * wall-clock time (the GPU charts' x values, see `toLocalMs`).
 */
export function formatClock(
  ms: number,
  precision: ClockPrecision = 'seconds',
  utc = false
): string {
  const d = new Date(Math.round(ms));
  const hours = utc ? d.getUTCHours() : d.getHours();
  const minutes = utc ? d.getUTCMinutes() : d.getMinutes();
  let text = `${pad(hours)}:${pad(minutes)}`;
  if (precision === 'minutes') {
    return text;
  }
  text += `:${pad(utc ? d.getUTCSeconds() : d.getSeconds())}`;
  if (precision === 'milliseconds') {
    text += `.${pad(utc ? d.getUTCMilliseconds() : d.getMilliseconds(), 3)}`;
  }
  return text;
}

/** `2026-11-30 19:00:20`, local time, of Unix milliseconds. */
export function formatDateTime(ms: number): string {
  const d = new Date(ms);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    formatClock(ms)
  );
}

/** A duration in words: "30 seconds", "1 minute", "1.5 minutes". */
export function formatDuration(seconds: number): string {
  if (seconds < 60) {
    const s = Math.round(seconds);
    return `${s} second${s === 1 ? '' : 's'}`;
  }
  const minutes = Math.round((seconds / 60) * 10) / 10;
  return `${minutes} minute${minutes === 1 ? '' : 's'}`;
}

/** A unit of elapsed time on an axis. */
export interface IElapsedUnit {
  /** The axis title's unit: "s", "min" or "h". */
  label: string;
  /** Milliseconds per unit. */
  ms: number;
}

const SECOND: IElapsedUnit = { label: 's', ms: 1000 };
const MINUTE: IElapsedUnit = { label: 'min', ms: 60_000 };
const HOUR: IElapsedUnit = { label: 'h', ms: 3_600_000 };

/**
 * The unit that writes elapsed times up to `spanMs` in small numbers:
 * seconds up to 2 minutes, minutes up to 2 hours, hours beyond.
 */
export function elapsedUnit(spanMs: number): IElapsedUnit {
  if (spanMs <= 2 * MINUTE.ms) {
    return SECOND;
  }
  return spanMs <= 2 * HOUR.ms ? MINUTE : HOUR;
}
