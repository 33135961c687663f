// Shale's web UI: one page per path under the route prefix, all built by
// this script from the HTTP API's answers.
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { h } from './api';
import { queryPage } from './query';
import { explorePage } from './explore';
import { statusPage } from './status';
import { storagePage } from './storage';
import { rulesPage, alertsPage } from './rules';

const pages: [string, string, (root: HTMLElement) => void | Promise<void>][] = [
  ['query', 'Query', queryPage],
  ['explore', 'Explore', explorePage],
  ['alerts', 'Alerts', alertsPage],
  ['rules', 'Rules', rulesPage],
  ['status', 'Status', statusPage],
  ['storage', 'Storage', storagePage],
];

function main() {
  const name = location.pathname.replace(/\/+$/, '').split('/').pop() || 'query';
  const page = pages.find(([p]) => p === name) ?? pages[0];
  const nav = h(
    'nav',
    {},
    h('a', { class: 'brand', href: 'query' }, 'Shale'),
    ...pages.map(([p, title]) => h('a', { href: p, class: p === page[0] ? 'active' : '' }, title)),
  );
  const root = h('main', { id: 'page', 'data-page': page[0] });
  document.title = `${page[1]} · Shale`;
  document.body.replaceChildren(nav, root);
  void page[2](root);
}

main();
