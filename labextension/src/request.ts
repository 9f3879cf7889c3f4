import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { APIError } from './common/api';
import type { Query, Requester } from './common/api';

export { APIError };
export type { Query, Requester };

/**
 * The URL namespace of the jupyter_air server extension.
 */
export const API_NAMESPACE = 'jupyter-air';

/**
 * The URL of an API path: `{base_url}jupyter-air/<endPoint>?<query>`.
 */
export function apiUrl(
  endPoint: string,
  query: Query = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null) {
      params.append(key, String(value));
    }
  }
  const search = params.toString();
  return search ? `${url}?${search}` : url;
}

/**
 * Call the jupyter_air server API.
 *
 * @param endPoint - API path under `{base_url}jupyter-air/`, e.g. `gpu`.
 * @param init - Initial values for the request (method, body, ...).
 * @param query - Query parameters, appended to the URL.
 * @param settings - Server connection settings (defaults to the page's).
 * @returns The decoded JSON answer.
 * @throws APIError carrying the server's message when the answer is an error;
 *   ServerConnection.NetworkError when the server could not be reached.
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  query: Query = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = apiUrl(endPoint, query, settings);

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }

  const text = await response.text();
  let data: unknown = undefined;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = undefined;
    }
  }

  if (!response.ok) {
    const error = (data as { error?: Record<string, unknown> })?.error;
    const { code, message, ...details } =
      error && typeof error === 'object' ? error : {};
    throw new APIError(
      typeof message === 'string' && message
        ? message
        : `${response.status} ${response.statusText || 'request failed'}`.trim(),
      typeof code === 'string' ? code : 'http_error',
      response.status,
      details
    );
  }
  if (data === undefined && text.length > 0) {
    throw new APIError(
      `Invalid JSON answer from ${endPoint || API_NAMESPACE}`,
      'bad_response',
      response.status
    );
  }
  return data as T;
}

/** A `Requester` for the server of `settings` (what the plugins give models). */
export function requester(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Requester {
  return <T>(endPoint: string, init: RequestInit = {}, query: Query = {}) =>
    requestAPI<T>(endPoint, init, query, settings);
}
