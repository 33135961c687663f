// The query page: panels of an expression with a graph (query_range) or a
// table (query) of its result. The panels' state is kept in the URL.
import uPlot from 'uplot';
import type { EditorView } from '@codemirror/view';
import { api, APIError, h, notice, seriesName, isoTime } from './api';
import { newEditor } from './editor';

interface PanelState {
  expr: string;
  tab: 'graph' | 'table';
  range: string;
  end: string;
  step: string;
  stacked: boolean;
}

type Metric = Record<string, string>;
interface Histogram {
  count: string;
  sum: string;
}
interface RangeSeries {
  metric: Metric;
  values?: [number, string][];
  histograms?: [number, Histogram][];
}
interface InstantSample {
  metric: Metric;
  value?: [number, string];
  histogram?: [number, Histogram];
}
interface QueryData {
  resultType: 'matrix' | 'vector' | 'scalar' | 'string';
  result: any;
  stats?: { timings?: Record<string, number>; samples?: { totalQueryableSamples?: number; peakSamples?: number } };
}

const defaults: PanelState = { expr: '', tab: 'graph', range: '1h', end: '', step: '', stacked: false };

const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };

/** Parses a Prometheus duration such as 1h30m or 90s into seconds; NaN if it is not one. */
export function parseDuration(s: string): number {
  s = s.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const re = /(\d+)(ms|[smhdwy])/gy;
  let total = 0;
  let m: RegExpExecArray | null;
  let pos = 0;
  while ((m = re.exec(s))) {
    total += Number(m[1]) * units[m[2]];
    pos = re.lastIndex;
  }
  return pos === s.length && pos > 0 ? total : NaN;
}

/** Parses an end time: empty is now, else an RFC 3339 time or "YYYY-MM-DD HH:MM[:SS]" in UTC, or Unix seconds. */
export function parseEnd(s: string): number {
  s = s.trim();
  if (s === '') return Date.now() / 1000;
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  let iso = s.replace(' ', 'T');
  if (!/[zZ]|[+-]\d\d:?\d\d$/.test(iso)) iso += 'Z';
  const t = Date.parse(iso);
  return Number.isNaN(t) ? NaN : t / 1000;
}

function readState(): PanelState[] {
  const q = new URLSearchParams(location.search);
  const panels: PanelState[] = [];
  for (let i = 0; q.has(`g${i}.expr`); i++) {
    const tab = q.get(`g${i}.tab`);
    panels.push({
      expr: q.get(`g${i}.expr`) ?? '',
      tab: tab === 'table' || tab === '1' ? 'table' : 'graph',
      range: q.get(`g${i}.range_input`) || defaults.range,
      end: q.get(`g${i}.end_input`) ?? '',
      step: q.get(`g${i}.step_input`) ?? '',
      stacked: q.get(`g${i}.stacked`) === '1',
    });
  }
  return panels.length ? panels : [{ ...defaults }];
}

function writeState(panels: Panel[]) {
  const q = new URLSearchParams();
  panels.forEach((p, i) => {
    const s = p.state();
    q.set(`g${i}.expr`, s.expr);
    q.set(`g${i}.tab`, s.tab);
    q.set(`g${i}.range_input`, s.range);
    if (s.end) q.set(`g${i}.end_input`, s.end);
    if (s.step) q.set(`g${i}.step_input`, s.step);
    q.set(`g${i}.stacked`, s.stacked ? '1' : '0');
  });
  history.replaceState(null, '', `${location.pathname}?${q}`);
}

/** A color for series i of n, spread around the hue circle. */
function color(i: number): string {
  return `hsl(${(i * 137.508) % 360}, 65%, 45%)`;
}

function sampleValue(v: string): number | null {
  const x = Number(v);
  return Number.isFinite(x) ? x : null;
}

class Panel {
  readonly el: HTMLElement;
  private editor!: EditorView;
  private tab: 'graph' | 'table';
  private readonly rangeIn: HTMLInputElement;
  private readonly endIn: HTMLInputElement;
  private readonly stepIn: HTMLInputElement;
  private readonly stackedIn: HTMLInputElement;
  private readonly out: HTMLElement;
  private readonly messages: HTMLElement;
  private readonly statsEl: HTMLElement;
  private plot?: uPlot;
  private abort?: AbortController;
  private resizeObs?: ResizeObserver;

  constructor(
    s: PanelState,
    private readonly changed: () => void,
    remove: () => void,
  ) {
    this.tab = s.tab;
    const editorEl = h('div', { class: 'editor' });
    this.rangeIn = h('input', { class: 'range', value: s.range, size: '6', title: 'Range (e.g. 1h, 6h, 2d)', 'aria-label': 'range' });
    this.endIn = h('input', { class: 'end', value: s.end, placeholder: 'now', size: '20', title: 'End time (UTC: 2026-01-02 15:04:05, RFC 3339 or Unix seconds; empty: now)', 'aria-label': 'end time' });
    this.stepIn = h('input', { class: 'step', value: s.step, placeholder: 'auto', size: '6', title: 'Resolution (step, e.g. 15s; empty: range/250)', 'aria-label': 'resolution' });
    this.stackedIn = h('input', { type: 'checkbox', class: 'stacked', 'aria-label': 'stacked' });
    this.stackedIn.checked = s.stacked;
    this.out = h('div', { class: 'output' });
    this.messages = h('div', { class: 'messages' });
    this.statsEl = h('div', { class: 'stats' });
    const tabs = h('div', { class: 'tabs' });
    const tabButton = (name: 'graph' | 'table', label: string) => {
      const b = h('button', { class: `tab tab-${name}${this.tab === name ? ' active' : ''}`, type: 'button' }, label);
      b.addEventListener('click', () => {
        this.tab = name;
        tabs.querySelectorAll('.tab').forEach((x) => x.classList.toggle('active', x === b));
        this.changed();
        this.run();
      });
      return b;
    };
    tabs.append(tabButton('graph', 'Graph'), tabButton('table', 'Table'));
    const onInput = () => this.changed();
    for (const i of [this.rangeIn, this.endIn, this.stepIn]) {
      i.addEventListener('input', onInput);
      i.addEventListener('keydown', (e) => {
        if ((e as KeyboardEvent).key === 'Enter') this.run();
      });
    }
    this.stackedIn.addEventListener('change', () => {
      this.changed();
      this.run();
    });
    this.el = h(
      'section',
      { class: 'panel' },
      h('div', { class: 'expr-row' }, editorEl, h('button', { class: 'execute primary', type: 'button', onclick: () => this.run() }, 'Execute'), h('button', { class: 'remove', type: 'button', title: 'Remove panel', onclick: remove }, '×')),
      h(
        'div',
        { class: 'controls' },
        tabs,
        h('label', {}, 'Range ', this.rangeIn),
        h('label', {}, 'End ', this.endIn),
        h('label', {}, 'Resolution ', this.stepIn),
        h('label', {}, this.stackedIn, ' Stacked'),
      ),
      this.messages,
      this.statsEl,
      this.out,
    );
    this.editor = newEditor(editorEl, s.expr, () => this.run(), onInput);
  }

  state(): PanelState {
    return {
      expr: this.editor.state.doc.toString().trim(),
      tab: this.tab,
      range: this.rangeIn.value.trim(),
      end: this.endIn.value.trim(),
      step: this.stepIn.value.trim(),
      stacked: this.stackedIn.checked,
    };
  }

  destroy() {
    this.abort?.abort();
    this.plot?.destroy();
    this.resizeObs?.disconnect();
    this.editor.destroy();
  }

  private fail(msg: string) {
    this.messages.replaceChildren(notice('error', msg));
  }

  async run() {
    const s = this.state();
    this.changed();
    this.messages.replaceChildren();
    this.statsEl.replaceChildren();
    this.el.dataset.state = 'running';
    if (!s.expr.trim()) {
      this.out.replaceChildren();
      this.el.dataset.state = 'empty';
      return;
    }
    const range = parseDuration(s.range);
    const end = parseEnd(s.end);
    if (!(range > 0)) return this.fail(`invalid range "${s.range}": use a duration such as 1h or 30m`);
    if (Number.isNaN(end)) return this.fail(`invalid end time "${s.end}": use 2026-01-02 15:04:05 (UTC), RFC 3339 or Unix seconds`);
    let step = s.step ? parseDuration(s.step) : Math.max(Math.floor(range / 250), 1);
    if (!(step > 0)) return this.fail(`invalid resolution "${s.step}": use a duration such as 15s`);
    this.abort?.abort();
    const abort = (this.abort = new AbortController());
    const started = performance.now();
    try {
      const params: Record<string, string> = { query: s.expr, stats: 'all' };
      let answer;
      if (this.tab === 'graph') {
        Object.assign(params, { start: String(end - range), end: String(end), step: String(step) });
        answer = await api<QueryData>('query_range', params, abort.signal);
      } else {
        params.time = String(end);
        answer = await api<QueryData>('query', params, abort.signal);
      }
      const answered = answer.receivedAt;
      for (const w of answer.warnings) this.messages.append(notice('warning', w));
      for (const i of answer.infos) this.messages.append(notice('info', i));
      let rendered: number;
      if (this.tab === 'graph') rendered = await this.graph(answer.data, end - range, end, step, s.stacked);
      else rendered = this.table(answer.data);
      const renderMs = rendered - answered;
      this.el.dataset.renderMs = renderMs.toFixed(1);
      this.stats(answer.data, answered - started, renderMs, this.tab === 'graph' ? step : 0);
      this.el.dataset.state = 'done';
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      this.out.replaceChildren();
      this.plot?.destroy();
      this.plot = undefined;
      this.el.dataset.state = 'error';
      const err = e as APIError;
      this.fail(err.errorType ? `Error executing query (${err.errorType}${err.status ? ', HTTP ' + err.status : ''}): ${err.message}` : String(e));
    }
  }

  private stats(d: QueryData, loadMs: number, renderMs: number, step: number) {
    const parts = [`Load time: ${Math.round(loadMs)} ms`, `Render time: ${renderMs.toFixed(1)} ms`];
    if (step) parts.push(`Resolution: ${step}s`);
    const n = Array.isArray(d.result) ? d.result.length : 1;
    parts.push(`Result series: ${n}`);
    const samples = d.stats?.samples?.totalQueryableSamples;
    if (samples !== undefined) parts.push(`Samples: ${samples.toLocaleString('en')}`);
    const evalSec = d.stats?.timings?.evalTotalTime;
    if (evalSec !== undefined) parts.push(`Evaluation: ${(evalSec * 1000).toFixed(1)} ms`);
    this.statsEl.textContent = parts.join(' · ');
    this.statsEl.dataset.samples = String(samples ?? '');
  }

  /** Draws a query_range answer; resolves to the time its first draw ended. */
  private graph(d: QueryData, start: number, end: number, step: number, stacked: boolean): Promise<number> | number {
    this.plot?.destroy();
    this.plot = undefined;
    this.out.replaceChildren();
    if (d.resultType !== 'matrix') {
      this.fail(`a graph needs a range vector result; the query returned a ${d.resultType}`);
      return performance.now();
    }
    const series = d.result as RangeSeries[];
    if (series.length === 0) {
      this.out.append(notice('empty', 'Empty query result'));
      return performance.now();
    }
    // Range results are aligned on start + k*step.
    const n = Math.floor((end - start) / step + 1e-9) + 1;
    const xs = new Float64Array(n);
    for (let i = 0; i < n; i++) xs[i] = start + i * step;
    const ys: (number | null)[][] = [];
    let histograms = 0;
    for (const s of series) {
      const col: (number | null)[] = new Array(n).fill(null);
      for (const [t, v] of s.values ?? []) {
        const i = Math.round((t - start) / step);
        if (i >= 0 && i < n) col[i] = sampleValue(v);
      }
      for (const [t, hg] of s.histograms ?? []) {
        const i = Math.round((t - start) / step);
        if (i >= 0 && i < n) col[i] = sampleValue(hg.count);
        histograms++;
      }
      ys.push(col);
    }
    if (histograms) this.messages.append(notice('info', 'native histograms are drawn by their count'));
    const shown = ys;
    if (stacked) {
      const acc: (number | null)[] = new Array(n).fill(null);
      for (let k = 0; k < ys.length; k++) {
        const col = ys[k];
        shown[k] = col.map((v, i) => {
          if (v === null) return null;
          acc[i] = (acc[i] ?? 0) + v;
          return acc[i];
        });
      }
    }
    const opts: uPlot.Options = {
      width: Math.max(this.out.clientWidth, 300),
      height: 320,
      cursor: { drag: { x: true, y: false } },
      legend: { live: true },
      scales: { x: { time: true } },
      series: [
        { label: 'Time', value: (_u, v) => (v == null ? '' : isoTime(v * 1000)) },
        ...series.map((s, i) => ({
          label: seriesName(s.metric),
          stroke: color(i),
          width: 1.25,
          spanGaps: false,
          fill: stacked ? color(i).replace('hsl', 'hsla').replace(')', ', 0.35)') : undefined,
          points: { show: false },
        })),
      ],
      bands: stacked ? series.slice(1).map((_, i) => ({ series: [i + 2, i + 1] as [number, number] })) : undefined,
      axes: [{}, { size: 70 }],
    };
    // uPlot draws in a microtask after it is made; the draw hook says when.
    const drawn = new Promise<number>((resolve) => (opts.hooks = { draw: [() => resolve(performance.now())] }));
    let ymax = -Infinity;
    for (const col of shown) for (const v of col) if (v !== null && v > ymax) ymax = v;
    const box = h('div', { class: 'graph', 'data-series': String(series.length), 'data-points': String(n), 'data-ymax': String(ymax) });
    this.out.append(box);
    this.plot = new uPlot(opts, [xs as unknown as number[], ...shown] as uPlot.AlignedData, box);
    this.resizeObs?.disconnect();
    this.resizeObs = new ResizeObserver(() => this.plot?.setSize({ width: Math.max(this.out.clientWidth, 300), height: 320 }));
    this.resizeObs.observe(this.out);
    return drawn;
  }

  /** Shows a query answer as a table and returns when it is in the page. */
  private table(d: QueryData): number {
    this.plot?.destroy();
    this.plot = undefined;
    const rows: HTMLElement[] = [];
    const row = (name: string, value: string) => h('tr', {}, h('td', { class: 'series' }, name), h('td', { class: 'value' }, value));
    switch (d.resultType) {
      case 'vector':
        for (const s of d.result as InstantSample[]) {
          if (s.value) rows.push(row(seriesName(s.metric), s.value[1]));
          else if (s.histogram) rows.push(row(seriesName(s.metric), `count: ${s.histogram[1].count}, sum: ${s.histogram[1].sum}`));
        }
        break;
      case 'matrix':
        for (const s of d.result as RangeSeries[]) {
          const vals = (s.values ?? []).map(([t, v]) => `${v} @${t}`);
          rows.push(row(seriesName(s.metric), vals.join('\n')));
        }
        break;
      case 'scalar':
      case 'string':
        rows.push(row(d.resultType, (d.result as [number, string])[1]));
        break;
    }
    this.out.replaceChildren(rows.length ? h('table', { class: 'result' }, h('tbody', {}, ...rows)) : notice('empty', 'Empty query result'));
    return performance.now();
  }
}

/** Renders the query page into root. */
export function queryPage(root: HTMLElement) {
  const panels: Panel[] = [];
  const list = h('div', { class: 'panels' });
  const save = () => writeState(panels);
  const add = (s: PanelState, run: boolean) => {
    const p: Panel = new Panel(s, save, () => {
      if (panels.length === 1) return;
      panels.splice(panels.indexOf(p), 1);
      p.destroy();
      p.el.remove();
      save();
    });
    panels.push(p);
    list.append(p.el);
    if (run && s.expr) p.run();
  };
  for (const s of readState()) add(s, true);
  root.replaceChildren(list, h('button', { class: 'add-panel', type: 'button', onclick: () => (add({ ...defaults }, false), save()) }, 'Add panel'));
}
