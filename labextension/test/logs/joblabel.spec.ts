import { jobLabel } from '../../src/logs/format';
import type { IJob } from '../../src/logs/types';

const job = (
  kind: string,
  status = 'RUNNING',
  message: string | null = null
): IJob => ({
  id: '20261202-035009-1ad279',
  status,
  finishing: false,
  tracking: null,
  owner: 'alice',
  created: 0,
  started: 1,
  ended: null,
  message,
  kind,
  nproc_per_node: 2,
  nnodes: 1,
  backend: 'local',
  max_retries: 0,
  checkpoint_dir: null,
  experiment_id: null,
  run_name: 'train',
  tracking_uri: null,
  logs_expired: false,
  parent_id: null,
  children: [],
  notifications: [],
  attempts: []
});

describe('jobLabel', () => {
  it('names a warm session as such, and no other kind', () => {
    expect(jobLabel(job('session'))).toBe(
      '20261202-035009-1ad279 · RUNNING · session · train'
    );
    expect(jobLabel(job('command'))).toBe(
      '20261202-035009-1ad279 · RUNNING · train'
    );
  });

  it("says the queue's word while a cluster's queue holds the job", () => {
    const queued = 'PENDING (Resources), Slurm job 4242';
    expect(jobLabel(job('command', 'PENDING', queued))).toBe(
      `20261202-035009-1ad279 · ${queued} · train`
    );
    expect(jobLabel(job('command', 'FAILED', 'rank 1 exited'))).toBe(
      '20261202-035009-1ad279 · FAILED · train'
    );
  });
});
