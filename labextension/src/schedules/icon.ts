import { LabIcon } from '@jupyterlab/ui-components';

/** A clock face: the Schedules view and "Schedule this notebook". */
export const scheduleIcon = new LabIcon({
  name: 'jupyter-air:schedule',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M12 2a10 10 0 1 0 0 20 10 10 0 0 0 0-20zm0 2a8 8 0 1 1 0 16 8 8 0 0 1 0-16z"/>' +
    '<path d="M11 6h2v5.6l4 2.3-1 1.7-5-2.9z"/>' +
    '</g></svg>'
});
