/**
 * What a GPU card says of its hardware (issue 39): a badge per problem (a
 * throttle and since when, ECC errors, retired pages or remapped rows that call
 * for a reset, an XID) and one line of the figures behind them, where the GPU
 * reports them. A figure the GPU does not report is left out, never shown as 0.
 */

import { formatClock } from '../common/time';
import type { IGpuHealth, IGpuProblem } from './types';

/** A badge of a GPU card. */
export interface IHealthBadge {
  kind: string;
  text: string;
  title: string;
  severity: 'warn' | 'error';
}

/** "Thermal slowdown since 14:02 · 31 % of its clock" */
export function problemText(problem: IGpuProblem): string {
  let text = problem.text.charAt(0).toUpperCase() + problem.text.slice(1);
  if (problem.since !== null && problem.kind !== 'xid') {
    text += ` since ${formatClock(problem.since * 1000, 'minutes')}`;
  }
  if (problem.clock_percent !== null) {
    text += ` · ${problem.clock_percent} % of its clock`;
  }
  return text;
}

const TITLES: Record<string, string> = {
  thermal:
    'NVML: the clock is held down to cool the GPU (SW/HW thermal slowdown): check its cooling',
  power:
    'NVML: the clock is held down to stay within the power limit (SW power cap, power brake)',
  hw_slowdown:
    'NVML: a hardware slowdown (overheating, power brake or a faulty power supply)',
  ecc: 'NVML: uncorrected ECC errors since the driver loaded: results may be wrong; a reset is due',
  retired_pages: 'NVML: page retirement (ECC) of this GPU',
  remapped_rows: 'NVML: row remapping (ECC) of this GPU',
  xid: 'NVML: an XID critical error reported by the driver'
};

/**
 * A GPU's health from a new answer, with the figures held before where the
 * answer left them out (they had not changed); none held after a new inventory.
 */
export function mergeHealth(
  held: IGpuHealth | undefined,
  sent: IGpuHealth | undefined
): IGpuHealth | undefined {
  if (!sent || 'unavailable' in sent || !held) {
    return sent;
  }
  return {
    ...sent,
    ecc: held.ecc,
    retired_pages: held.retired_pages,
    remapped_rows: held.remapped_rows,
    xids_unwatched: held.xids_unwatched,
    unavailable: held.unavailable
  };
}

/** The badges of a GPU's problems, errors first. */
export function healthBadges(health: IGpuHealth | undefined): IHealthBadge[] {
  const badges = (health?.problems ?? []).map(problem => ({
    kind: problem.kind,
    text: problemText(problem),
    title: TITLES[problem.kind] ?? 'NVML',
    severity: (problem.severity === 'error' ? 'error' : 'warn') as
      'warn' | 'error'
  }));
  return [
    ...badges.filter(b => b.severity === 'error'),
    ...badges.filter(b => b.severity !== 'error')
  ];
}

/**
 * The figures behind the badges, in one line: "ECC 5 corrected, 2 uncorrected
 * (17, 3 in its life) · 4 rows remapped · XIDs not watched: Not Supported".
 * Empty when the GPU reports none of them.
 */
export function healthLine(health: IGpuHealth | undefined): string {
  if (!health) {
    return '';
  }
  const parts: string[] = [];
  const ecc = health.ecc;
  if (ecc) {
    let text = `ECC ${count(ecc.corrected_volatile)} corrected, ${count(
      ecc.uncorrected_volatile
    )} uncorrected`;
    if (
      ecc.corrected_aggregate !== null ||
      ecc.uncorrected_aggregate !== null
    ) {
      text += ` (${count(ecc.corrected_aggregate)}, ${count(
        ecc.uncorrected_aggregate
      )} in its life)`;
    }
    parts.push(text);
  }
  const pages = health.retired_pages;
  if (pages) {
    parts.push(
      `${pages.single_bit + pages.double_bit} pages retired${
        pages.pending ? ', one pending' : ''
      }`
    );
  }
  const rows = health.remapped_rows;
  if (rows) {
    parts.push(
      `${rows.corrected + rows.uncorrected} rows remapped${
        rows.pending ? ', one pending' : ''
      }${rows.failed ? ', one failed' : ''}`
    );
  }
  if (health.xids_unwatched) {
    parts.push(`XIDs not watched: ${health.xids_unwatched}`);
  }
  return parts.join(' · ');
}

function count(value: number | null): string {
  return value === null ? 'n/a' : String(value);
}
