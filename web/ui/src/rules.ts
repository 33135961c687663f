// The rules and alerts pages, from /api/v1/rules and /api/v1/alerts.
import { api, h, notice, table, seriesName, APIError } from './api';

interface Rule {
  type: 'alerting' | 'recording';
  name: string;
  query: string;
  health: string;
  lastError?: string;
  state?: string;
  labels?: Record<string, string>;
  lastEvaluation?: string;
  evaluationTime?: number;
  alerts?: Alert[];
}
interface Group {
  name: string;
  file: string;
  interval: number;
  rules: Rule[];
}
interface Alert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: string;
  activeAt?: string;
  value: string;
}

function unavailable(e: unknown, what: string): HTMLElement {
  if (e instanceof APIError && (e.status === 404 || e.status === 405)) return notice('empty', `No ${what}: this server evaluates no rules.`);
  return notice('error', `Error loading ${what}: ${(e as Error).message}`);
}

export async function rulesPage(root: HTMLElement) {
  root.replaceChildren(h('h1', {}, 'Rules'));
  try {
    const groups = (await api<{ groups: Group[] }>('rules')).data.groups ?? [];
    if (!groups.length) {
      root.append(notice('empty', 'No rules are loaded.'));
      return;
    }
    for (const g of groups) {
      root.append(
        h('h2', {}, `${g.name} `, h('small', {}, `${g.file}, every ${g.interval}s`)),
        table(
          ['Rule', 'Health', 'Last evaluation', 'Took', 'Error'],
          g.rules.map((r) => [h('code', {}, `${r.type === 'alerting' ? 'alert' : 'record'}: ${r.name}\nexpr: ${r.query}`), r.health, r.lastEvaluation ?? '', r.evaluationTime !== undefined ? `${(r.evaluationTime * 1000).toFixed(1)} ms` : '', r.lastError ?? '']),
          'rules-table',
        ),
      );
    }
  } catch (e) {
    root.append(unavailable(e, 'rules'));
  }
}

export async function alertsPage(root: HTMLElement) {
  root.replaceChildren(h('h1', {}, 'Alerts'));
  try {
    const alerts = (await api<{ alerts: Alert[] }>('alerts')).data.alerts ?? [];
    if (!alerts.length) {
      root.append(notice('empty', 'No alerts are pending or firing.'));
      return;
    }
    root.append(
      table(
        ['Alert', 'State', 'Active since', 'Value', 'Annotations'],
        alerts.map((a) => [seriesName({ __name__: a.labels.alertname ?? '', ...a.labels }), a.state, a.activeAt ?? '', a.value, Object.entries(a.annotations).map(([k, v]) => `${k}: ${v}`).join('\n')]),
        'alerts-table',
      ),
    );
  } catch (e) {
    root.append(unavailable(e, 'alerts'));
  }
}
