// Builds the UI into ../static: app.js and app.css, minified, and
// index.html. The output depends only on the sources and the locked
// package versions, so that `make ui-check` can compare it with the
// committed bundle.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';

const out = new URL('../static/', import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: { app: 'src/main.ts' },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
  outdir: out,
  legalComments: 'eof',
  charset: 'utf8',
  logLevel: 'warning',
});
copyFileSync('index.html', out + 'index.html');
