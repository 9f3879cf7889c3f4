/**
 * Waiting helpers shared by the unit tests.
 */

export const sleep = (ms: number): Promise<void> =>
  new Promise(resolve => setTimeout(resolve, ms));

/** Wait until `condition` holds (a busy machine may be slow), else fail after 5 s. */
export async function until(condition: () => boolean): Promise<void> {
  for (let waited = 0; !condition(); waited += 10) {
    if (waited > 5000) {
      throw new Error(`still false: ${condition}`);
    }
    await sleep(10);
  }
}
