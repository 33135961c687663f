// The HTTP API as the UI sees it. Every URL is relative to the page's
// folder, so that the UI works at any route prefix and behind a proxy.

/** The path the UI is served under, without its trailing slash ("" at the root). */
export function basePath(): string {
  return new URL('.', location.href).pathname.replace(/\/$/, '');
}

/** An error the API answered with (or a failure to reach it). */
export class APIError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly errorType: string,
  ) {
    super(message);
  }
}

/** What a successful call returns: the data and any warnings and infos. */
export interface Answer<T> {
  data: T;
  warnings: string[];
  infos: string[];
  /** performance.now() when the answer's body had arrived, before it was parsed. */
  receivedAt: number;
}

/** Calls GET api/v1/<path> with params (repeated keys as arrays). */
export async function api<T>(path: string, params: Record<string, string | string[]> = {}, signal?: AbortSignal): Promise<Answer<T>> {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    for (const x of Array.isArray(v) ? v : [v]) q.append(k, x);
  }
  const qs = q.toString();
  const url = `${basePath()}/api/v1/${path}${qs ? '?' + qs : ''}`;
  let resp: Response;
  try {
    resp = await fetch(url, { signal, headers: { Accept: 'application/json' } });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new APIError(`cannot reach the server: ${(e as Error).message}`, 0, 'network');
  }
  const text = await resp.text();
  const receivedAt = performance.now();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    throw new APIError(`${resp.status} ${resp.statusText}: ${text.trim().slice(0, 500)}`, resp.status, 'http');
  }
  if (body.status !== 'success') {
    throw new APIError(body.error ?? `${resp.status} ${resp.statusText}`, resp.status, body.errorType ?? 'http');
  }
  return { data: body.data as T, warnings: body.warnings ?? [], infos: body.infos ?? [], receivedAt };
}

/** Creates an element with attributes and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | EventListener> = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (v === true) el.setAttribute(k, '');
    else if (v !== false) el.setAttribute(k, v);
  }
  for (const c of children) if (c != null) el.append(c);
  return el;
}

/** A message box: kind is "error", "warning", "info" or "empty". */
export function notice(kind: string, text: string): HTMLElement {
  return h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** A table from a header row and rows of cells. */
export function table(head: string[], rows: (string | Node)[][], cls = ''): HTMLTableElement {
  return h(
    'table',
    { class: cls },
    h('thead', {}, h('tr', {}, ...head.map((x) => h('th', {}, x)))),
    h('tbody', {}, ...rows.map((r) => h('tr', {}, ...r.map((c) => h('td', {}, c))))),
  );
}

/** Formats a byte count with binary units. */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

/** Formats a Unix time in milliseconds as UTC. */
export function isoTime(ms: number): string {
  return new Date(ms).toISOString().replace('.000Z', 'Z');
}

/** Renders a label set as {a="b", ...} with the metric name in front. */
export function seriesName(metric: Record<string, string>): string {
  const name = metric.__name__ ?? '';
  const rest = Object.keys(metric)
    .filter((k) => k !== '__name__')
    .sort()
    .map((k) => `${k}=${JSON.stringify(metric[k])}`);
  return rest.length ? `${name}{${rest.join(', ')}}` : name || '{}';
}
