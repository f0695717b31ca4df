/**
 * Loading and unloading LoRA adapters over an engine's HTTP API, the part SGLang's and vLLM's
 * clients share: one POST whose refusal is ERR_ENGINE_RELOAD with the engine's own reason (the
 * adapter stays unloaded, or loaded, as it was). docs/reference/engine-http.md and vllm.md give
 * each server's fields.
 */
import { ErrorCodes } from '../common/errors.js';
import { EngineError, engineFetch, errorMessage, readText } from './http.js';

export interface AdapterChange {
  url: string;
  body: Record<string, unknown>;
  /** "LoRA adapter <name> from <dir>", for the error. */
  what: string;
  timeoutMs: number;
  /** Whether the answer says the change was made (SGLang: `success: true`; vLLM: a 2xx status). */
  accepted(response: Response, body: unknown): boolean;
}

/** The answer as JSON, or null (vLLM answers a plain text line on success). */
function jsonOrNull(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null;
  }
}

export async function changeAdapter(change: AdapterChange): Promise<void> {
  const response = await engineFetch(change.url, { body: change.body, timeoutMs: change.timeoutMs });
  const text = await readText(response, change.url);
  const body = jsonOrNull(text);
  if (change.accepted(response, body)) return;
  // SGLang: {success: false, error_message}; vLLM: {error: {message}}.
  const reason = (body as { error_message?: unknown } | null)?.error_message;
  const message = typeof reason === 'string' && reason !== '' ? reason : errorMessage(text);
  throw new EngineError(ErrorCodes.ENGINE_RELOAD, `the engine refused ${change.what}: HTTP ${response.status}: ${message}`, {
    details: { status: response.status, url: change.url },
  });
}
