/**
 * Text of the runs table's cells.
 */

import { formatDateTime } from '../common/time';

/** A run's start (`2026-11-30 19:00:01`, see common/time), from MLflow's ms. */
export function formatStart(ms: number | null): string {
  return ms === null ? '' : formatDateTime(ms);
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
