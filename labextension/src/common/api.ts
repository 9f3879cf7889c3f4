/**
 * The types of the jupyter_air server API that models use. Nothing here
 * imports JupyterLab, so models built on it run under jest as they are.
 */

/**
 * An error answered by the jupyter_air server API
 * (`{"error": {"code", "message", ...}}` with a 4xx/5xx status).
 */
export class APIError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly status: number,
    /** The error's other keys, e.g. `job`, `needed`, `owner` of a refused job permission. */
    readonly details: Readonly<Record<string, unknown>> = {}
  ) {
    super(message);
    this.name = 'APIError';
  }
}

/**
 * Query parameters of a request; `undefined` / `null` values are left out.
 */
export type Query = Record<string, string | number | null | undefined>;

/**
 * A call of the server API bound to a server (`requestAPI` with its settings):
 * what a model is given, so that tests can answer for the server.
 */
export type Requester = <T>(
  endPoint: string,
  init?: RequestInit,
  query?: Query
) => Promise<T>;
