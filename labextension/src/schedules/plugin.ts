/**
 * The "Schedules" plugin: the view in the right sidebar (JupyterLab's, or
 * Notebook 7's through the same generic shell API), the "Schedule this
 * notebook" command (notebook toolbar, through this plugin's settings
 * schema, and the palette) that opens the form in the view, and the view's
 * settings.
 *
 * The notebook is duck-typed from the shell's current widget, as the runs
 * plugin does, sparing a dependency on @jupyterlab/notebook.
 */

import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, showDialog } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { Widget } from '@lumino/widgets';

import { SIDEBAR_PANEL_CLASS } from '../common/chrome';
import { followSettings, numberSetting } from '../common/settings';
import { requester } from '../request';
import { ScheduleForm } from './form';
import { scheduleIcon } from './icon';
import type { IScheduleActions } from './list';
import { SchedulesModel } from './model';
import { SchedulesPanel } from './panel';

export namespace CommandIDs {
  export const openSchedules = 'jupyter-air:open-schedules';
  export const scheduleNotebook = 'jupyter-air:schedule-notebook';
}

/** Plugin id; also the settings schema file name (labextension/schema/schedules.json). */
const PLUGIN_ID = 'jupyter-air:schedules';
/** Under the runs panel (910) in the right sidebar. */
const SIDEBAR_RANK = 920;

/** The parts of a NotebookPanel this plugin reads. */
interface INotebookLike extends Widget {
  context: { path: string; model: { dirty: boolean }; save(): Promise<void> };
}

function asNotebook(widget: Widget | null): INotebookLike | null {
  const candidate = widget as Partial<INotebookLike> | null;
  const path = candidate?.context?.path;
  return typeof path === 'string' &&
    path.endsWith('.ipynb') &&
    typeof candidate?.context?.save === 'function'
    ? (candidate as INotebookLike)
    : null;
}

const schedulesPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Scheduled runs: the schedules, their runs and tasks, and scheduling a notebook.',
  autoStart: true,
  optional: [ICommandPalette, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null
  ): void => {
    const request = requester(app.serviceManager.serverSettings);
    const model = new SchedulesModel({ request });
    const actions: IScheduleActions = {
      openLogs: jobId =>
        void app.commands.execute('jupyter-air:open-job-logs', { jobId }),
      confirmDelete: async name => {
        const result = await showDialog({
          title: 'Delete schedule',
          body: `Delete the schedule "${name}"? It stops firing; its past runs' jobs and logs stay.`,
          buttons: [
            Dialog.cancelButton(),
            Dialog.warnButton({ label: 'Delete' })
          ]
        });
        return result.button.accept;
      }
    };
    const panel = new SchedulesPanel({ model, actions });
    panel.title.icon = scheduleIcon;
    panel.title.caption = 'Schedules';
    panel.addClass(SIDEBAR_PANEL_CLASS);
    app.shell.add(panel, 'right', { rank: SIDEBAR_RANK });

    // The notebook last in focus: in Notebook 7 the sidebar never becomes current.
    let notebook: INotebookLike | null = null;
    const follow = () => {
      notebook = asNotebook(app.shell.currentWidget) ?? notebook;
      app.commands.notifyCommandChanged(CommandIDs.scheduleNotebook);
    };
    app.shell.currentChanged?.connect(follow);
    void app.restored.then(follow);

    app.commands.addCommand(CommandIDs.openSchedules, {
      label: 'Open schedules',
      caption: 'Show the scheduled runs',
      icon: args => (args['isPalette'] ? undefined : scheduleIcon),
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.scheduleNotebook, {
      label: 'Schedule this notebook',
      caption:
        'Run a copy of this notebook on a cron schedule, as a job with its MLflow run',
      icon: args => (args['isPalette'] ? undefined : scheduleIcon),
      isEnabled: () => notebook !== null && !notebook.isDisposed,
      execute: async () => {
        const target = notebook;
        if (!target || target.isDisposed) {
          return;
        }
        // The schedule takes the notebook as saved: save what the user sees.
        if (target.context.model.dirty) {
          await target.context.save();
        }
        panel.openForm(
          new ScheduleForm({ request, notebook: target.context.path })
        );
        app.shell.activateById(panel.id);
      }
    });
    palette?.addItem({
      command: CommandIDs.openSchedules,
      category: 'Schedules',
      args: { isPalette: true }
    });
    palette?.addItem({
      command: CommandIDs.scheduleNotebook,
      category: 'Schedules',
      args: { isPalette: true }
    });

    void followSettings(settingRegistry, PLUGIN_ID, settings => {
      const interval = numberSetting(settings, 'pollInterval', 1);
      if (interval !== undefined) {
        model.pollInterval = interval;
      }
    });
  }
};

export default schedulesPlugin;
