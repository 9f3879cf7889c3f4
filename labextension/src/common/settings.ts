/**
 * A plugin's settings (labextension/schema/<name>.json), applied once loaded
 * and again on every change: one rule for every panel, instead of a load,
 * apply, connect and error report written in each plugin.
 */

import type { ISettingRegistry } from '@jupyterlab/settingregistry';

/** The parts of the registry this reads (an `ISettingRegistry` in the app). */
export interface ISettingsSource {
  load(plugin: string): Promise<ISettingRegistry.ISettings>;
}

/**
 * The finite number a setting holds, at least `min`, or undefined (unset, of
 * another type, or too small: JupyterLab checks the schema, this does not
 * trust it).
 */
export function numberSetting(
  settings: ISettingRegistry.ISettings,
  key: string,
  min = -Infinity
): number | undefined {
  const value = settings.get(key).composite;
  return typeof value === 'number' && Number.isFinite(value) && value >= min
    ? value
    : undefined;
}

/**
 * Call `apply` with the settings of `plugin` once they are loaded and after
 * each change. Without a registry (it is optional) nothing is applied and the
 * model keeps its defaults; a failed load is reported once on the console.
 */
export function followSettings(
  registry: ISettingsSource | null,
  plugin: string,
  apply: (settings: ISettingRegistry.ISettings) => void
): Promise<void> {
  if (!registry) {
    return Promise.resolve();
  }
  return registry
    .load(plugin)
    .then(settings => {
      apply(settings);
      settings.changed.connect(() => apply(settings));
    })
    .catch(reason =>
      console.error(`jupyter-air: failed to load ${plugin} settings`, reason)
    );
}
