/**
 * The Schedules view: header, the "Schedule this notebook" form when open,
 * and the schedules; polls while shown.
 */

import { Panel } from '@lumino/widgets';

import { activateWhileShown } from '../common/activation';
import { ScheduleForm } from './form';
import { ScheduleFormView } from './formView';
import { SchedulesHeader } from './header';
import { IScheduleActions, SchedulesList } from './list';
import { SchedulesModel } from './model';

export class SchedulesPanel extends Panel {
  constructor(options: { model: SchedulesModel; actions: IScheduleActions }) {
    super();
    this.model = options.model;
    this.id = 'jupyter-air-schedules';
    this.addClass('jp-air-Schedules');
    this._form = new ScheduleFormView(schedule => this.model.added(schedule));
    this.addWidget(new SchedulesHeader(this.model));
    this.addWidget(this._form);
    this.addWidget(new SchedulesList(this.model, options.actions));
    activateWhileShown(this, this.model);
  }

  readonly model: SchedulesModel;

  /** The open form, if any. */
  get form(): ScheduleForm | null {
    return this._form.form;
  }

  /** Open the form for `form`'s notebook, above the schedules. */
  openForm(form: ScheduleForm): void {
    this._form.open(form);
    this.node.scrollTop = 0;
  }

  private _form: ScheduleFormView;
}
