// The labextension's own additions to the build jupyter-builder makes (package.json's
// jupyterlab.webpackConfig).
//
// No size hints: the plotly chunk (about 1 MiB, the cells' live charts) is over the
// 300 KiB that the hints are tuned for, by design: JupyterLab fetches it from its own
// server, cached by its content hash, not over the web. A warning on every build
// would only teach readers to skip the build's output.
module.exports = {
  performance: { hints: false }
};
