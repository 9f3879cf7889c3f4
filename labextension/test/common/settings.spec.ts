import type { ISettingRegistry } from '@jupyterlab/settingregistry';
import { Signal } from '@lumino/signaling';

import { followSettings, numberSetting } from '../../src/common/settings';

/** Settings of one plugin, as the registry hands them out: values and a signal. */
class FakeSettings {
  readonly changed = new Signal<this, void>(this);
  constructor(public values: Record<string, unknown>) {}
  get(key: string): { composite: unknown } {
    return { composite: this.values[key] };
  }
  set(key: string, value: unknown): void {
    this.values[key] = value;
    this.changed.emit();
  }
}

const asSettings = (fake: FakeSettings) =>
  fake as unknown as ISettingRegistry.ISettings;

describe('numberSetting', () => {
  const settings = asSettings(
    new FakeSettings({ n: 5, zero: 0, text: '5', nan: NaN, inf: Infinity })
  );

  it('reads a finite number', () => {
    expect(numberSetting(settings, 'n')).toBe(5);
    expect(numberSetting(settings, 'zero')).toBe(0);
  });

  it('reads anything else, or a number under the minimum, as unset', () => {
    expect(numberSetting(settings, 'text')).toBeUndefined();
    expect(numberSetting(settings, 'nan')).toBeUndefined();
    expect(numberSetting(settings, 'inf')).toBeUndefined();
    expect(numberSetting(settings, 'missing')).toBeUndefined();
    expect(numberSetting(settings, 'zero', 1)).toBeUndefined();
  });
});

describe('followSettings', () => {
  it('applies the settings once loaded, then after each change', async () => {
    const fake = new FakeSettings({ pollInterval: 10 });
    const seen: unknown[] = [];
    await followSettings(
      { load: async () => asSettings(fake) },
      'jupyter-air:x',
      settings => seen.push(numberSetting(settings, 'pollInterval'))
    );
    fake.set('pollInterval', 3);
    expect(seen).toEqual([10, 3]);
  });

  it('without a registry applies nothing', async () => {
    const apply = jest.fn();
    await followSettings(null, 'jupyter-air:x', apply);
    expect(apply).not.toHaveBeenCalled();
  });

  it('reports a failed load once, naming the plugin, and applies nothing', async () => {
    const error = jest.spyOn(console, 'error').mockImplementation(() => {});
    const apply = jest.fn();
    await followSettings(
      { load: () => Promise.reject(new Error('no schema')) },
      'jupyter-air:x',
      apply
    );
    expect(apply).not.toHaveBeenCalled();
    expect(error).toHaveBeenCalledTimes(1);
    expect(String(error.mock.calls[0][0])).toContain('jupyter-air:x');
    error.mockRestore();
  });
});
