/**
 * The runs panel: header, table and comparison of one `RunsModel`; polls
 * while shown.
 */

import type { Message } from '@lumino/messaging';
import { Panel } from '@lumino/widgets';

import { CompareView } from './compare';
import { RunsHeader } from './header';
import { RunsModel } from './model';
import { IRunActions, RunsTable } from './table';

export class RunsPanel extends Panel {
  constructor(options: { model: RunsModel; actions: IRunActions }) {
    super();
    this.model = options.model;
    this.id = 'jupyter-air-runs';
    this.addClass('jp-air-RunsPanel');
    this.addWidget(new RunsHeader(this.model));
    this.addWidget(new RunsTable(this.model, options.actions));
    this.addWidget(new CompareView(this.model));
  }

  readonly model: RunsModel;

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.model.active = true;
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.model.active = false;
  }
}
