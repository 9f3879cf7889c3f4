import {
  formatMemory,
  formatOwner,
  formatPercent,
  formatPower,
  formatProcessMemory,
  formatTemperature,
  NA
} from '../../src/gpu/format';

describe('GPU figures', () => {
  it('round percents, temperatures and watts', () => {
    expect(formatPercent(34.6)).toBe('35 %');
    expect(formatTemperature(50.5)).toBe('51 °C');
    expect(formatPower(311.7, 700)).toBe('312 / 700 W');
  });

  it('show memory in GiB with one decimal', () => {
    expect(formatMemory(20480, 81510)).toBe('20.0 / 79.6 GiB');
  });

  it('answer "n/a" for a value not reported, never an empty string', () => {
    for (const value of [null, undefined, NaN, Infinity]) {
      expect(formatPercent(value)).toBe(NA);
      expect(formatTemperature(value)).toBe(NA);
      expect(formatMemory(value, 100)).toBe(NA);
      expect(formatPower(value, 100)).toBe(NA);
      expect(formatProcessMemory(value)).toBe(NA);
    }
  });

  it('say "n/a" for a missing total or limit beside a known value', () => {
    expect(formatMemory(1024, null)).toBe('1.0 GiB / n/a');
    expect(formatPower(100, null)).toBe('100 W / n/a');
  });

  it('show process memory in MiB below 1 GiB', () => {
    expect(formatProcessMemory(512.4)).toBe('512 MiB');
    expect(formatProcessMemory(19968)).toBe('19.5 GiB');
  });
});

describe('formatOwner', () => {
  const process = (owner: unknown) =>
    ({ pid: 1, name: 'python', mem_mib: 1, owner }) as any;

  it('names a kernel by its notebook, else by its short id', () => {
    expect(formatOwner(process({ kind: 'kernel', name: 'train.ipynb' }))).toBe(
      'train.ipynb'
    );
    expect(
      formatOwner(process({ kind: 'kernel', id: '0123456789abcdef' }))
    ).toBe('kernel 01234567');
  });

  it('names a job by its name, else by its id', () => {
    expect(formatOwner(process({ kind: 'job', id: 'j-1' }))).toBe('job j-1');
    expect(formatOwner(process({ kind: 'job', name: 'train' }))).toBe('train');
  });

  it('shows a dash for a process nobody owns', () => {
    expect(formatOwner(process(null))).toBe('—');
  });
});
