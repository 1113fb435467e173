export { renderHtmlReport, renderTerminalReport } from './html.js';
export {
  type BatchPassAtK,
  countCorrect,
  type PassAtKInput,
  type PassCount,
  passAtK,
  passAtKBatch,
  passHatK,
  passHatKBatch,
} from './pass-at-k.js';
export {
  type PercentileMethod,
  type PercentileOptions,
  percentile,
  percentiles,
  QuantileSketch,
  type Summary,
  summarize,
} from './percentile.js';
export {
  type EngineSnapshot,
  type EngineWindow,
  engineSnapshot,
  engineWindow,
  histogramQuantile,
  type PrometheusScrape,
  type PromHistogram,
  type PromParse,
  type PromSample,
  parsePrometheusText,
  type ScrapeOptions,
  type ScrapeSeries,
  scrapeEngines,
  scrapePrometheus,
} from './prometheus.js';
export {
  type EngineInput,
  type RunRecord,
  type RunReportInput,
  runReport,
  type StepRecord,
} from './report.js';
export {
  type IncompleteGroup,
  type KEstimate,
  type RolloutInput,
  type RolloutMetrics,
  type RolloutMetricsOptions,
  type RolloutRecord,
  type RolloutTiming,
  rolloutMetrics,
  rolloutTiming,
} from './rollout.js';
export {
  type EngineSaturation,
  engineSaturation,
  type PeakMedian,
  type SaturationPoint,
} from './saturation.js';
export {
  type DecodeBatchSample,
  type DecodeColumns,
  type DecodeLogResult,
  parseSglangDecodeLog,
  SglangDecodeLogParser,
} from './sglang-log.js';
export { type PerfStep, parseSlimePerfLog, type SlimePerfLog } from './slime-perf.js';
export { sparkline } from './sparkline.js';
