/**
 * The filters of the view and the query they make.
 */

import type { Query } from '../common/api';

/** Minimum levels offered (the API's `level` means "at least"). */
export const LEVELS = {
  '': 'All levels',
  warning: 'Warnings and errors',
  error: 'Errors'
} as const;

export type LevelKey = keyof typeof LEVELS;

/** Time ranges offered, in seconds before the end of the job (or now). */
export const RANGES = {
  all: { label: 'All time', seconds: null },
  '5m': { label: 'Last 5 minutes', seconds: 5 * 60 },
  '15m': { label: 'Last 15 minutes', seconds: 15 * 60 },
  '1h': { label: 'Last hour', seconds: 60 * 60 }
} as const;

export type RangeKey = keyof typeof RANGES;

export function isLevelKey(value: unknown): value is LevelKey {
  return (
    typeof value === 'string' &&
    Object.prototype.hasOwnProperty.call(LEVELS, value)
  );
}

export function isRangeKey(value: unknown): value is RangeKey {
  return (
    typeof value === 'string' &&
    Object.prototype.hasOwnProperty.call(RANGES, value)
  );
}

/** What the view shows. */
export interface ILogFilters {
  /** The attempt; null until the job is known (the server's latest). */
  attempt: number | null;
  node: number | null;
  rank: number | null;
  /** A session's cell (its number), or null for the whole session. */
  cell: number | null;
  level: LevelKey;
  range: RangeKey;
  /** Case-insensitive substring; empty for none. */
  search: string;
}

export const NO_FILTERS: ILogFilters = {
  attempt: null,
  node: null,
  rank: null,
  cell: null,
  level: '',
  range: 'all',
  search: ''
};

/**
 * The query parameters of `filters`; `end` (Unix seconds) is when the time
 * range ends: the end of the job, or now while it runs.
 */
export function filterQuery(filters: ILogFilters, end: number): Query {
  const seconds = RANGES[filters.range].seconds;
  return {
    attempt: filters.attempt,
    node: filters.node,
    rank: filters.rank,
    cell: filters.cell,
    level: filters.level || null,
    since: seconds === null ? null : Math.max(0, Math.floor(end - seconds)),
    search: filters.search || null
  };
}

/** Job ids as the server gives them (a looser form of docs/api.md's). */
export const JOB_ID = /^[A-Za-z0-9][A-Za-z0-9-]{2,63}$/;

/** Whether a filter other than the attempt narrows the lines. */
export function narrows(filters: ILogFilters): boolean {
  return (
    filters.node !== null ||
    filters.rank !== null ||
    filters.cell !== null ||
    filters.level !== '' ||
    filters.range !== 'all' ||
    filters.search !== ''
  );
}
