/**
 * Answers of the GPU routes, as the specs of the GPU panel's model feed it.
 */

import type { IGpuResponse } from '../../src/gpu/types';

/** An answer of `jupyter-air/gpu` with one GPU and the samples at times `t`. */
export function answer(
  t: number[],
  extra: Partial<IGpuResponse> = {}
): IGpuResponse {
  return {
    now: t.length ? t[t.length - 1] : 0,
    interval: 10,
    history: 7200,
    paused: false,
    inventory: 'inv-1',
    gpus: [
      { index: 0, name: 'H100', mem_total_mib: 81920, power_limit_w: 700 }
    ],
    nvml: { available: true, reason: null, driver_version: '550' },
    samples: {
      t,
      cpu: t.map(() => 5),
      mem: t.map(() => 100),
      gpu: [
        {
          util: t.map(v => v % 100),
          mem: t.map(() => 1),
          temp: t.map(() => 50),
          power: t.map(() => 300)
        }
      ]
    },
    state: [{ status: 'ok', message: null, processes: [] }],
    ...extra
  };
}
