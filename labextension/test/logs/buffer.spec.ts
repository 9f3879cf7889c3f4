import { LineBuffer } from '../../src/logs/buffer';
import type { ILogLine } from '../../src/logs/types';

const lines = (n: number, text = 'x'): ILogLine[] =>
  Array.from(
    { length: n },
    (_, i) => ({ t: i, node: 0, rank: i, level: 'info', text }) as ILogLine
  );

describe('LineBuffer', () => {
  it('drops the oldest lines beyond its capacity and says how many', () => {
    const buffer = new LineBuffer(3);
    expect(buffer.append(lines(2))).toBe(0);
    expect(buffer.append(lines(2))).toBe(1);
    expect(buffer.size).toBe(3);
    expect(buffer.dropped).toBe(1);
    expect(buffer.at(0).rank).toBe(1);
  });

  it('keeps sequence numbers across drops and clears', () => {
    const buffer = new LineBuffer(2);
    buffer.append(lines(3));
    expect(buffer.first).toBe(1);
    buffer.clear();
    expect(buffer.size).toBe(0);
    expect(buffer.dropped).toBe(0);
    expect(buffer.first).toBe(3);
  });

  it('tracks the widest text and origin badge held', () => {
    const buffer = new LineBuffer();
    buffer.append([...lines(1, 'a\tb'), ...lines(12, 'abc')]);
    expect(buffer.maxColumns).toBe(9);
    expect(buffer.maxOrigin).toBe('n0 r11'.length);
    buffer.clear();
    expect(buffer.maxColumns).toBe(0);
  });
});
