import { migRows } from '../../src/gpu/mig';
import type { IGpuState, IMigSlice } from '../../src/gpu/types';

function slice(
  index: number,
  profile: string,
  gi: number,
  total: number,
  used: number,
  processes: number[] = []
): IMigSlice {
  return {
    index,
    uuid: `MIG-${index}`,
    gpu_instance: gi,
    compute_instance: 0,
    profile,
    mem_total_mib: total,
    mem_used_mib: used,
    processes
  };
}

/** An H100 in MIG mode: a job on the 3g.40gb slice, the others free. */
const H100: IGpuState = {
  status: 'ok',
  message: null,
  processes: [
    {
      pid: 4242,
      name: 'python',
      mem_mib: 12288,
      owner: { kind: 'job', id: '20261206-110000-a1b2c3', name: 'train' }
    }
  ],
  mig: [
    slice(0, '3g.40gb', 1, 40960, 12288, [0]),
    slice(1, '2g.20gb', 5, 20480, 0),
    slice(2, '1g.10gb', 13, 10240, 0)
  ]
};

describe("a MIG GPU's slices", () => {
  it('show profile, instance, memory and the process on each', () => {
    expect(migRows(H100)).toEqual([
      {
        slice: '3g.40gb (GI 1)',
        memory: '12.0 / 40.0 GiB',
        processes: 'pid 4242 · train (12.0 GiB)',
        title: 'MIG-0'
      },
      {
        slice: '2g.20gb (GI 5)',
        memory: '0.0 / 20.0 GiB',
        processes: 'free',
        title: 'MIG-1'
      },
      {
        slice: '1g.10gb (GI 13)',
        memory: '0.0 / 10.0 GiB',
        processes: 'free',
        title: 'MIG-2'
      }
    ]);
  });

  it("show another user's process by its memory only", () => {
    const hidden: IGpuState = {
      ...H100,
      processes: [
        { pid: null, name: null, mem_mib: 12288, owner: { kind: 'other' } }
      ]
    };
    expect(migRows(hidden)[0].processes).toBe("another user's job (12.0 GiB)");
  });

  it('are none for a GPU not in MIG mode', () => {
    expect(migRows({ status: 'ok', message: null, processes: [] })).toEqual([]);
  });
});
