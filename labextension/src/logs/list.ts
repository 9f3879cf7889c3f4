/**
 * A windowed list of log lines: rows of one fixed height, only those in view
 * (and a few around) are in the DOM, whatever the number of lines held.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { el } from '../dom';
import { LineBuffer } from './buffer';
import {
  formatIso,
  formatOrigin,
  formatTime,
  LEVEL_LABELS,
  setHighlighted
} from './format';
import type { ILogLine } from './types';

/** Height of one row in pixels; `.jp-air-JobLogs-line` has the same in CSS. */
export const ROW_HEIGHT = 20;

/** Rows rendered above and below the ones in view. */
const OVERSCAN = 20;

/**
 * Fixed columns of a row before the text, in characters (time, stream mark,
 * level badge, a session's cell badge) and pixels (paddings), for the width
 * estimate of the rows.
 */
const PREFIX_COLUMNS = 12 + 3 + 5 + 4 + 5;
const PREFIX_PIXELS = 56;

/** A session line's cell: "c3", or "·" between cells (or in a running cell). */
function cellBadge(cell: number | null, cellId: string | null): HTMLElement {
  const badge = el(
    'span',
    'jp-air-JobLogs-cellBadge',
    cell === null ? '·' : `c${cell}`
  );
  badge.title =
    cell === null
      ? 'Not in an ended cell: printed between cells, or in a cell still running'
      : `Session cell ${cell}` + (cellId ? ` (notebook cell ${cellId})` : '');
  return badge;
}

export class LogList {
  constructor(buffer: LineBuffer) {
    this._buffer = buffer;
    const node = el('div', 'jp-air-JobLogs-scroller');
    node.tabIndex = 0;
    node.setAttribute('role', 'log');
    node.setAttribute('aria-label', 'Log lines');
    this._canvas = el('div', 'jp-air-JobLogs-canvas');
    node.appendChild(this._canvas);
    node.addEventListener('scroll', this._onScroll, { passive: true });
    this.node = node;
  }

  /** The scrolling element. */
  readonly node: HTMLDivElement;

  /**
   * Emitted after a scroll of the user: `atBottom` when the last row is in
   * view, `up` when the list moved up (towards older lines).
   */
  get scrolled(): ISignal<this, { atBottom: boolean; up: boolean }> {
    return this._scrolled;
  }

  /** What matches of the search are highlighted; rows are rendered again. */
  set highlight(pattern: RegExp | null) {
    this._pattern = pattern;
    this.clearRows();
  }

  /** Whether the last row is in view (or there is nothing to scroll). */
  get atBottom(): boolean {
    const node = this.node;
    return (
      node.scrollTop + node.clientHeight >= node.scrollHeight - ROW_HEIGHT / 2
    );
  }

  /** Forget the rendered rows (the buffer was cleared or rows must change). */
  clearRows(): void {
    this._rows.clear();
    this._canvas.textContent = '';
    this.update();
  }

  /**
   * Size the list for the lines held and render the rows in view; call after
   * every change of the buffer. `dropped` old lines left the buffer: the rows
   * in view stay where they are.
   */
  update(dropped = 0): void {
    const buffer = this._buffer;
    const canvas = this._canvas;
    const height = buffer.size * ROW_HEIGHT;
    if (this._height !== height) {
      if (height > this._height && this._grownFrom < 0) {
        // A scroll to the end, not yet dispatched, meant this frame's old end.
        this._grownFrom = this.node.scrollHeight;
        this._atNextFrame();
      }
      this._height = height;
      canvas.style.height = `${height}px`;
    }
    const columns = PREFIX_COLUMNS + buffer.maxOrigin + buffer.maxColumns;
    if (this._columns !== columns) {
      this._columns = columns;
      canvas.style.width = `calc(${columns}ch + ${PREFIX_PIXELS}px)`;
      canvas.style.setProperty(
        '--jp-air-JobLogs-origin-width',
        `${Math.max(buffer.maxOrigin, 5)}ch`
      );
    }
    if (dropped > 0) {
      const top = Math.max(0, this.node.scrollTop - dropped * ROW_HEIGHT);
      if (top !== this.node.scrollTop) {
        // Ignore the scroll event this adjustment causes, if any: one that
        // ends elsewhere was the user's too, in the same frame.
        this.node.scrollTop = top;
        this._adjustedTop = this.node.scrollTop;
        this._atNextFrame();
      }
    }
    this.render();
  }

  /** Show the last line. */
  scrollToBottom(): void {
    const node = this.node;
    const bottom = Math.max(0, node.scrollHeight - node.clientHeight);
    if (node.scrollTop !== bottom) {
      node.scrollTop = bottom;
    }
    this.render();
  }

  /** Render the rows in view now. */
  render(): void {
    if (this._frame) {
      cancelAnimationFrame(this._frame);
      this._frame = 0;
    }
    const buffer = this._buffer;
    const node = this.node;
    const view = node.clientHeight || ROW_HEIGHT * 40;
    const start = Math.max(
      0,
      Math.floor(node.scrollTop / ROW_HEIGHT) - OVERSCAN
    );
    const end = Math.min(
      buffer.size,
      Math.ceil((node.scrollTop + view) / ROW_HEIGHT) + OVERSCAN
    );
    const first = buffer.first;
    for (const [seq, row] of this._rows) {
      const index = seq - first;
      if (index < start || index >= end) {
        row.remove();
        this._rows.delete(seq);
      }
    }
    for (let index = start; index < end; index++) {
      const seq = first + index;
      let row = this._rows.get(seq);
      if (!row) {
        row = this._createRow(buffer.at(index));
        this._rows.set(seq, row);
        this._canvas.appendChild(row);
      }
      const top = `${index * ROW_HEIGHT}px`;
      if (row.style.top !== top) {
        row.style.top = top;
      }
    }
  }

  /** The rendered rows (for tests and debugging). */
  get renderedRows(): number {
    return this._rows.size;
  }

  dispose(): void {
    if (this._frame) {
      cancelAnimationFrame(this._frame);
    }
    if (this._frameEnd) {
      cancelAnimationFrame(this._frameEnd);
    }
    this.node.removeEventListener('scroll', this._onScroll);
    Signal.clearData(this);
  }

  private _createRow(line: ILogLine): HTMLDivElement {
    const row = el('div', 'jp-air-JobLogs-line');
    row.dataset.node = String(line.node);
    row.dataset.rank = String(line.rank);
    row.dataset.level = line.level;
    row.dataset.stream = line.stream;

    const time = el('span', 'jp-air-JobLogs-time', formatTime(line.t));
    time.title = formatIso(line.t);
    const origin = el('span', 'jp-air-JobLogs-origin', formatOrigin(line));
    origin.title = `node ${line.node}, rank ${line.rank}`;
    const cell =
      line.cell === undefined
        ? []
        : [cellBadge(line.cell, line.cell_id ?? null)];
    if (line.cell !== undefined) {
      row.dataset.cell = line.cell === null ? '' : String(line.cell);
    }
    const stream = el(
      'span',
      'jp-air-JobLogs-stream',
      line.stream === 'err' ? 'err' : ''
    );
    if (line.stream === 'err') {
      stream.title = 'printed on stderr';
    }
    const level = el(
      'span',
      'jp-air-JobLogs-levelBadge',
      LEVEL_LABELS[line.level] ?? line.level
    );
    const text = el('span', 'jp-air-JobLogs-text');
    setHighlighted(text, line.text, this._pattern);
    row.append(time, ...cell, origin, stream, level, text);
    return row;
  }

  private _onScroll = (): void => {
    const node = this.node;
    const top = node.scrollTop;
    const up = top < this._lastTop;
    this._lastTop = top;
    if (!this._frame) {
      this._frame = requestAnimationFrame(() => {
        this._frame = 0;
        this.render();
      });
    }
    if (top === this._adjustedTop) {
      // Our own adjustment after dropping old lines.
      this._adjustedTop = null;
      return;
    }
    // Scroll events are dispatched once a frame, after its tasks: lines that
    // arrived between the user's scroll to the end and this event moved the
    // end, and the user still meant it.
    const atOldEnd =
      !up &&
      this._grownFrom >= 0 &&
      top + node.clientHeight >= this._grownFrom - ROW_HEIGHT / 2;
    this._scrolled.emit({ atBottom: this.atBottom || atOldEnd, up });
  };

  /** Forget, at the next animation frame (after this frame's scroll events),
   * the adjustment and the old end this frame's scroll event is judged by. */
  private _atNextFrame(): void {
    if (this._frameEnd) {
      return;
    }
    this._frameEnd = requestAnimationFrame(() => {
      this._frameEnd = 0;
      this._adjustedTop = null;
      this._grownFrom = -1;
    });
  }

  private _buffer: LineBuffer;
  private _canvas: HTMLDivElement;
  private _rows = new Map<number, HTMLDivElement>();
  private _pattern: RegExp | null = null;
  private _height = -1;
  private _columns = -1;
  private _lastTop = 0;
  private _frame = 0;
  private _frameEnd = 0;
  private _adjustedTop: number | null = null;
  private _grownFrom = -1;
  private _scrolled = new Signal<this, { atBottom: boolean; up: boolean }>(
    this
  );
}
