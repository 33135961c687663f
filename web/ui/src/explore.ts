// The explore page: every metric name with its type, help and series
// count; a metric's label names and values on demand.
import { api, h, notice, table } from './api';

interface Metadata {
  type: string;
  help: string;
  unit?: string;
}
interface TSDBStatus {
  headStats: { numSeries: number };
  seriesCountByMetricName: { name: string; value: number }[];
}

/** The most metric names the list shows at once. */
const maxRows = 1000;

export async function explorePage(root: HTMLElement) {
  const filter = h('input', { type: 'search', class: 'filter', placeholder: 'Filter metric names', 'aria-label': 'filter' });
  const summary = h('p', { class: 'summary' });
  const listEl = h('div', { class: 'metrics' }, notice('info', 'Loading…'));
  const detail = h('div', { class: 'detail' });
  root.replaceChildren(h('h1', {}, 'Explore metrics'), h('div', { class: 'explore' }, h('div', {}, filter, summary, listEl), detail));
  let names: string[];
  let meta: Record<string, Metadata[]>;
  let counts: Map<string, number>;
  let total: number;
  try {
    const [n, m, s] = await Promise.all([
      api<string[]>('label/__name__/values'),
      api<Record<string, Metadata[]>>('metadata'),
      api<TSDBStatus>('status/tsdb', { limit: '10000' }),
    ]);
    names = n.data;
    meta = m.data;
    counts = new Map(s.data.seriesCountByMetricName.map((x) => [x.name, x.value]));
    total = s.data.headStats.numSeries;
  } catch (e) {
    listEl.replaceChildren(notice('error', `Error loading metrics: ${(e as Error).message}`));
    return;
  }
  summary.textContent = `${names.length} metric names, ${total} series`;
  summary.dataset.metrics = String(names.length);
  summary.dataset.series = String(total);
  const render = () => {
    const f = filter.value.trim().toLowerCase();
    const shown = names.filter((n) => n.toLowerCase().includes(f));
    if (!shown.length) {
      listEl.replaceChildren(notice('empty', names.length ? 'No metric name matches' : 'No metrics yet: send some with remote write'));
      return;
    }
    // A table of every name of a large server would take long to lay out.
    const more = shown.length - maxRows;
    listEl.replaceChildren(
      table(
        ['Metric', 'Type', 'Help', 'Series'],
        shown.slice(0, maxRows).map((n) => {
          const md = meta[n]?.[0];
          const a = h('a', { href: '#', class: 'metric', 'data-name': n }, n);
          a.addEventListener('click', (e) => {
            e.preventDefault();
            void showMetric(detail, n);
          });
          const c = counts.get(n);
          return [a, md?.type ?? '', md?.help ?? '', h('span', { class: 'count', 'data-name': n }, c === undefined ? '' : String(c))];
        }),
        'metrics-table',
      ),
      more > 0 ? notice('info', `${more} more metric names: type in the filter to narrow the list`) : '',
    );
  };
  filter.addEventListener('input', render);
  render();
}

async function showMetric(detail: HTMLElement, name: string) {
  detail.replaceChildren(h('h2', {}, name), notice('info', 'Loading…'));
  const match = { 'match[]': `{__name__=${JSON.stringify(name)}}` };
  try {
    const labels = (await api<string[]>('labels', match)).data.filter((l) => l !== '__name__');
    const values = await Promise.all(labels.map((l) => api<string[]>(`label/${encodeURIComponent(l)}/values`, match)));
    const q = `query?g0.expr=${encodeURIComponent(name)}&g0.tab=table`;
    detail.replaceChildren(
      h('h2', {}, name, ' ', h('a', { href: q, class: 'graph-link' }, 'query')),
      labels.length
        ? table(
            ['Label', 'Values', ''],
            labels.map((l, i) => [l, String(values[i].data.length), values[i].data.slice(0, 50).join(', ') + (values[i].data.length > 50 ? ', …' : '')]),
            'labels-table',
          )
        : notice('empty', 'This metric has no labels other than its name'),
    );
  } catch (e) {
    detail.replaceChildren(h('h2', {}, name), notice('error', (e as Error).message));
  }
}
