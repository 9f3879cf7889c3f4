import { LabIcon } from '@jupyterlab/ui-components';

// The path is relative to the compiled module (lib/icons.js), which is what
// the extension builder bundles; tsc only sees the `*.svg` declaration.
import chipSvgStr from '../labextension/style/icons/chip.svg';

/** A microchip: the GPU resources panel. */
export const chipIcon = new LabIcon({
  name: 'jupyter-air:chip',
  svgstr: chipSvgStr
});
