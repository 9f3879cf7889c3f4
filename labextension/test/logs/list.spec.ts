import { LineBuffer } from '../../src/logs/buffer';
import { LogList, ROW_HEIGHT } from '../../src/logs/list';
import type { ILogLine } from '../../src/logs/types';

const VIEW = 10 * ROW_HEIGHT;

const lines = (n: number): ILogLine[] =>
  Array.from(
    { length: n },
    (_, i) =>
      ({ t: i, node: 0, rank: 0, level: 'info', text: `line ${i}` }) as ILogLine
  );

/** Animation frames run when the test says: a browser's frame, by hand. */
let frames: FrameRequestCallback[] = [];
function nextFrame(): void {
  const due = frames;
  frames = [];
  due.forEach(callback => callback(0));
}

/**
 * A list in a scroller of {@link VIEW} pixels whose content is the canvas's
 * height (jsdom lays nothing out), and the scrolls it reports.
 */
function scroller(buffer: LineBuffer): {
  list: LogList;
  scrolls: { atBottom: boolean; up: boolean }[];
  scrollTo: (top: number) => void;
  end: () => number;
} {
  const list = new LogList(buffer);
  const node = list.node;
  const canvas = node.firstElementChild as HTMLElement;
  const height = (): number => parseFloat(canvas.style.height || '0');
  const end = (): number => Math.max(0, height() - VIEW);
  let top = 0;
  Object.defineProperty(node, 'clientHeight', { get: () => VIEW });
  Object.defineProperty(node, 'scrollHeight', { get: height });
  Object.defineProperty(node, 'scrollTop', {
    get: () => top,
    set: (value: number) => {
      top = Math.min(Math.max(0, value), end());
    }
  });
  const scrolls: { atBottom: boolean; up: boolean }[] = [];
  list.scrolled.connect((_, scroll) => {
    scrolls.push(scroll);
  });
  // The user's scroll: the position moves now, its event comes later.
  const scrollTo = (value: number): void => {
    node.scrollTop = value;
  };
  return { list, scrolls, scrollTo, end };
}

/** The scroll event of this frame, dispatched as a browser does: once. */
function dispatchScroll(list: LogList): void {
  list.node.dispatchEvent(new Event('scroll'));
}

describe('LogList: what a scroll of the user meant', () => {
  beforeEach(() => {
    frames = [];
    jest
      .spyOn(window, 'requestAnimationFrame')
      .mockImplementation(callback => frames.push(callback));
    jest.spyOn(window, 'cancelAnimationFrame').mockImplementation(() => {});
  });

  afterEach(() => {
    jest.restoreAllMocks();
  });

  it('takes a scroll to the end as at the end, though lines arrived before its event', () => {
    const buffer = new LineBuffer();
    buffer.append(lines(100));
    const { list, scrolls, scrollTo, end } = scroller(buffer);
    list.update();
    nextFrame();

    scrollTo(end()); // the user reaches the last line...
    buffer.append(lines(5)); // ...and a follow tick adds lines before the event
    list.update();
    expect(list.atBottom).toBe(false);
    dispatchScroll(list);

    expect(scrolls).toEqual([{ atBottom: true, up: false }]);
  });

  it('judges by the end as it is once the frame is over', () => {
    const buffer = new LineBuffer();
    buffer.append(lines(100));
    const { list, scrolls, scrollTo, end } = scroller(buffer);
    list.update();
    scrollTo(end());
    buffer.append(lines(5));
    list.update();
    nextFrame();

    scrollTo(end() - 5 * ROW_HEIGHT); // where the old end was, in a later frame
    dispatchScroll(list);

    expect(scrolls).toEqual([{ atBottom: false, up: false }]);
  });

  it('never takes a scroll up as at the end', () => {
    const buffer = new LineBuffer();
    buffer.append(lines(100));
    const { list, scrolls, scrollTo, end } = scroller(buffer);
    list.update();
    scrollTo(end());
    dispatchScroll(list);
    nextFrame();

    scrollTo(end() - 30 * ROW_HEIGHT);
    buffer.append(lines(5));
    list.update();
    dispatchScroll(list);

    expect(scrolls[1]).toEqual({ atBottom: false, up: true });
  });

  it('reports nothing for its own adjustment after old lines are dropped', () => {
    const buffer = new LineBuffer(100);
    buffer.append(lines(100));
    const { list, scrolls, scrollTo } = scroller(buffer);
    list.update();
    scrollTo(50 * ROW_HEIGHT);
    dispatchScroll(list);
    nextFrame();

    list.update(buffer.append(lines(10)));
    expect(list.node.scrollTop).toBe(40 * ROW_HEIGHT); // the same rows in view
    dispatchScroll(list);

    expect(scrolls).toHaveLength(1);
  });

  it("reports the user's scroll in the frame of that adjustment", () => {
    const buffer = new LineBuffer(100);
    buffer.append(lines(100));
    const { list, scrolls, scrollTo, end } = scroller(buffer);
    list.update();
    scrollTo(50 * ROW_HEIGHT);
    dispatchScroll(list);
    nextFrame();

    list.update(buffer.append(lines(10)));
    scrollTo(end());
    dispatchScroll(list);

    expect(scrolls[1]).toEqual({ atBottom: true, up: false });
  });
});
