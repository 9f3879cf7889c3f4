import { logsTabTitle, shortJobId } from '../../src/logs/format';
import type { IJob } from '../../src/logs/types';

describe('logsTabTitle', () => {
  const job = { run_name: 'ddp-train' } as IJob;
  const id = '20261206-040512-2f3a9c';

  it('names a tab by the run name and the end of the job id, the caption by all of it', () => {
    expect(shortJobId(id)).toBe('2f3a9c');
    expect(logsTabTitle(id, job)).toEqual({
      label: 'ddp-train · 2f3a9c',
      caption: `Job logs — ddp-train (${id})`
    });
  });

  it('says "Job logs" before the job is read, or when its runs have no name', () => {
    const untitled = {
      label: 'Job logs · 2f3a9c',
      caption: `Job logs — ${id}`
    };
    expect(logsTabTitle(id, null)).toEqual(untitled);
    expect(logsTabTitle(id, { run_name: null } as IJob)).toEqual(untitled);
  });
});
