/**
 * `@vime/metrics/scrape`: the engine metrics read over the network. The parsing of what it reads, and the
 * windows and reports computed from it, are in the package root.
 *
 * @module @vime/metrics/scrape
 */
export {
  type PrometheusScrape,
  type ScrapeOptions,
  scrapeEngines,
  scrapePrometheus,
} from './prometheus.js';
