import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, IThemeManager } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { followSettings, numberSetting } from './common/settings';
import { GpuResourcesModel, IGpuPanelSettings, isRangeKey } from './gpu/model';
import { GpuPanel } from './gpu/panel';
import { chipIcon } from './icons';
import logsPlugin from './logs/plugin';
import notificationsPlugin from './notifications/plugin';
import { requester } from './request';
import runsPlugin from './runs/plugin';
import schedulesPlugin from './schedules/plugin';

/** Command ids. */
export namespace CommandIDs {
  export const openGpuResources = 'jupyter-air:open-gpu-resources';
}

/** Plugin id; also the settings schema file name (labextension/schema/gpu.json). */
const GPU_PLUGIN_ID = 'jupyter-air:gpu';

/** Rank of the panel in the right sidebar (JupyterLab's, or Notebook 7's). */
const SIDEBAR_RANK = 900;

function readSettings(
  settings: ISettingRegistry.ISettings
): Partial<IGpuPanelSettings> {
  const range = settings.get('defaultRange').composite;
  return {
    defaultRange: isRangeKey(range) ? range : undefined,
    pollInterval: numberSetting(settings, 'pollInterval'),
    idleTimeout: numberSetting(settings, 'idleTimeout')
  };
}

/**
 * The "GPU resources" panel in the right sidebar: JupyterLab's, or on a
 * Jupyter Notebook 7 page the one that "View > Right Sidebar" and the command
 * open. Only the generic shell API is used (`add` to the `right` area,
 * `activateById`), which both shells implement.
 */
const gpuPlugin: JupyterFrontEndPlugin<void> = {
  id: GPU_PLUGIN_ID,
  description:
    'Live GPU utilization, memory, temperature and processes, and host CPU and memory.',
  autoStart: true,
  optional: [ICommandPalette, ISettingRegistry, IThemeManager],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    themeManager: IThemeManager | null
  ): void => {
    const model = new GpuResourcesModel({
      request: requester(app.serviceManager.serverSettings)
    });
    const panel = new GpuPanel({ model });
    panel.title.icon = chipIcon;
    panel.title.caption = 'GPU resources';
    // Not restored with the layout: the panel always starts collapsed and
    // polls only once opened.
    app.shell.add(panel, 'right', { rank: SIDEBAR_RANK });

    app.commands.addCommand(CommandIDs.openGpuResources, {
      label: 'Open GPU resources',
      caption: 'Show live GPU utilization, memory and temperature',
      icon: args => (args['isPalette'] ? undefined : chipIcon),
      execute: () => {
        app.shell.activateById(panel.id);
      }
    });
    if (palette) {
      palette.addItem({
        command: CommandIDs.openGpuResources,
        category: 'GPU',
        args: { isPalette: true }
      });
    }

    if (themeManager) {
      themeManager.themeChanged.connect(() => {
        // Let the new theme's CSS variables apply before reading them.
        requestAnimationFrame(() => panel.refreshTheme());
      });
    }

    void followSettings(settingRegistry, GPU_PLUGIN_ID, settings =>
      model.updateSettings(readSettings(settings))
    );
  }
};

export default [
  gpuPlugin,
  logsPlugin,
  runsPlugin,
  schedulesPlugin,
  notificationsPlugin
];
