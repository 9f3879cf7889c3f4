/**
 * The nodes and ranks the view offers to filter by: the job's, and any seen
 * in a line (a line may name one the job record does not, e.g. after an
 * elastic restart).
 */

import type { IJob, ILogLine } from './types';

export class Origins {
  /** Note the node and rank of each line. */
  add(lines: readonly ILogLine[]): void {
    for (const line of lines) {
      this._nodes.add(line.node);
      this._ranks.add(line.rank);
    }
  }

  /** The nodes and ranks of `job` and of the lines seen, sorted. */
  of(job: IJob | null): { nodes: number[]; ranks: number[] } {
    const nodes = new Set(this._nodes);
    const ranks = new Set(this._ranks);
    if (job) {
      for (let n = 0; n < job.nnodes; n++) {
        nodes.add(n);
      }
      for (let r = 0; r < job.nnodes * job.nproc_per_node; r++) {
        ranks.add(r);
      }
    }
    const sorted = (values: Set<number>) =>
      Array.from(values).sort((a, b) => a - b);
    return { nodes: sorted(nodes), ranks: sorted(ranks) };
  }

  private _nodes = new Set<number>();
  private _ranks = new Set<number>();
}
