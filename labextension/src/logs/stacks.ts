/**
 * How the ranks' stacks read: each set's heading, each rank's heading, and
 * py-spy's dump without its terminal colours.
 */

import { formatClock, formatDateTime } from '../common/time';
import { stripAnsi } from './ansi';
import type { IRankStacks, IStackSet } from './types';

/** "Attempt 2, 08:30:13: asked for" */
export function stackSetTitle(set: IStackSet): string {
  return `Attempt ${set.attempt}, ${formatClock(set.time * 1000)}: ${set.reason}`;
}

/** "node 0 rank 1 (pid 4242)" */
export function rankStacksTitle(rank: IRankStacks): string {
  return `node ${rank.node} rank ${rank.rank} (pid ${rank.pid})`;
}

/** The rank's dump as py-spy printed it (colours and all), or why there is none. */
export function rankStacksText(rank: IRankStacks): string {
  return rank.text ?? `not read: ${rank.error ?? 'no answer'}`;
}

/**
 * What the ranks' flight recorders say of where they wait: the one line
 * (which collective, who never came or disagrees), then a line a rank.
 */
export function hangLines(set: IStackSet): string[] {
  if (!set.hang) {
    return [];
  }
  return [
    `Collectives: ${set.hang.line}`,
    ...set.hang.details.map(d => `    ${d}`)
  ];
}

/**
 * The sets as plain text, as `air stacks` words them: what Copy puts on the
 * clipboard (to paste into an issue, a chat), without a single escape.
 */
export function stacksAsText(sets: readonly IStackSet[]): string {
  const out: string[] = [];
  for (const set of sets) {
    out.push(
      `Stacks of attempt ${set.attempt}, ` +
        `${formatDateTime(set.time * 1000)} (${set.reason})`
    );
    out.push(...hangLines(set));
    for (const rank of set.ranks) {
      out.push(`\n=== ${rankStacksTitle(rank)} ===`);
      out.push(stripAnsi(rankStacksText(rank)).trimEnd());
    }
    out.push('');
  }
  return out.join('\n');
}
