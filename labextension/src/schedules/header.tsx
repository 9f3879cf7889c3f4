/**
 * The chrome of the Schedules view: title, refresh, the status line (what it
 * is doing, why it shows nothing, a refused action) and Resume after a pause.
 */

import {
  Button,
  ReactWidget,
  refreshIcon,
  ToolbarButtonComponent,
  UseSignal
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { SchedulesModel } from './model';

/** The status line: what the view is doing or why it shows nothing. */
export function statusText(model: SchedulesModel): string {
  if (model.error !== null) {
    return `Update failed: ${model.error}`;
  }
  if (model.paused !== null) {
    return 'Paused: click Resume to continue.';
  }
  const schedules = model.schedules;
  if (schedules === null) {
    return 'Loading…';
  }
  if (schedules.length === 0) {
    return 'No schedules yet: "Schedule this notebook" in a notebook\'s toolbar, %air_schedule, or air schedule create.';
  }
  const n = schedules.length;
  return `${n} schedule${n === 1 ? '' : 's'}`;
}

function Header(props: { model: SchedulesModel }): JSX.Element {
  const { model } = props;
  return (
    <div className="jp-air-Schedules-header">
      <div className="jp-air-Schedules-titleBar">
        <h2 className="jp-air-Schedules-title">Schedules</h2>
        <ToolbarButtonComponent
          className="jp-air-Schedules-refresh"
          icon={refreshIcon}
          tooltip="Refresh the schedules"
          onClick={() => {
            model.refresh().catch(error => {
              console.warn('jupyter-air: schedules refresh failed', error);
            });
          }}
        />
      </div>
      <div
        className={
          'jp-air-Schedules-statusLine' +
          (model.error !== null ? ' jp-mod-error' : '')
        }
        aria-live="polite"
      >
        {statusText(model)}
        {model.paused !== null && (
          <Button
            className="jp-mod-styled jp-mod-accept jp-air-Schedules-resumePolling"
            onClick={() => model.resume()}
          >
            Resume
          </Button>
        )}
      </div>
      {model.actionError !== null && (
        <div className="jp-air-Schedules-actionError jp-mod-error" role="alert">
          {model.actionError}
        </div>
      )}
    </div>
  );
}

export class SchedulesHeader extends ReactWidget {
  constructor(readonly model: SchedulesModel) {
    super();
    this.addClass('jp-air-Schedules-chrome');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this.model.stateChanged}>
        {() => <Header model={this.model} />}
      </UseSignal>
    );
  }
}
