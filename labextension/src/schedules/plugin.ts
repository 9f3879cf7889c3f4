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
import {
  Dialog,
  ICommandPalette,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { Widget } from '@lumino/widgets';

import { SIDEBAR_PANEL_CLASS } from '../common/chrome';
import { followSettings, numberSetting } from '../common/settings';
import { requester } from '../request';
import {
  EXECUTED_DRIVE,
  ExecutedNotebooksDrive,
  executedPath
} from './executed';
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

/** The widget the document manager opens: what this plugin changes of it. */
interface IOpenedDocument extends Widget {
  context?: {
    sessionContext?: { kernelPreference: Record<string, unknown> };
  };
}

/**
 * Open a job's executed notebook from the read-only drive, in the notebook
 * editor, titled by its schedule run; with no kernel: it shows what ran.
 */
async function openExecuted(
  app: JupyterFrontEnd,
  jobId: string,
  name: string,
  runId: number
): Promise<void> {
  let widget: IOpenedDocument | undefined;
  try {
    widget = await app.commands.execute('docmanager:open', {
      path: executedPath(jobId, name),
      factory: 'Notebook'
    });
  } catch (error) {
    void showErrorMessage('Cannot open the executed notebook', error as Error);
    return;
  }
  // Asked before the document has loaded (the drive is still fetching it),
  // so its session never starts a kernel.
  const session = widget?.context?.sessionContext;
  if (session) {
    session.kernelPreference = {
      ...session.kernelPreference,
      shouldStart: false,
      canStart: false,
      autoStartDefault: false
    };
  }
  if (widget) {
    widget.title.label = `${name} · run ${runId}`;
  }
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
    app.serviceManager.contents.addDrive(
      new ExecutedNotebooksDrive(request, app.serviceManager.serverSettings)
    );
    const actions: IScheduleActions = {
      openLogs: jobId =>
        void app.commands.execute('jupyter-air:open-job-logs', { jobId }),
      openExecuted: (jobId, path, runId) =>
        void openExecuted(app, jobId, path.split('/').pop()!, runId),
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
      const current = asNotebook(app.shell.currentWidget);
      // A run's executed notebook (read-only, not in the server's root) is no
      // notebook to schedule.
      notebook = current?.context.path.startsWith(`${EXECUTED_DRIVE}:`)
        ? null
        : (current ?? notebook);
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
