/**
 * `laminar/manager`: the rollout manager, for a process that embeds it (tests, a demo, a custom
 * launcher). In production it runs as `laminar manager`: one leader per job, standbys anywhere.
 */
export { Manager, type ManagerOptions, type ManagerStatus, type MemberHealth } from './manager.js';
