import { cellLabel, SessionCells } from '../../src/logs/cells';
import type { ILogLine, ISessionCell } from '../../src/logs/types';

const cell = (n: number, started: number, ended: number): ISessionCell => ({
  cell: n,
  run_id: `run${n}`,
  cell_id: `id${n}`,
  started,
  ended,
  status: n === 2 ? 'FAILED' : 'SUCCEEDED'
});

const line = (t: number, c: number | null | undefined): ILogLine => ({
  t,
  node: 0,
  rank: 0,
  stream: 'out',
  level: 'info',
  text: '',
  ...(c === undefined ? {} : { cell: c, cell_id: null })
});

describe('SessionCells', () => {
  it('gives a line with no cell the cell whose span holds it, as the server does', () => {
    const cells = new SessionCells();
    expect(cells.set([cell(2, 20, 21), cell(1, 10, 11)])).toBe(true);
    const lines = [
      line(9, null), // before the first cell
      line(10, null), // at its start
      line(11, null), // at its end
      line(15, null), // between cells
      line(20.5, null),
      line(30, null), // after the last ended cell: still running
      line(10.5, 7), // the server already said
      line(10.5, undefined) // not a session's line
    ];
    expect(cells.assign(lines)).toBe(3);
    expect(lines.map(l => l.cell)).toEqual([
      null,
      1,
      1,
      null,
      2,
      null,
      7,
      undefined
    ]);
    expect(lines[1].cell_id).toBe('id1');
  });

  it('says whether a list holds cells not known before', () => {
    const cells = new SessionCells();
    cells.set([cell(1, 10, 11)]);
    expect(cells.set([cell(1, 10, 11)])).toBe(false);
    expect(cells.has(2)).toBe(false);
    expect(cells.set([cell(1, 10, 11), cell(2, 20, 21)])).toBe(true);
    expect(cells.has(2)).toBe(true);
  });

  it('labels a cell with its number, outcome and start', () => {
    expect(cellLabel(cell(2, 20, 21))).toMatch(
      /^Cell 2 · FAILED · \d\d:\d\d:\d\d$/
    );
  });
});
