// The storage page: what the object store, the LSM and the caches are
// doing, from /api/v1/status/storage.
import { api, h, notice, table, bytes, isoTime } from './api';

interface Table {
  id: string;
  bytes: number;
  entries: number;
}
interface Level {
  name: string;
  tables: Table[];
  bytes: number;
}
interface Partition {
  start: number;
  end: number;
  state: string;
  series?: number;
}
interface Kind {
  kind: string;
  total: number;
  perMinute: number;
  monthlyCostUSD: number;
  pricePer1000USD: number;
}
interface Tier {
  tier: string;
  hits: number;
  misses: number;
  hitRatio: number | null;
  bytes: number;
  capacityBytes: number;
  entries: number;
}
/** The answer of GET /api/v1/status/storage (docs/http-api.md). */
export interface StorageStatus {
  mode: string;
  objectStore: string;
  manifest: number;
  writerEpoch: number;
  lastSeq: number;
  fenced: boolean;
  readerLastRefresh?: string;
  readerLagSeconds?: number;
  health: { failing: boolean; since?: string; lastError?: string; lastPersist?: string };
  partitions: Partition[];
  levels: Level[];
  rangeTombstones: number;
  memtable: { bytes: number; entries: number; immutable: number };
  wal: { enabled: boolean; lastWALID: number; replayAfter: number; pendingObjects: number; pendingBytes: number };
  compaction: { running: boolean; total: number };
  requests: { windowSeconds: number; kinds: Kind[]; monthlyCostUSD: number };
  cache: Tier[];
}

const usd = (x: number) => `$${x < 10 ? x.toFixed(2) : x.toFixed(0)}`;

/** How often the page reloads its figures while it is visible, in ms. */
const refreshEvery = 15_000;

export async function storagePage(root: HTMLElement) {
  root.replaceChildren(h('h1', {}, 'Storage'), notice('info', 'Loading…'));
  await render(root);
  setInterval(() => {
    if (document.visibilityState === 'visible') void render(root);
  }, refreshEvery);
}

async function render(root: HTMLElement) {
  let s: StorageStatus;
  try {
    s = (await api<StorageStatus>('status/storage')).data;
  } catch (e) {
    root.replaceChildren(h('h1', {}, 'Storage'), notice('error', `Error loading the storage status: ${(e as Error).message}`));
    return;
  }
  // Keep the table lists that are open across a refresh.
  const open = new Set([...root.querySelectorAll('details[open]')].map((d) => d.getAttribute('data-level')));
  const kv = (rows: [string, string][], cls: string) => table(['', ''], rows, `kv ${cls}`);
  const state: [string, string][] = [
    ['Mode', s.mode],
    ['Object store', s.objectStore],
    ['Manifest', String(s.manifest)],
    ['Writer epoch', String(s.writerEpoch)],
    ['Last sequence number', String(s.lastSeq)],
    ['Store health', s.health.failing ? `failing since ${s.health.since}: ${s.health.lastError}` : 'ok'],
  ];
  if (s.health.lastPersist) state.push(['Last successful write', s.health.lastPersist]);
  if (s.mode === 'writer') state.push(['Fenced', s.fenced ? 'yes: a newer writer took over' : 'no']);
  if (s.readerLastRefresh) state.push(['Last refresh', s.readerLastRefresh], ['Lag', `${s.readerLagSeconds?.toFixed(1)} s`]);
  const req = s.requests;
  root.replaceChildren(
    h('h1', {}, 'Storage ', h('small', { class: 'updated' }, `as of ${new Date().toISOString().slice(11, 19)} UTC, every ${refreshEvery / 1000} s`)),
    h('section', { id: 'state' }, h('h2', {}, s.mode === 'writer' ? 'Writer' : 'Reader'), kv(state, 'state')),
    h(
      'section',
      { id: 'requests' },
      h('h2', {}, 'Object-store requests'),
      h('p', {}, `Rates over the last ${req.windowSeconds.toFixed(0)} s${req.windowSeconds < 55 ? ' (the server started recently: a short burst weighs heavily)' : ''}, and the monthly request cost those rates would have at S3 list prices (storage and transfer not included).`),
      table(
        ['Kind', 'Total', 'Per minute', 'Price per 1,000', 'Projected per month'],
        req.kinds.map((k) => [k.kind, h('span', { class: 'total', 'data-kind': k.kind }, String(k.total)), k.perMinute.toFixed(1), k.pricePer1000USD ? `$${k.pricePer1000USD}` : 'free', usd(k.monthlyCostUSD)]),
        'requests-table',
      ),
      h('p', { class: 'cost' }, `Projected request cost: ${usd(req.monthlyCostUSD)} a month`),
    ),
    h(
      'section',
      { id: 'cache' },
      h('h2', {}, 'Block cache'),
      table(
        ['Tier', 'Hits', 'Misses', 'Hit ratio', 'Size', 'Budget', 'Blocks'],
        s.cache.map((t) => [t.tier, h('span', { class: 'hits', 'data-tier': t.tier }, String(t.hits)), h('span', { class: 'misses', 'data-tier': t.tier }, String(t.misses)), t.hitRatio === null ? '–' : `${(t.hitRatio * 100).toFixed(1)} %`, bytes(t.bytes), t.capacityBytes ? bytes(t.capacityBytes) : 'off', String(t.entries)]),
        'cache-table',
      ),
    ),
    h(
      'section',
      { id: 'partitions' },
      h('h2', {}, `Partitions (${s.partitions.length})`),
      s.partitions.length
        ? table(
            ['Start', 'End', 'State', 'Series in memory'],
            s.partitions.map((p) => [isoTime(p.start), isoTime(p.end), p.state, p.series === undefined ? '' : String(p.series)]),
            'partitions-table',
          )
        : notice('empty', 'No partitions yet'),
    ),
    h(
      'section',
      { id: 'lsm' },
      h('h2', {}, 'LSM'),
      kv(
        [
          ['Memtable', `${bytes(s.memtable.bytes)}, ${s.memtable.entries} entries; ${s.memtable.immutable} waiting to flush`],
          ['WAL', s.wal.enabled ? `on; last object ${s.wal.lastWALID}, replay after ${s.wal.replayAfter}; ${s.wal.pendingObjects} objects (${bytes(s.wal.pendingBytes)}) waiting to be written` : 'off'],
          ['Compaction', `${s.compaction.running ? 'running' : 'idle'}; ${s.compaction.total} since start`],
          ['Range tombstones', String(s.rangeTombstones)],
        ],
        'lsm-state',
      ),
      table(
        ['Level', 'Tables', 'Size'],
        s.levels.map((l) => [l.name, String(l.tables.length), bytes(l.bytes)]),
        'levels-table',
      ),
      ...s.levels
        .filter((l) => l.tables.length)
        .map((l) => h('details', { 'data-level': l.name, open: open.has(l.name) }, h('summary', {}, `${l.name}: ${l.tables.length} tables`), table(['Table', 'Size', 'Entries'], l.tables.map((t) => [t.id, bytes(t.bytes), String(t.entries)])))),
    ),
  );
}
