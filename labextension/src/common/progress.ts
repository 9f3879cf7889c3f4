/**
 * An attempt's progress as the runs panel and the logs view say it: the
 * server's line (`step 4,210 / 10,000 (42 %), ETA 18:40 (23 min)`) with its
 * MFU, a short form for a narrow sidebar, and a tooltip with its speed and
 * how its MFU was computed (or why it has none).
 */

import { formatClock } from './time';
import type { IProgress } from '../logs/types';

/** An MFU (a fraction of the peak): `41 %`, with a decimal below 10 %. */
export function formatMfu(value: number): string {
  const percent = value * 100;
  return `${percent < 10 ? percent.toFixed(1) : Math.round(percent)} %`;
}

/** The server's line and, when known, `· MFU 41 %`: what the cell says. */
export function progressLine(progress: IProgress): string {
  const mfu = progress.mfu.value;
  return mfu === null
    ? progress.line
    : `${progress.line} · MFU ${formatMfu(mfu)}`;
}

/**
 * Short, for a sidebar: `42 % · ETA 18:40`, or `step 4,210 · 3.2 steps/s`
 * when its length is unknown.
 */
export function progressShort(progress: IProgress): string {
  const fraction = progress.fraction;
  if (fraction === null) {
    const parts = [`step ${progress.step.toLocaleString('en-US')}`];
    if (progress.step_time_s) {
      parts.push(`${formatRate(1 / progress.step_time_s)} steps/s`);
    }
    return parts.join(' · ');
  }
  const parts = [`${Math.floor(fraction * 100)} %`];
  if (progress.eta_s !== null) {
    const end = (progress.updated + progress.eta_s) * 1000;
    parts.push(`ETA ${formatClock(end, 'minutes')}`);
  }
  return parts.join(' · ');
}

/** The tooltip: the line, the speed, and the MFU or why it has none. */
export function progressTitle(progress: IProgress): string {
  const lines = [progress.line];
  const speed: string[] = [];
  if (progress.step_time_s) {
    speed.push(`${formatRate(progress.step_time_s)} s/step`);
  }
  if (progress.samples_per_s !== null) {
    speed.push(
      `${Math.round(progress.samples_per_s).toLocaleString('en-US')} samples/s`
    );
  }
  if (progress.tokens_per_s !== null) {
    speed.push(
      `${Math.round(progress.tokens_per_s).toLocaleString('en-US')} tokens/s`
    );
  }
  if (speed.length) {
    lines.push(speed.join(', '));
  }
  const { value, why } = progress.mfu;
  lines.push(
    value === null ? `MFU: none: ${why}` : `MFU ${formatMfu(value)} (${why})`
  );
  return lines.join('\n');
}

/** 3 significant digits: `3.2`, `0.215`, `12.5`, `140`. */
function formatRate(value: number): string {
  return String(Number(value.toPrecision(3)));
}
