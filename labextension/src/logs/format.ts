/**
 * How one log line reads: in a row of the view, and as text (copy).
 */

import { formatClock } from '../common/time';
import { ansiSegments, stripAnsi } from './ansi';
import type { IJob, ILogLine, Level } from './types';

/** The badge of each level. */
export const LEVEL_LABELS: Record<Level, string> = {
  info: 'INFO',
  warning: 'WARN',
  error: 'ERROR'
};

/** Unix seconds to whole milliseconds (the server rounds to 1 ms). */
function millis(t: number): number {
  return Math.round(t * 1000);
}

/** "08:30:13.250", local time (24-hour, as every time: see common/time). */
export function formatTime(t: number): string {
  return formatClock(millis(t), 'milliseconds');
}

/** "2026-11-29T08:30:13.250Z" (UTC). */
export function formatIso(t: number): string {
  return new Date(millis(t)).toISOString();
}

/**
 * A line as the download has it, its terminal colours dropped (a copy):
 * `2026-11-29T08:30:13.250Z node 0 rank 1 WARNING text`.
 */
export function lineAsText(line: ILogLine): string {
  return (
    `${formatIso(line.t)} node ${line.node} rank ${line.rank} ` +
    `${line.level.toUpperCase()} ${stripAnsi(line.text)}`
  );
}

/** "n0 r1" */
export function formatOrigin(line: ILogLine): string {
  return `n${line.node} r${line.rank}`;
}

/** A regular expression for every case-insensitive occurrence of `term`. */
export function matcher(term: string): RegExp | null {
  if (!term) {
    return null;
  }
  return new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'gi');
}

/**
 * Fill `node` with `text` as a terminal shows it: its colours (ANSI escapes, as
 * Lightning's and HF's loggers print them) as JupyterLab's ANSI classes, the
 * escapes themselves dropped, each match of `pattern` in the text as shown in a
 * `<mark>`. Text nodes only: the text is never parsed as HTML.
 */
export function setHighlighted(
  node: HTMLElement,
  text: string,
  pattern: RegExp | null
): void {
  node.textContent = '';
  const segments = ansiSegments(text);
  const shown = segments.map(segment => segment.text).join('');
  const marked: Array<[number, number]> = [];
  if (pattern) {
    pattern.lastIndex = 0;
    let match: RegExpExecArray | null;
    while ((match = pattern.exec(shown)) !== null) {
      if (match[0].length === 0) {
        pattern.lastIndex++;
        continue;
      }
      marked.push([match.index, match.index + match[0].length]);
    }
  }
  let at = 0;
  for (const segment of segments) {
    const end = at + segment.text.length;
    let parent = node;
    if (segment.classes.length) {
      parent = node.appendChild(document.createElement('span'));
      parent.className = segment.classes.join(' ');
    }
    // The segment cut at the marks' edges that fall inside it.
    const edges = new Set([at, end]);
    for (const [from, to] of marked) {
      for (const edge of [from, to]) {
        if (edge > at && edge < end) {
          edges.add(edge);
        }
      }
    }
    const cuts = [...edges].sort((a, b) => a - b);
    for (let k = 0; k + 1 < cuts.length; k++) {
      const piece = segment.text.slice(cuts[k] - at, cuts[k + 1] - at);
      const inMark = marked.some(
        ([from, to]) => from <= cuts[k] && cuts[k] < to
      );
      if (inMark) {
        const mark = document.createElement('mark');
        mark.textContent = piece;
        parent.appendChild(mark);
      } else {
        parent.appendChild(document.createTextNode(piece));
      }
    }
    at = end;
  }
}

/**
 * Columns a line of text takes in a monospace font (tabs to the next multiple
 * of 8, wide East Asian characters as two): an estimate for the row width.
 */
export function textColumns(raw: string): number {
  const text = stripAnsi(raw);
  let columns = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 9) {
      columns += 8 - (columns % 8);
    } else if (code >= 0xdc00 && code <= 0xdfff) {
      // The second half of a surrogate pair: counted with the first.
    } else if (code >= 0x1100 && (code <= 0x115f || code >= 0x2e80)) {
      columns += 2;
    } else {
      columns += 1;
    }
  }
  return columns;
}

const NUMBER = new Intl.NumberFormat();

/** "1,234 lines", "1 line". */
export function plural(count: number, word: string): string {
  return `${NUMBER.format(count)} ${word}${count === 1 ? '' : 's'}`;
}

/**
 * "20261129-083012-a1b2c3 · RUNNING · baseline" ("· session ·" for a warm session); a
 * job a cluster's queue holds says the queue's word: "PENDING (Resources), Slurm job 4242".
 */
export function jobLabel(job: IJob): string {
  const kind = job.kind === 'session' ? 'session' : null;
  const status =
    job.status === 'PENDING' && job.message ? job.message : job.status;
  return [job.id, status, kind, job.run_name].filter(Boolean).join(' · ');
}

/** A job id's random end, which tells apart jobs of one second: "a1b2c3". */
export function shortJobId(jobId: string): string {
  return jobId.slice(jobId.lastIndexOf('-') + 1);
}

/**
 * A logs tab's title: "ddp-train · a1b2c3" (the run name and the id's end, so
 * that two tabs are told apart however narrow), "Job logs · a1b2c3" before
 * the job is read or when its runs have no name; the caption has all of it.
 */
export function logsTabTitle(
  jobId: string,
  job: IJob | null
): { label: string; caption: string } {
  const name = job?.run_name;
  return {
    label: `${name || 'Job logs'} · ${shortJobId(jobId)}`,
    caption: name ? `Job logs — ${name} (${jobId})` : `Job logs — ${jobId}`
  };
}
