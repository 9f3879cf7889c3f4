/**
 * The slices of a GPU in MIG mode, as its card lists them: each one's profile,
 * memory and the processes on it (NVML shows no utilization of a slice).
 */

import { formatMemory, formatOwner, formatProcessMemory } from './format';
import type { IGpuState } from './types';

/** What a process of a job the caller may not view is shown as. */
export const OTHER_USERS_JOB = "another user's job";

/** One row of a card's MIG table. */
export interface IMigRow {
  /** "3g.40gb (GI 1)". */
  slice: string;
  /** "12.0 / 40.0 GiB". */
  memory: string;
  /** "pid 4242 · job a1b2 (12.0 GiB)", several joined with "; ", or "free". */
  processes: string;
  /** The slice's UUID, for a tooltip. */
  title: string;
}

/** The rows of `state`'s slices; none for a GPU not in MIG mode. */
export function migRows(state: IGpuState | undefined): IMigRow[] {
  return (state?.mig ?? []).map(slice => {
    const name = slice.profile ?? `slice ${slice.index}`;
    const instance =
      slice.gpu_instance === null ? '' : ` (GI ${slice.gpu_instance})`;
    const processes = slice.processes
      .map(place => state?.processes[place])
      .filter(process => process !== undefined)
      .map(process =>
        process.owner?.kind === 'other'
          ? `${OTHER_USERS_JOB} (${formatProcessMemory(process.mem_mib)})`
          : `pid ${process.pid} · ${formatOwner(process)} (${formatProcessMemory(
              process.mem_mib
            )})`
      );
    return {
      slice: `${name}${instance}`,
      memory: formatMemory(slice.mem_used_mib, slice.mem_total_mib),
      processes: processes.length ? processes.join('; ') : 'free',
      title: slice.uuid ?? name
    };
  });
}
