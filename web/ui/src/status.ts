// The status page: build, flags, configuration and cardinality.
import { api, h, notice, table, isoTime } from './api';

interface TSDBStatus {
  headStats: { numSeries: number; numLabelPairs: number; chunkCount: number; minTime: number; maxTime: number };
  seriesCountByMetricName: { name: string; value: number }[];
  labelValueCountByLabelName: { name: string; value: number }[];
  memoryInBytesByLabelName: { name: string; value: number }[];
  seriesCountByLabelValuePair: { name: string; value: number }[];
}

/** Hides the values of keys that look like secrets in a YAML text. */
export function hideSecrets(yaml: string): string {
  return yaml.replace(/^(\s*[\w.-]*(?:secret|password|token|credentials?|access_key|api_key)[\w.-]*\s*:\s*)(\S.*)$/gim, '$1<secret>');
}

function section(title: string, id: string, body: Node): HTMLElement {
  return h('section', { class: 'status-section', id }, h('h2', {}, title), body);
}

async function part(title: string, id: string, load: () => Promise<Node>): Promise<HTMLElement> {
  try {
    return section(title, id, await load());
  } catch (e) {
    return section(title, id, notice('error', (e as Error).message));
  }
}

export async function statusPage(root: HTMLElement) {
  root.replaceChildren(h('h1', {}, 'Status'), notice('info', 'Loading…'));
  const parts = await Promise.all([
    part('Build', 'build', async () => {
      const d = (await api<Record<string, string>>('status/buildinfo')).data;
      return table(['', ''], Object.entries(d).map(([k, v]) => [k, v]), 'kv');
    }),
    part('Runtime', 'runtime', async () => {
      const d = (await api<Record<string, unknown>>('status/runtimeinfo')).data;
      return table(['', ''], Object.entries(d).map(([k, v]) => [k, String(v)]), 'kv');
    }),
    part('TSDB', 'tsdb', async () => {
      const d = (await api<TSDBStatus>('status/tsdb')).data;
      const hs = d.headStats;
      const top = (title: string, xs: { name: string; value: number }[]) => h('div', { class: 'top' }, h('h3', {}, title), table(['Name', 'Count'], xs.map((x) => [x.name, String(x.value)])));
      return h(
        'div',
        {},
        table(
          ['Series', 'Label pairs', 'Chunks', 'Min time', 'Max time'],
          [[String(hs.numSeries), String(hs.numLabelPairs), String(hs.chunkCount), hs.minTime > 0 ? isoTime(hs.minTime) : '', hs.maxTime > 0 ? isoTime(hs.maxTime) : '']],
          'head-stats',
        ),
        h(
          'div',
          { class: 'tops' },
          top('Top metrics by series', d.seriesCountByMetricName),
          top('Top labels by value count', d.labelValueCountByLabelName),
          top('Top label pairs by series', d.seriesCountByLabelValuePair),
          top('Top labels by memory (bytes)', d.memoryInBytesByLabelName),
        ),
      );
    }),
    part('Flags', 'flags', async () => {
      const d = (await api<Record<string, string>>('status/flags')).data;
      return table(['Flag', 'Value'], Object.keys(d).sort().map((k) => [`--${k}`, d[k]]), 'kv');
    }),
    part('Configuration', 'config', async () => {
      const d = (await api<{ yaml: string }>('status/config')).data;
      return h('pre', { class: 'config' }, hideSecrets(d.yaml));
    }),
  ]);
  root.replaceChildren(h('h1', {}, 'Status'), ...parts);
}
