/**
 * Text of the runs table's cells.
 */

/** A run's start, local time (`2026-11-30 10:00:01`), from MLflow's milliseconds. */
export function formatStart(ms: number | null): string {
  if (ms === null) {
    return '';
  }
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return (
    `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`
  );
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
