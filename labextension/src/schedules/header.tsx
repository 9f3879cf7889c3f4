/**
 * The chrome of the Schedules view: title, Refresh, the status line (the
 * shared rule: error, then pause, then how many schedules), the pause notice
 * and a refused action's message.
 */

import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { PauseNotice, RefreshButton, StatusLine } from '../common/chrome';
import { IStatusText, statusOf } from '../common/status';
import { SchedulesModel } from './model';

const PREFIX = 'jp-air-Schedules';

/** What the status line says when nothing is wrong. */
export function ownStatus(model: SchedulesModel): IStatusText {
  const schedules = model.schedules;
  if (schedules === null) {
    return { text: 'Loading…', title: '' };
  }
  if (schedules.length === 0) {
    return {
      text: 'No schedules yet: "Schedule this notebook" in a notebook\'s toolbar, %air_schedule, or air schedule create.',
      title: ''
    };
  }
  const n = schedules.length;
  return { text: `${n} schedule${n === 1 ? '' : 's'}`, title: '' };
}

function Header(props: { model: SchedulesModel }): JSX.Element {
  const { model } = props;
  return (
    <div className={`${PREFIX}-header`}>
      <div className={`${PREFIX}-titleBar`}>
        <h2 className={`${PREFIX}-title`}>Schedules</h2>
        <RefreshButton
          model={model}
          prefix={PREFIX}
          tooltip="Refresh the schedules"
        />
      </div>
      <StatusLine
        status={statusOf(model, () => ownStatus(model))}
        prefix={PREFIX}
      />
      <PauseNotice model={model} prefix={PREFIX} />
      {model.actionError !== null && (
        <div className={`${PREFIX}-actionError jp-mod-error`} role="alert">
          {model.actionError}
        </div>
      )}
    </div>
  );
}

export class SchedulesHeader extends ReactWidget {
  constructor(readonly model: SchedulesModel) {
    super();
    this.addClass(`${PREFIX}-chrome`);
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this.model.stateChanged}>
        {() => <Header model={this.model} />}
      </UseSignal>
    );
  }
}
