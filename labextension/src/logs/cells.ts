/**
 * The ended cells of a session, as `jupyter-air/jobs/<id>/cells` lists them:
 * the cell picker's choices, and the cell of a line that arrived before its
 * cell ended (the server says a line's cell once the cell's span is known).
 */

import { formatClock } from '../common/time';
import type { ILogLine, ISessionCell } from './types';

/** "Cell 3 · FAILED · 08:30:12": number, outcome and start (local time). */
export function cellLabel(cell: ISessionCell): string {
  return `Cell ${cell.cell} · ${cell.status} · ${formatClock(cell.started * 1000)}`;
}

export class SessionCells {
  /** The ended cells, in order. */
  get list(): readonly ISessionCell[] {
    return this._cells;
  }

  /** Whether cell `number` has ended (so the server can filter its lines). */
  has(number: number): boolean {
    return this._cells.some(c => c.cell === number);
  }

  /** Take the server's list; answers whether it holds cells not known before. */
  set(cells: readonly ISessionCell[]): boolean {
    const known = new Set(this._cells.map(c => c.cell));
    this._cells = [...cells].sort((a, b) => a.started - b.started);
    return this._cells.some(c => !known.has(c.cell));
  }

  /**
   * Give each line that has no cell yet the cell whose span holds its time
   * (the server's rule); answers how many lines got one.
   */
  assign(lines: readonly ILogLine[]): number {
    let assigned = 0;
    for (const line of lines) {
      if (line.cell !== null) {
        continue; // has one, or is not a session's line (undefined)
      }
      const cell = this._holding(line.t);
      if (cell) {
        line.cell = cell.cell;
        line.cell_id = cell.cell_id;
        assigned++;
      }
    }
    return assigned;
  }

  /** The last cell started at or before `t`, if `t` is within its span. */
  private _holding(t: number): ISessionCell | null {
    const cells = this._cells;
    let low = 0;
    let high = cells.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (cells[mid].started <= t) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    const cell = low > 0 ? cells[low - 1] : null;
    return cell && t <= cell.ended ? cell : null;
  }

  private _cells: ISessionCell[] = [];
}
