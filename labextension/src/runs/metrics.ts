/**
 * The user's metrics and MLflow's system metrics (`system/...`): the user's
 * come first everywhere; the system ones are one click away.
 */

/** MLflow's prefix of the system metrics it logs (`system/gpu_0_utilization_percentage`). */
export const SYSTEM_PREFIX = 'system/';

export function isSystemMetric(key: string): boolean {
  return key.startsWith(SYSTEM_PREFIX);
}

/** `keys` split into the user's metrics and the system ones, each in its order. */
export function splitMetrics(keys: readonly string[]): {
  user: string[];
  system: string[];
} {
  const user: string[] = [];
  const system: string[] = [];
  for (const key of keys) {
    (isSystemMetric(key) ? system : user).push(key);
  }
  return { user, system };
}

/** `keys` with the user's metrics first. */
export function userFirst(keys: readonly string[]): string[] {
  const { user, system } = splitMetrics(keys);
  return [...user, ...system];
}

/**
 * The metric a comparison opens on: the user's first loss (what one compares
 * runs by first), else the user's first metric, else the first system one;
 * null without metrics.
 */
export function defaultMetric(keys: readonly string[]): string | null {
  const { user, system } = splitMetrics(keys);
  return user.find(key => /loss/i.test(key)) ?? user[0] ?? system[0] ?? null;
}

/**
 * The table's primary metric, the column beside the run's duration and attempt
 * that a narrow sidebar still shows: the metric picked for comparison when the
 * page has it, else the user's first loss, else the user's first metric; null
 * when the runs logged only system metrics.
 */
export function primaryMetric(
  keys: readonly string[],
  picked: string | null
): string | null {
  if (picked !== null && keys.includes(picked)) {
    return picked;
  }
  return defaultMetric(splitMetrics(keys).user);
}
