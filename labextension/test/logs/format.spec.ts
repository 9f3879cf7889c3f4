import {
  formatOrigin,
  lineAsText,
  matcher,
  setHighlighted,
  textColumns
} from '../../src/logs/format';
import type { ILogLine } from '../../src/logs/types';

const line = (text: string, extra: Partial<ILogLine> = {}): ILogLine =>
  ({ t: 0, node: 0, rank: 1, level: 'info', text, ...extra }) as ILogLine;

describe('log line text', () => {
  it('copies a line as ISO time, origin, level and text', () => {
    expect(lineAsText(line('hello', { t: 1.5, level: 'warning' }))).toBe(
      '1970-01-01T00:00:01.500Z node 0 rank 1 WARNING hello'
    );
  });

  it('badges the origin as "n<node> r<rank>"', () => {
    expect(formatOrigin(line('', { node: 2, rank: 15 }))).toBe('n2 r15');
  });
});

describe('matcher', () => {
  it('matches the search term literally and case-insensitively', () => {
    const pattern = matcher('a.b(')!;
    expect('xA.B(y'.match(pattern)).toEqual(['A.B(']);
    expect('axb('.match(pattern)).toBeNull();
  });

  it('is null for an empty term', () => {
    expect(matcher('')).toBeNull();
  });
});

describe('setHighlighted', () => {
  it('marks every match and keeps the text around them', () => {
    const node = document.createElement('span');
    setHighlighted(node, 'Loss nan, loss NaN', matcher('nan'));
    expect(node.textContent).toBe('Loss nan, loss NaN');
    expect(
      Array.from(node.querySelectorAll('mark')).map(m => m.textContent)
    ).toEqual(['nan', 'NaN']);
  });

  it("shows a terminal's colours as classes, marking matches across them", () => {
    const node = document.createElement('span');
    const text = 'Epoch 1: \x1b[32mloss 0.5\x1b[0m lossy\x1b[1m!';
    setHighlighted(node, text, matcher('loss'));
    expect(node.textContent).toBe('Epoch 1: loss 0.5 lossy!');
    const green = node.querySelector('span.ansi-green-fg');
    expect(green?.textContent).toBe('loss 0.5');
    expect(green?.querySelector('mark')?.textContent).toBe('loss');
    expect(
      Array.from(node.querySelectorAll('mark')).map(m => m.textContent)
    ).toEqual(['loss', 'loss']);
    expect(node.querySelector('span.ansi-bold')?.textContent).toBe('!');
  });

  it('marks a match that spans two colours in both', () => {
    const node = document.createElement('span');
    setHighlighted(node, 'lo\x1b[31mss', matcher('loss'));
    expect(
      Array.from(node.querySelectorAll('mark')).map(m => m.textContent)
    ).toEqual(['lo', 'ss']);
    expect(node.querySelector('.ansi-red-fg mark')?.textContent).toBe('ss');
  });

  it('writes plain text without a pattern', () => {
    const node = document.createElement('span');
    node.innerHTML = '<mark>old</mark>';
    setHighlighted(node, '<b>new</b>', null);
    expect(node.children.length).toBe(0);
    expect(node.textContent).toBe('<b>new</b>');
  });
});

describe('textColumns', () => {
  it('counts tabs to the next multiple of 8 and wide characters as 2', () => {
    expect(textColumns('abc')).toBe(3);
    expect(textColumns('\x1b[1;32mabc\x1b[0m')).toBe(3);
    expect(textColumns('ab\tc')).toBe(9);
    expect(textColumns('日本')).toBe(4);
  });
});
