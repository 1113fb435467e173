/**
 * `@vime/metrics`: pure computation (no files, no network, no processes, no globals): pass@k, percentiles,
 * rollout and engine metrics from records, log and Prometheus text parsers, run reports. The IO is on the
 * subpaths: `@vime/metrics/sinks` writes metric files, `@vime/metrics/scrape` reads engines over HTTP.
 *
 * @module @vime/metrics
 */
export {
  type CapacityAnswer,
  type CapacityCurve,
  type CapacityPoint,
  capacityCurve,
  capacityFor,
  modelFor,
  type RunPrediction,
  type SimulateRunOptions,
  simulateRun,
} from './capacity/curve.js';
export {
  type FitTarget,
  type FittedRun,
  fitRun,
  type ModelDefaults,
  observationFrom,
  REFERENCE_DEFAULTS,
  type RunObservation,
  RunObservationSchema,
  WorkloadSchema,
} from './capacity/fit.js';
export {
  type EngineModel,
  type RolloutPhaseResult,
  type StepModel,
  type StepPrediction,
  simulateRolloutPhase,
  simulateStep,
} from './capacity/model.js';
export { REFERENCE_BENCHMARK, type ReferenceRunKey } from './capacity/reference.js';
export {
  type CompareRun,
  type ConfigDifference,
  configDifferences,
  renderCompareHtml,
} from './compare.js';
export { REPORT_SECTIONS, renderHtmlReport } from './html.js';
export {
  METRICS_FILE_SCHEMA,
  type MetricsFile,
  type MetricsFileExtras,
  parseMetricsFile,
  reportInputFromMetrics,
  resultOfRecord,
} from './metrics-file.js';
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
  loadPointsOf,
  type PromHistogram,
  type PromParse,
  type PromSample,
  parsePrometheusText,
  type ScrapeSeries,
} from './prometheus.js';
export {
  type QualityRecord,
  RUN_RECORD_SCHEMA,
  type RunRecord,
  runReport,
  type StepRecord,
} from './report.js';
export type {
  CapacityInput,
  EngineInput,
  EngineKind,
  RunReportInput,
  RunSetting,
  StepPhase,
} from './report-input.js';
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
  failuresByCause,
  type PhaseTiming,
  phaseTiming,
  type RewardHistogram,
  rewardHistogram,
  type Staleness,
  staleness,
  type TaskRow,
  type TokenAuditRecord,
  type TokenAuditStep,
  taskTable,
  tokenAuditRecord,
  type Workload,
  workload,
} from './run-sections.js';
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
export {
  type AgentLine,
  agentResults,
  type PerfStep,
  parseSlimePerfLog,
  type SlimePerfLog,
} from './slime-perf.js';
export { sparkline } from './sparkline.js';
export {
  rolloutSpecDecode,
  type SpecDecodeCounts,
  type SpecDecodeRecord,
  type StepSpecDecode,
  sglangSpecAcceptLength,
  specDecodeLine,
  specDecodeRecord,
  specDecodeScalars,
  stepSpecDecode,
  sumSpecDecode,
  VLLM_SPEC_COUNTERS,
  vllmSpecDecodeDelta,
} from './spec-decode.js';
export { type VersionedRow, type WeightStaleness, weightStaleness } from './staleness.js';
export { renderTerminalReport } from './terminal.js';
export { type EngineTimeline, engineTimeline } from './timeline.js';
export { type TokenStaleness, type TokenStalenessStep, tokenStaleness } from './token-staleness.js';
export {
  rolloutToolCalls,
  type StepToolCallHealth,
  stepToolCallHealth,
  TOOL_CALL_ALARM_RATE,
  type ToolCallRecord,
  toolCallAlarm,
  toolCallLine,
  toolCallRecord,
} from './tool-health.js';
export {
  type AdvantageSpread,
  type RolloutShape,
  rolloutShapeOf,
  rowFigures,
  type ShapeRecord,
  type StepShape,
  shapeRecord,
  TRAINER_METRICS,
  type TrainerMetric,
  type TrainerRecord,
  type TrainerStepInput,
  trainerRecord,
} from './training.js';
