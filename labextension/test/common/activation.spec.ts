import type { Widget as WidgetType } from '@lumino/widgets';

import { activateWhileShown } from '../../src/common/activation';

let Widget: typeof WidgetType;
beforeAll(async () => {
  // jsdom has no DragEvent, which @lumino/dragdrop extends when imported.
  (globalThis as any).DragEvent ??= class extends MouseEvent {};
  ({ Widget } = await import('@lumino/widgets'));
});

describe('activateWhileShown', () => {
  let widget: WidgetType;
  let model: { active: boolean };
  beforeEach(() => {
    widget = new Widget();
    model = { active: false };
    activateWhileShown(widget, model);
  });
  afterEach(() => widget.dispose());

  it('is active once attached shown (a view opened in the main area)', () => {
    Widget.attach(widget, document.body);
    expect(model.active).toBe(true);
  });

  it('stays inactive when attached hidden (a collapsed sidebar panel)', () => {
    widget.hide();
    Widget.attach(widget, document.body);
    expect(model.active).toBe(false);
  });

  it('follows hide and show, and ends with a detach', () => {
    Widget.attach(widget, document.body);
    widget.hide();
    expect(model.active).toBe(false);
    widget.show();
    expect(model.active).toBe(true);
    Widget.detach(widget);
    expect(model.active).toBe(false);
  });

  it('a view disposed while shown leaves its model inactive', () => {
    Widget.attach(widget, document.body);
    expect(model.active).toBe(true);
    widget.dispose();
    expect(model.active).toBe(false);
  });
});
