/**
 * The lines the view holds: appended in pages, capped, oldest dropped first.
 */

import { formatOrigin, textColumns } from './format';
import type { ILogLine } from './types';

/** Keep at most this many lines in the browser by default. */
export const MAX_LINES = 50_000;

export class LineBuffer {
  constructor(readonly capacity = MAX_LINES) {}

  /** The lines held, oldest first. */
  get lines(): readonly ILogLine[] {
    return this._lines;
  }

  get size(): number {
    return this._lines.length;
  }

  /**
   * Sequence number of the first line held: every line appended gets the
   * next number, so a line keeps its number when older ones are dropped.
   */
  get first(): number {
    return this._first;
  }

  /** Lines dropped to stay under the capacity since the last clear. */
  get dropped(): number {
    return this._dropped;
  }

  /** The widest text held so far, in monospace columns. */
  get maxColumns(): number {
    return this._maxColumns;
  }

  /** The widest "n0 r1" badge held so far, in characters. */
  get maxOrigin(): number {
    return this._maxOrigin;
  }

  at(index: number): ILogLine {
    return this._lines[index];
  }

  /** Append lines; answers how many old lines were dropped to make room. */
  append(lines: readonly ILogLine[]): number {
    for (const line of lines) {
      this._lines.push(line);
      const columns = textColumns(line.text);
      if (columns > this._maxColumns) {
        this._maxColumns = columns;
      }
      const origin = formatOrigin(line).length;
      if (origin > this._maxOrigin) {
        this._maxOrigin = origin;
      }
    }
    const excess = this._lines.length - this.capacity;
    if (excess <= 0) {
      return 0;
    }
    this._lines.splice(0, excess);
    this._first += excess;
    this._dropped += excess;
    return excess;
  }

  /** Forget every line (a new query); sequence numbers keep increasing. */
  clear(): void {
    this._first += this._lines.length;
    this._lines = [];
    this._dropped = 0;
    this._maxColumns = 0;
    this._maxOrigin = 0;
  }

  private _lines: ILogLine[] = [];
  private _first = 0;
  private _dropped = 0;
  private _maxColumns = 0;
  private _maxOrigin = 0;
}
