/**
 * A view's model polls while the view is shown: one helper for every panel
 * and view, instead of four message handlers written in each.
 */

import { IMessageHandler, Message, MessageLoop } from '@lumino/messaging';
import type { Widget } from '@lumino/widgets';

/** What the helper drives: a model's `active` flag (see `PollingModel`). */
export interface IActivatable {
  active: boolean;
}

/**
 * Keep `model.active` equal to whether `widget` is shown: true after it is
 * shown, or attached while visible (a view restored open, or opened in the
 * main area, gets no after-show); false when hidden or detached.
 *
 * A message hook on the widget, so the widget's own handlers stay free for
 * its own work; Lumino removes the hook when the widget is disposed.
 */
export function activateWhileShown(widget: Widget, model: IActivatable): void {
  MessageLoop.installMessageHook(
    widget,
    (_: IMessageHandler, msg: Message): boolean => {
      switch (msg.type) {
        case 'after-attach':
          // Hooks run before the widget handles the message, so its visible
          // flag is not set yet: Lumino's own rule for setting it.
          model.active =
            !widget.isHidden && (!widget.parent || widget.parent.isVisible);
          break;
        case 'after-show':
          model.active = true;
          break;
        case 'after-hide':
        case 'before-detach':
          model.active = false;
          break;
      }
      return true;
    }
  );
}
