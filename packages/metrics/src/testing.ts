/**
 * Test helpers (the `@vime/metrics/testing` entry): open a report in headless Chromium, collect console
 * errors, count rendered charts and take a screenshot. Needs `playwright-core` and a Chromium binary
 * (Debian: `apt-get install chromium`, which provides /usr/bin/chromium).
 *
 * @module @vime/metrics/testing
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ConfigError, VimeError } from '@vime/core';

/** Where Debian's Chromium is. */
export const DEFAULT_CHROMIUM = '/usr/bin/chromium';

/** Flags for a quiet, offline, throwaway browser. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Runs in the page (kept as source text: this package is type-checked without DOM types). */
const INSPECT_PAGE = `(() => {
  const svgs = [...document.querySelectorAll('svg')];
  const drawn = (svg) =>
    [...svg.querySelectorAll('path, rect, circle, line, polyline')].some((el) => {
      const box = el.getBBox();
      return box.width > 0 || box.height > 0;
    });
  return {
    svgCount: svgs.length,
    emptySvgCount: svgs.filter((s) => !drawn(s)).length,
    svgSizes: svgs.map((s) => {
      const r = s.getBoundingClientRect();
      return { width: r.width, height: r.height };
    }),
    title: document.title,
    text: document.body.innerText,
    sections: [...document.querySelectorAll('section[data-section]')].map((el) => ({
      id: el.dataset.section,
      title: el.querySelector('h2')?.textContent ?? '',
      empty: el.dataset.empty === 'true',
      textLength: el.innerText.trim().length,
      charts: el.querySelectorAll('svg').length,
      tables: el.querySelectorAll('table').length,
    })),
    series: [...document.querySelectorAll('svg path.series')].map((el) => {
      const d = el.getAttribute('d') ?? '';
      const box = el.getBBox();
      return {
        chart: el.closest('svg')?.getAttribute('aria-label') ?? '',
        name: el.dataset.series ?? '',
        segments: (d.match(/M/g) ?? []).length,
        points: (d.match(/[ML]/g) ?? []).length,
        width: box.width,
      };
    }),
    intervalsDrawn: [...document.querySelectorAll('svg .ci')].filter((el) => {
      const box = el.getBBox();
      return box.width > 0 || box.height > 0;
    }).length,
    markers: [...document.querySelectorAll('svg g.marker text')].map((el) => el.textContent ?? ''),
    standInLabel: document.querySelector('[data-stand-in="true"]')?.textContent ?? null,
    scrollWidth: document.documentElement.scrollWidth,
    tables: [...document.querySelectorAll('table')].map((el) => ({
      section: el.closest('section[data-section]')?.dataset.section ?? '',
      right: el.getBoundingClientRect().right,
      scrollWidth: el.scrollWidth,
      clientWidth: el.clientWidth,
    })),
  };
})()`;

/** Options of rendering a report in headless Chromium. */
export interface RenderOptions {
  /** Where to write a full-page PNG screenshot (folders are created). */
  screenshotPath?: string | undefined;
  /** Chromium binary (default `/usr/bin/chromium`). */
  executablePath?: string | undefined;
  viewport?: { width: number; height: number } | undefined;
  /** Overall limit in milliseconds (default 30,000). */
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** What rendering a report found: console errors, charts and a screenshot. */
export interface RenderResult {
  /** `console.error` messages and uncaught page errors. */
  consoleErrors: string[];
  /** Requests the page tried to make (a self-contained report makes none). */
  requests: string[];
  /** `<svg>` elements in the page. */
  svgCount: number;
  /** `<svg>` elements that drew nothing (no path, rect, circle, line or polyline with size). */
  emptySvgCount: number;
  /** Rendered size of each `<svg>` (CSS pixels). */
  svgSizes: Array<{ width: number; height: number }>;
  title: string;
  /** Visible text of the page. */
  text: string;
  /** The report's `<section data-section>` elements: empty ones show only a "not in this run" note. */
  sections: Array<{
    id: string;
    title: string;
    empty: boolean;
    textLength: number;
    charts: number;
    tables: number;
  }>;
  /** Every drawn line (`path.series`): `segments` > 1 means the line is broken. */
  series: Array<{ chart: string; name: string; segments: number; points: number; width: number }>;
  /** Confidence-interval bands and bars with a visible size. */
  intervalsDrawn: number;
  /** Text of the marked points (peaks, this run's engine count). */
  markers: string[];
  /** Text of the stand-in engine banner, when the page has one. */
  standInLabel: string | null;
  /** The page's width as laid out (`document.documentElement.scrollWidth`): over the viewport, it scrolls sideways. */
  scrollWidth: number;
  /** Each table: its section, its right edge and its own scroll and client widths (CSS pixels). */
  tables: Array<{ section: string; right: number; scrollWidth: number; clientWidth: number }>;
  screenshotPath?: string | undefined;
}

/**
 * Load `html` in headless Chromium (a fresh profile, no network) and report what rendered. Throws
 * `ConfigError` when the browser binary or `playwright-core` is missing.
 */
export async function renderHtmlInChromium(html: string, options: RenderOptions = {}): Promise<RenderResult> {
  const executablePath = options.executablePath ?? DEFAULT_CHROMIUM;
  if (!existsSync(executablePath)) {
    throw new ConfigError(
      `no Chromium at ${executablePath}; install it (Debian: apt-get install -y chromium) or pass executablePath`,
    );
  }
  let chromium: typeof import('playwright-core').chromium;
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (cause) {
    throw new ConfigError(
      'renderHtmlInChromium needs the playwright-core package; add it to your devDependencies',
      {
        cause,
      },
    );
  }
  const timeoutMs = options.timeoutMs ?? 30_000;
  const profile = mkdtempSync(join(tmpdir(), 'vime-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: options.viewport ?? { width: 900, height: 900 },
    timeout: timeoutMs,
  });
  const abort = () => void context.close();
  options.signal?.addEventListener('abort', abort, { once: true });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(timeoutMs);
    const consoleErrors: string[] = [];
    const requests: string[] = [];
    page.on('console', (msg) => {
      if (msg.type() === 'error') consoleErrors.push(msg.text());
    });
    page.on('pageerror', (err) => consoleErrors.push(err.message));
    await page.route('**/*', (route) => {
      requests.push(route.request().url());
      return route.abort();
    });
    await page.setContent(html, { waitUntil: 'load' });
    const facts = (await page.evaluate(INSPECT_PAGE)) as Omit<RenderResult, 'consoleErrors' | 'requests'>;
    const result: RenderResult = { consoleErrors, requests, ...facts };
    if (options.screenshotPath) {
      mkdirSync(dirname(options.screenshotPath), { recursive: true });
      await page.screenshot({ path: options.screenshotPath, fullPage: true });
      result.screenshotPath = options.screenshotPath;
    }
    if (options.signal?.aborted) throw new VimeError('aborted', 'renderHtmlInChromium was aborted');
    return result;
  } finally {
    options.signal?.removeEventListener('abort', abort);
    await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  }
}
