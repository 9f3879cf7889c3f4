import { TimeWindow } from '../../src/gpu/charts';

const MINUTE = 60_000;

describe('the time axis of a GPU chart', () => {
  it('ticks round times, none so near the right edge that its label is cut', () => {
    // Two hours to 10:27: ticks every 30 minutes, 10:30 is past the end and
    // 10:00 is more than a fifth of a step (6 min) before it.
    const end = 10 * 60 * MINUTE + 27 * MINUTE;
    const window = new TimeWindow([], [end - 120 * MINUTE, end], 60_000);
    expect(window.ticks().labels).toEqual(['08:30', '09:00', '09:30', '10:00']);
    const near = new TimeWindow(
      [],
      [end - 125 * MINUTE, end - 25 * MINUTE],
      60_000
    );
    // Ends at 10:02: 10:00 is 2 minutes before the edge, left out.
    expect(near.ticks().labels).toEqual(['08:30', '09:00', '09:30']);
  });
});
