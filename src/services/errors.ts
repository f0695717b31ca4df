/** Errors of the embedded-server helpers (tests, benches and the demo start real servers). */
import { LaminarError } from '../common/errors.js';

export class ServiceError extends LaminarError {}
