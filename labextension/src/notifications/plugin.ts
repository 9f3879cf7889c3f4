/**
 * The "Notifications" plugin: a job's (or a schedule run's) notification for
 * a `jupyterlab` target of `notify` shows as JupyterLab's own notification,
 * in every tab of its owner: its title (and the failing rank's last line),
 * with a "Logs" action that opens the job's logs view and an "MLflow run"
 * action that opens its run in a new browser tab.
 *
 * The facts, the lines and the links all stay on the logs view and the run's
 * page: the toast is kept short.
 */

import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';

import { CommandIDs as LogsCommandIDs } from '../logs/plugin';
import { requester } from '../request';
import {
  autoClose,
  IAirNotification,
  NotificationsModel,
  runLink,
  toastMessage,
  toastType
} from './model';

const PLUGIN_ID = 'jupyter-air:notifications';

/** The toast's actions: the job's logs, the run's page. */
function actions(
  app: JupyterFrontEnd,
  notification: IAirNotification
): Notification.IAction[] {
  const found: Notification.IAction[] = [];
  const jobId = notification.job_id;
  if (jobId && app.commands.hasCommand(LogsCommandIDs.openJobLogs)) {
    found.push({
      label: 'Logs',
      caption: `Open the logs of job ${jobId}`,
      displayType: 'accent',
      callback: () => {
        void app.commands.execute(LogsCommandIDs.openJobLogs, { jobId });
      }
    });
  }
  const run = runLink(notification);
  if (run) {
    found.push({
      label: 'MLflow run',
      caption: 'Open the MLflow run in a new browser tab',
      callback: event => {
        event.preventDefault(); // the toast stays, for its logs
        window.open(run, '_blank', 'noopener');
      }
    });
  }
  return found;
}

function show(app: JupyterFrontEnd, notification: IAirNotification): void {
  Notification.emit(toastMessage(notification), toastType(notification.level), {
    autoClose: autoClose(toastType(notification.level)),
    actions: actions(app, notification)
  });
}

const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    "Shows the user's job and schedule notifications (a jupyterlab target of notify) as JupyterLab notifications.",
  autoStart: true,
  activate: (app: JupyterFrontEnd): void => {
    const model = new NotificationsModel({
      request: requester(app.serviceManager.serverSettings)
    });
    model.received.connect((_, notification) => show(app, notification));
    model.start();
  }
};

export default notificationsPlugin;
