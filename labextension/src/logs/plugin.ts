/**
 * The "Job logs" plugin: the view in the main area, the command that opens
 * it, the `lab?air-job=<id>` route, and layout restoration.
 *
 * In Jupyter Notebook 7 (no `ILabShell`) the main area holds the page's one
 * document and takes no other widget, so the view opens in the panel under
 * it (the shell's `down` area), on the notebook's own page; a click on a
 * cell's `lab?air-job=<id>` link opens it there too.
 */

import {
  ILabShell,
  ILayoutRestorer,
  IRouter,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { listIcon } from '@jupyterlab/ui-components';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { TabPanel } from '@lumino/widgets';

import { requester } from '../request';
import { JOB_ID } from './filters';
import { JobLogsModel } from './model';
import { pickJob } from './picker';
import { JobLogsView } from './view';

/** Command ids. */
export namespace CommandIDs {
  export const openJobLogs = 'jupyter-air:open-job-logs';
}

/**
 * The query parameters of the logs URL:
 * `{base_url}lab?air-job=<id>&air-attempt=K&air-cell=N&air-stacks=1` (N: a
 * session's cell; `air-stacks=1`: show the ranks' stacks, taken now if it runs;
 * `air-profile=1`: profile the ranks' next steps).
 */
export const JOB_PARAM = 'air-job';
export const ATTEMPT_PARAM = 'air-attempt';
export const CELL_PARAM = 'air-cell';
export const STACKS_PARAM = 'air-stacks';
export const PROFILE_PARAM = 'air-profile';

/** What the router matches (the request is the path, query and hash). */
const ROUTE = /[?&]air-job=/;

const PLUGIN_ID = 'jupyter-air:logs';

/** A job, and the attempt and session cell to show; its stacks too. */
interface ITarget {
  jobId: string;
  attempt?: number;
  cell?: number;
  stacks?: boolean;
  profile?: boolean;
}

/** A positive integer (an attempt's or a cell's number), else undefined. */
function toNumber(value: unknown): number | undefined {
  const n = typeof value === 'string' ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : undefined;
}

/** The job, attempt and cell named by a URL's query string, if any. */
export function targetOfSearch(search: string): ITarget | null {
  const params = new URLSearchParams(search);
  const jobId = params.get(JOB_PARAM);
  if (!jobId) {
    return null;
  }
  return {
    jobId,
    attempt: toNumber(params.get(ATTEMPT_PARAM)),
    cell: toNumber(params.get(CELL_PARAM)),
    stacks: params.get(STACKS_PARAM) === '1',
    profile: params.get(PROFILE_PARAM) === '1'
  };
}

/**
 * The job a click on `href` should open in this JupyterLab, or null: a link to
 * this lab's own page with `air-job` (the link of a cell output).
 */
function targetOfLink(href: string): ITarget | null {
  let url: URL;
  try {
    url = new URL(href, window.location.href);
  } catch {
    return null;
  }
  if (url.origin !== window.location.origin || !url.search) {
    return null;
  }
  const base = new URL(PageConfig.getBaseUrl(), window.location.href).pathname;
  const lab = base.replace(/\/?$/, '/') + 'lab';
  const path = url.pathname.replace(/\/$/, '');
  if (path !== lab && !path.startsWith(lab + '/')) {
    return null;
  }
  return targetOfSearch(url.search);
}

/** Take `air-job` and the rest out of the address bar (no new history entry). */
function forgetRoute(): void {
  const url = new URL(window.location.href);
  const params = [
    JOB_PARAM,
    ATTEMPT_PARAM,
    CELL_PARAM,
    STACKS_PARAM,
    PROFILE_PARAM
  ];
  if (!params.some(name => url.searchParams.has(name))) {
    return;
  }
  for (const name of params) {
    url.searchParams.delete(name);
  }
  window.history.replaceState(window.history.state, '', url.toString());
}

const logsPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'The "Job logs" view: search, filter, follow and download the logs of a job.',
  autoStart: true,
  optional: [ICommandPalette, IRouter, ILayoutRestorer, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    router: IRouter | null,
    restorer: ILayoutRestorer | null,
    labShell: ILabShell | null
  ): void => {
    const area = labShell ? 'main' : 'down';
    const serverSettings = app.serviceManager.serverSettings;
    const tracker = new WidgetTracker<MainAreaWidget<JobLogsView>>({
      namespace: 'jupyter-air-job-logs'
    });

    /** Bring a view forward. Notebook 7's down area activates a widget without
     * selecting its tab: a second view would open behind the first. */
    const show = (widget: MainAreaWidget<JobLogsView>): void => {
      app.shell.activateById(widget.id);
      const tabs = widget.parent?.parent;
      if (tabs instanceof TabPanel) {
        tabs.currentWidget = widget;
      }
    };

    /** Open (or show) the view of a job. */
    const open = (target: ITarget): MainAreaWidget<JobLogsView> | null => {
      const widget = openView(target);
      if (widget && target.stacks) {
        void widget.content.model.showStacks();
      }
      if (widget && target.profile) {
        void widget.content.profile.start();
      }
      return widget;
    };

    const openView = (target: ITarget): MainAreaWidget<JobLogsView> | null => {
      const { jobId, attempt, cell } = target;
      if (!JOB_ID.test(jobId)) {
        void showErrorMessage(
          'Job logs',
          `"${jobId}" is not a job id (like 20261129-083012-a1b2c3).`
        );
        return null;
      }
      const existing = tracker.find(w => w.content.jobId === jobId);
      if (existing) {
        if (attempt !== undefined) {
          existing.content.model.setAttempt(attempt);
        }
        if (cell !== undefined) {
          existing.content.model.setFilters({ cell });
        }
        show(existing);
        return existing;
      }
      const model = new JobLogsModel({
        jobId,
        attempt,
        cell,
        request: requester(serverSettings)
      });
      const content = new JobLogsView({
        model,
        serverSettings,
        openJob: other =>
          void app.commands.execute(CommandIDs.openJobLogs, { jobId: other })
      });
      content.title.icon = listIcon;
      const widget = new MainAreaWidget({ content });
      widget.id = `jupyter-air-job-logs-${jobId}`;
      widget.addClass('jp-air-JobLogsPanel');
      // The view has its own header; the empty toolbar would be a blank strip.
      widget.toolbar.hide();
      void tracker.add(widget);
      app.shell.add(widget, area);
      show(widget);
      return widget;
    };

    app.commands.addCommand(CommandIDs.openJobLogs, {
      label: 'Open job logs',
      caption:
        'Show the logs of a job: search, filter by node, rank and level, follow, download',
      icon: args => (args['isPalette'] ? undefined : listIcon),
      describedBy: {
        args: {
          type: 'object',
          properties: {
            jobId: {
              type: 'string',
              description: 'The job; without it, a dialog lists recent jobs'
            },
            attempt: {
              type: 'number',
              description: 'The attempt (default: the latest)'
            },
            cell: {
              type: 'number',
              description: "A session's cell (default: the whole session)"
            },
            search: {
              type: 'string',
              description: 'A URL query string with air-job (from the router)'
            }
          }
        }
      },
      execute: async (args: ReadonlyPartialJSONObject) => {
        if (typeof args['jobId'] === 'string' && args['jobId']) {
          return open({
            jobId: args['jobId'],
            attempt: toNumber(args['attempt']),
            cell: toNumber(args['cell'])
          });
        }
        if (typeof args['search'] === 'string') {
          // Routed from `lab?air-job=<id>`: open once the layout is restored
          // (restoring it would drop a view added before), without holding
          // the router (the restoration waits for the routing to end).
          const target = targetOfSearch(args['search']);
          if (target) {
            void app.restored.then(() => {
              open(target);
              forgetRoute();
            });
          }
          return undefined;
        }
        let jobId: string | null;
        try {
          jobId = await pickJob(serverSettings);
        } catch (error) {
          void showErrorMessage('Could not list the jobs', error as Error);
          return null;
        }
        return jobId ? open({ jobId }) : null;
      }
    });

    if (palette) {
      palette.addItem({
        command: CommandIDs.openJobLogs,
        category: 'GPU',
        args: { isPalette: true }
      });
    }

    if (router) {
      router.register({ command: CommandIDs.openJobLogs, pattern: ROUTE });
    }

    // A click on a link to this lab's `lab?air-job=<id>` (the link in a
    // distributed cell's output) opens the view here rather than a new tab.
    document.addEventListener(
      'click',
      event => {
        if (
          event.defaultPrevented ||
          event.button !== 0 ||
          event.metaKey ||
          event.ctrlKey ||
          event.shiftKey ||
          event.altKey
        ) {
          return;
        }
        const anchor = (event.target as Element | null)?.closest?.('a[href]');
        if (!anchor) {
          return;
        }
        const target = targetOfLink(anchor.getAttribute('href') ?? '');
        if (!target) {
          return;
        }
        event.preventDefault();
        event.stopPropagation();
        open(target);
      },
      true
    );

    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openJobLogs,
        args: widget => ({ jobId: widget.content.jobId }),
        name: widget => widget.content.jobId
      });
    }
  }
};

export default logsPlugin;
