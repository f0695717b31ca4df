/**
 * `laminar`: the whole public API in one import. The same names are also available from the
 * component entry points (`laminar/relay`, `laminar/trainer`, `laminar/rollout`, `laminar/data`),
 * and the embedded servers and simulators from `laminar/testing`.
 */
export * from './common/errors.js';
export * from './relay/index.js';
export * from './trainer/index.js';
export * from './rollout/index.js';
export * from './data/index.js';
