import {
  formatMfu,
  progressLine,
  progressShort,
  progressTitle
} from '../../src/common/progress';
import type { IProgress } from '../../src/logs/types';

/** 09:00:00 today, local time, in Unix seconds. */
const NINE = new Date(2026, 11, 6, 9, 0, 0).getTime() / 1000;

function progress(extra: Partial<IProgress> = {}): IProgress {
  return {
    step: 4210,
    total: 10000,
    fraction: 0.421,
    step_time_s: 0.3125,
    samples_per_s: 102.4,
    tokens_per_s: 52428.8,
    eta_s: 23 * 60,
    updated: NINE,
    line: 'step 4,210 / 10,000 (42 %), ETA 09:23 (23 min)',
    mfu: {
      value: 0.4123,
      why: 'counted FLOPs, bf16 peak of NVIDIA H100 80GB HBM3'
    },
    ...extra
  };
}

describe('progress', () => {
  it("says the server's line with the MFU beside it, when known", () => {
    expect(progressLine(progress())).toBe(
      'step 4,210 / 10,000 (42 %), ETA 09:23 (23 min) · MFU 41 %'
    );
    const none = progress({ mfu: { value: null, why: 'no GPU' } });
    expect(progressLine(none)).toBe(none.line);
  });

  it('writes a small MFU with a decimal', () => {
    expect(formatMfu(0.41)).toBe('41 %');
    expect(formatMfu(0.052)).toBe('5.2 %');
  });

  it('is short in a sidebar: the percentage and the ETA, never 100 % before the end', () => {
    expect(progressShort(progress())).toBe('42 % · ETA 09:23');
    const last = progress({ step: 9999, fraction: 0.9999, eta_s: null });
    expect(progressShort(last)).toBe('99 %');
  });

  it('gives a job of unknown length its step and rate, no percentage', () => {
    const unknown = progress({
      total: null,
      fraction: null,
      eta_s: null,
      step_time_s: 0.3125
    });
    expect(progressShort(unknown)).toBe('step 4,210 · 3.2 steps/s');
    expect(
      progressShort(
        progress({ total: null, fraction: null, step_time_s: null })
      )
    ).toBe('step 4,210');
  });

  it("puts the speed, and the MFU's reckoning or why it has none, in the tooltip", () => {
    expect(progressTitle(progress()).split('\n')).toEqual([
      'step 4,210 / 10,000 (42 %), ETA 09:23 (23 min)',
      '0.313 s/step, 102 samples/s, 52,429 tokens/s',
      'MFU 41 % (counted FLOPs, bf16 peak of NVIDIA H100 80GB HBM3)'
    ]);
    const bare = progress({
      step_time_s: null,
      samples_per_s: null,
      tokens_per_s: null,
      mfu: { value: null, why: "unknown GPU 'Tesla K80'" }
    });
    expect(progressTitle(bare).split('\n')).toEqual([
      bare.line,
      "MFU: none: unknown GPU 'Tesla K80'"
    ]);
  });
});
