/**
 * Text of the runs panel: the store picker's entries and the table's cells.
 */

import { formatClock, formatDateTime } from '../common/time';
import type { ITrackingStore } from './types';

/**
 * A store as the picker names it, short enough for a sidebar: the server's
 * own is "Default store"; a file store by its folder and file
 * (`project/mlflow.db`), a server by its host; the whole URI is the tooltip.
 */
export function storeLabel(store: ITrackingStore): string {
  if (store.current) {
    return 'Default store';
  }
  const uri = store.tracking_uri;
  const scheme = uri.split(':', 1)[0];
  if (scheme === 'http' || scheme === 'https') {
    try {
      return new URL(uri).host;
    } catch {
      return uri;
    }
  }
  const parts = uri
    .replace(/^[a-z+]+:\/+/, '')
    .split('/')
    .filter(Boolean);
  return parts.slice(-2).join('/') || uri;
}

/**
 * A run's start in the runs table, from MLflow's ms, as short as a narrow
 * sidebar needs: the time today (`19:00:01`), the day and minute this year
 * (`11-30 19:00`), the date before (`2025-11-30`); the whole of it
 * (`formatDateTime`) is the cell's tooltip. Local time, 24-hour (common/time).
 */
export function formatStart(ms: number | null, now = Date.now()): string {
  if (ms === null) {
    return '';
  }
  const [date, clock] = formatDateTime(ms).split(' ');
  const [today] = formatDateTime(now).split(' ');
  if (date === today) {
    return clock;
  }
  return date.slice(0, 4) === today.slice(0, 4)
    ? `${date.slice(5)} ${formatClock(ms, 'minutes')}`
    : date;
}

/** A duration as MLflow's UI words it: `850ms`, `12.3s`, `4.5min`, `2.0h`. */
export function formatRunDuration(ms: number | null): string {
  if (ms === null) {
    return '';
  }
  if (ms < 1000) {
    return `${Math.round(ms)}ms`;
  }
  if (ms < 60_000) {
    return `${(ms / 1000).toFixed(1)}s`;
  }
  if (ms < 3_600_000) {
    return `${(ms / 60_000).toFixed(1)}min`;
  }
  return `${(ms / 3_600_000).toFixed(1)}h`;
}

/** A metric's latest value in 4 significant digits; a diverged one (null) as `NaN`. */
export function formatMetric(value: number | null | undefined): string {
  if (value === undefined) {
    return '';
  }
  return value === null ? 'NaN' : String(Number(value.toPrecision(4)));
}
