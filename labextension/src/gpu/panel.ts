/**
 * The "GPU resources" side panel: the chrome (React) above the cards.
 */

import type { Message } from '@lumino/messaging';
import { Panel } from '@lumino/widgets';

import { GpuBody } from './body';
import { GpuHeader } from './header';
import { GpuResourcesModel } from './model';

/**
 * Live per-GPU utilization, memory, temperature and power, the processes on
 * each GPU, and the host CPU and memory of `model`. The model polls while
 * the panel is shown.
 */
export class GpuPanel extends Panel {
  constructor(options: GpuPanel.IOptions) {
    super();
    this.id = 'jupyter-air-gpu';
    this.addClass('jp-air-GpuPanel');
    this.title.caption = 'GPU resources';
    this.model = options.model;
    this._body = new GpuBody(this.model);
    this.addWidget(new GpuHeader(this.model));
    this.addWidget(this._body);
    this.model.stateChanged.connect(this._onState, this);
  }

  readonly model: GpuResourcesModel;

  /** Read the chart theme again from the CSS variables and redraw. */
  refreshTheme(): void {
    this._body.refreshTheme();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    // Attached while shown (e.g. restored open): no after-show comes.
    if (this.isVisible) {
      this.model.active = true;
    }
  }

  protected onBeforeDetach(msg: Message): void {
    this.model.active = false;
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // Start loading plotly while the first answer is on its way.
    void this._body.loadCharts();
    // Reopening the panel resumes a pause, and fetches now.
    this.model.active = true;
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.model.active = false;
  }

  private _onState(): void {
    this.toggleClass('jp-mod-paused', this.model.paused !== null);
  }

  private _body: GpuBody;
}

export namespace GpuPanel {
  export interface IOptions {
    model: GpuResourcesModel;
  }
}
