/**
 * The "Experiment runs" plugin: the panel in the right sidebar (JupyterLab's,
 * or Notebook 7's through the same generic shell API), following the notebook
 * in focus.
 *
 * The notebook is found through the shell's `currentChanged` and duck-typed
 * (`context.path`, `content.widgets`): both shells have that signal, and it
 * spares the extension a dependency on @jupyterlab/notebook only to learn a
 * path and find a cell by id.
 */

import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { historyIcon as runsIcon } from '@jupyterlab/ui-components';
import type { Widget } from '@lumino/widgets';

import { SIDEBAR_PANEL_CLASS } from '../common/chrome';
import { followSettings, numberSetting } from '../common/settings';
import { requester } from '../request';
import { RunsModel } from './model';
import { RunsPanel } from './panel';
import type { IRunActions } from './table';

export namespace CommandIDs {
  export const openRuns = 'jupyter-air:open-runs';
}

/** Plugin id; also the settings schema file name (labextension/schema/runs.json). */
const PLUGIN_ID = 'jupyter-air:runs';
/** Under the GPU panel (900) in the right sidebar. */
const SIDEBAR_RANK = 910;

/** The parts of a NotebookPanel this plugin reads. */
interface INotebookLike extends Widget {
  context: { path: string };
  content: {
    widgets: readonly (Widget & { model: { id: string } })[];
    activeCellIndex: number;
    scrollToItem?(index: number): Promise<void>;
  };
}

function asNotebook(widget: Widget | null): INotebookLike | null {
  const candidate = widget as Partial<INotebookLike> | null;
  const path = candidate?.context?.path;
  return typeof path === 'string' &&
    path.endsWith('.ipynb') &&
    Array.isArray(candidate?.content?.widgets)
    ? (candidate as INotebookLike)
    : null;
}

const runsPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    "The runs of the notebook's MLflow experiment, and their comparison.",
  autoStart: true,
  optional: [ICommandPalette, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null
  ): void => {
    const model = new RunsModel({
      request: requester(app.serviceManager.serverSettings)
    });
    let notebook: INotebookLike | null = null;
    const cellIndex = (cellId: string) =>
      notebook?.content.widgets.findIndex(c => c.model.id === cellId) ?? -1;
    const actions: IRunActions = {
      openLogs: jobId =>
        void app.commands.execute('jupyter-air:open-job-logs', { jobId }),
      hasCell: cellId => cellIndex(cellId) >= 0,
      openCell: cellId => {
        const index = cellIndex(cellId);
        if (notebook && index >= 0) {
          app.shell.activateById(notebook.id);
          notebook.content.activeCellIndex = index;
          void notebook.content.scrollToItem?.(index);
        }
      }
    };
    const panel = new RunsPanel({ model, actions });
    panel.title.icon = runsIcon;
    panel.title.caption = 'Experiment runs';
    panel.addClass(SIDEBAR_PANEL_CLASS);
    app.shell.add(panel, 'right', { rank: SIDEBAR_RANK });

    const follow = () => {
      const found = asNotebook(app.shell.currentWidget);
      if (found) {
        notebook = found;
        model.notebookPath = found.context.path;
      }
    };
    app.shell.currentChanged?.connect(follow);
    void app.restored.then(follow);

    app.commands.addCommand(CommandIDs.openRuns, {
      label: 'Open experiment runs',
      caption: "Show the runs of the notebook's MLflow experiment",
      icon: args => (args['isPalette'] ? undefined : runsIcon),
      execute: () => app.shell.activateById(panel.id)
    });
    void followSettings(settingRegistry, PLUGIN_ID, settings => {
      model.pageSize = numberSetting(settings, 'pageSize') ?? model.pageSize;
      const interval = numberSetting(settings, 'pollInterval', 1);
      if (interval !== undefined) {
        model.pollInterval = interval;
      }
    });

    palette?.addItem({
      command: CommandIDs.openRuns,
      category: 'MLflow',
      args: { isPalette: true }
    });
  }
};

export default runsPlugin;
