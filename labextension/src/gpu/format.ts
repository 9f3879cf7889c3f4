/**
 * Text shown for the figures of the panel. Every function answers "n/a" for a
 * value that was not reported, never an empty string.
 */

import type { IGpuProcess } from './types';

export const NA = 'n/a';

function isNumber(value: number | null | undefined): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** "35 %" */
export function formatPercent(value: number | null | undefined): string {
  return isNumber(value) ? `${Math.round(value)} %` : NA;
}

/** MiB to GiB with one decimal: "79.6". */
export function gib(mib: number): string {
  return (mib / 1024).toFixed(1);
}

/** "20.0 / 79.6 GiB"; "20.0 GiB / n/a" without a total; "n/a" without a value. */
export function formatMemory(
  usedMib: number | null | undefined,
  totalMib: number | null | undefined
): string {
  if (!isNumber(usedMib)) {
    return NA;
  }
  if (!isNumber(totalMib)) {
    return `${gib(usedMib)} GiB / ${NA}`;
  }
  return `${gib(usedMib)} / ${gib(totalMib)} GiB`;
}

/** "51 °C" */
export function formatTemperature(value: number | null | undefined): string {
  return isNumber(value) ? `${Math.round(value)} °C` : NA;
}

/** "312 / 700 W"; "312 W / n/a" without a limit; "n/a" without a draw. */
export function formatPower(
  drawW: number | null | undefined,
  limitW: number | null | undefined
): string {
  if (!isNumber(drawW)) {
    return NA;
  }
  if (!isNumber(limitW)) {
    return `${Math.round(drawW)} W / ${NA}`;
  }
  return `${Math.round(drawW)} / ${Math.round(limitW)} W`;
}

/** Process memory: "19.5 GiB", "512 MiB", "n/a". */
export function formatProcessMemory(mib: number | null | undefined): string {
  if (!isNumber(mib)) {
    return NA;
  }
  return mib >= 1024 ? `${gib(mib)} GiB` : `${Math.round(mib)} MiB`;
}

/** Who a GPU process belongs to: the notebook, the job (or session), or "—". */
export function formatOwner(process: IGpuProcess): string {
  const owner = process.owner;
  if (!owner) {
    return '—';
  }
  const id = owner.id ?? '';
  if (owner.kind === 'kernel') {
    if (owner.name) {
      return owner.name;
    }
    return id ? `kernel ${id.slice(0, 8)}` : 'kernel';
  }
  if (owner.kind === 'job') {
    const kind = owner.session ? 'session' : 'job';
    return owner.name || (id ? `${kind} ${id}` : kind);
  }
  return owner.name || [owner.kind, id].filter(Boolean).join(' ') || '—';
}
