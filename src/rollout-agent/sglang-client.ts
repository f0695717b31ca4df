/**
 * SGLang's HTTP API, the subset a rollout agent needs (docs/reference/engine-http.md gives the
 * fields and the SGLang release they were read from). The reference engine
 * (python/src/laminar/testing/engine) serves the same subset; nothing here knows which of the two
 * answers.
 *
 * Not called on purpose: `/update_weight_version`, which aborts every request in flight.
 */
import { ErrorCodes } from '../common/errors.js';
import type { EngineClient, EngineLoadSample, GenerateHandlers, GenerateRequest, GenerateResult, PauseMode, ServerInfo } from './engine-client.js';
import { EngineError, engineFetch, engineHealthy, engineJson, enginePost, errorMessage, protocolError, readText, streamEnded, streamedEvents } from './http.js';
import { meanOf, parsePrometheusText, sumOf } from './prometheus-text.js';
import { shapesMismatch, tensorShapes, type TensorShapes } from './weights-manifest.js';
import { ToolMessageIds } from './chat-tokens.js';
import { changeAdapter } from './lora-adapters.js';

/** SGLang's Prometheus names (python/sglang/srt/metrics/collector.py). */
const METRICS = {
  kvUsed: 'sglang:token_usage',
  running: 'sglang:num_running_reqs',
  waiting: 'sglang:num_queue_reqs',
  throughput: 'sglang:gen_throughput',
} as const;
const METRIC_NAMES = new Set<string>(Object.values(METRICS));

interface StreamChunk {
  output_ids?: unknown;
  meta_info?: {
    finish_reason?: { type?: unknown; message?: unknown } | null;
    completion_tokens?: unknown;
    output_token_logprobs?: unknown;
    weight_version?: unknown;
  };
}

export class SglangClient implements EngineClient {
  readonly kind = 'sglang';
  readonly url: string;
  /** The tensors of the version in service, once known (weights-manifest.ts says why). */
  private served: TensorShapes | null = null;
  private toolMessages: ToolMessageIds | null = null;

  constructor(
    url: string,
    private readonly options: { requestTimeoutMs?: number; reloadTimeoutMs?: number } = {},
  ) {
    this.url = url.replace(/\/+$/, '');
  }

  health(signal?: AbortSignal): Promise<boolean> {
    return engineHealthy(`${this.url}/health`, signal);
  }

  async serverInfo(): Promise<ServerInfo> {
    const info = (await engineJson(`${this.url}/get_server_info`, { timeoutMs: 10_000 })) as Record<string, unknown> | null;
    // Older releases give max_total_num_tokens at the top; newer ones per scheduler in internal_states.
    const states = Array.isArray(info?.internal_states) ? (info.internal_states as Record<string, unknown>[]) : [];
    const capacity = [info?.max_total_num_tokens, ...states.map((s) => s.max_total_num_tokens)].find((v): v is number => typeof v === 'number' && v > 0);
    const maxRunning = [info?.max_running_requests, ...states.map((s) => s.max_running_requests)].find(
      (v): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v > 0,
    );
    const version = typeof info?.version === 'string' ? ` ${info.version}` : '';
    const model = typeof info?.model_path === 'string' ? ` (${info.model_path})` : '';
    return { kvCapacityTokens: capacity ?? null, maxRunning: maxRunning ?? null, description: `sglang${version}${model}` };
  }

  async generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {
    const url = `${this.url}/generate`;
    const sampling: Record<string, unknown> = {
      max_new_tokens: request.maxNewTokens,
      temperature: request.sampling.temperature,
      top_p: request.sampling.topP,
      top_k: request.sampling.topK,
      ignore_eos: request.sampling.ignoreEos,
    };
    if (request.sampling.stopTokenIds.length > 0) sampling.stop_token_ids = request.sampling.stopTokenIds;
    if (request.sampling.seed !== null) sampling.sampling_seed = request.sampling.seed;
    const body: Record<string, unknown> = { rid: request.rid, input_ids: request.inputIds, sampling_params: sampling, stream: true, return_logprob: true };
    // Larger first, as SGLang orders with --enable-priority-scheduling (and without
    // --schedule-low-priority-values-first); a server without priority scheduling ignores it.
    if (request.priority != null) body.priority = request.priority;
    // SGLang's field is named for a path but holds the adapter's name (as loaded).
    if (request.lora != null) body.lora_path = request.lora;
    const response = await enginePost(url, {
      body,
      signal: handlers.signal,
      timeoutMs: this.options.requestTimeoutMs ?? 24 * 3600_000,
    });
    const what = `generate ${request.rid}`;
    let received = 0;
    let weightVersion: string | null = null;
    for await (const event of streamedEvents(response, url, what, handlers.signal)) {
      const meta = (event as StreamChunk).meta_info ?? {};
      if (typeof meta.weight_version === 'string') weightVersion = meta.weight_version;
      const fresh = newTokens(meta, received, url);
      if (fresh.tokens.length > 0) {
        received += fresh.tokens.length;
        handlers.onTokens(fresh.tokens, fresh.logprobs, weightVersion);
      }
      const finish = meta.finish_reason;
      if (finish) return { finishReason: finishReasonOf(finish.type), weightVersion };
    }
    throw streamEnded(what);
  }

  async loadWeights(dir: string, version: number): Promise<void> {
    const next = await this.checkedShapes(dir, version);
    const url = `${this.url}/update_weights_from_disk`;
    const response = await engineFetch(url, {
      body: { model_path: dir, weight_version: String(version), abort_all_requests: false },
      timeoutMs: this.options.reloadTimeoutMs ?? 600_000,
    });
    const text = await readText(response, url);
    let body: { success?: unknown; message?: unknown } | null = null;
    try {
      body = JSON.parse(text) as { success?: unknown; message?: unknown };
    } catch {
      // a proxy's or a crashed handler's page: reported below with the status
    }
    if (response.ok && body?.success === true) {
      this.served = next;
      return;
    }
    const message = typeof body?.message === 'string' ? body.message : errorMessage(text);
    throw new EngineError(ErrorCodes.ENGINE_RELOAD, `the engine refused version ${version} from ${dir}: ${message}`, {
      details: { status: response.status, version, dir },
    });
  }

  /** `/load_lora_adapter {lora_name, lora_path}`: `{success, error_message, loaded_adapters}`, 400 when refused. */
  async loadLoraAdapter(name: string, dir: string): Promise<void> {
    await this.changeAdapter('/load_lora_adapter', { lora_name: name, lora_path: dir }, `LoRA adapter ${name} from ${dir}`);
  }

  /** `/unload_lora_adapter {lora_name}`: answers once no running request uses the adapter (SGLang defers it). */
  async unloadLoraAdapter(name: string): Promise<void> {
    await this.changeAdapter('/unload_lora_adapter', { lora_name: name }, `the unload of LoRA adapter ${name}`);
  }

  private changeAdapter(path: string, body: Record<string, unknown>, what: string): Promise<void> {
    return changeAdapter({
      url: `${this.url}${path}`,
      body,
      what,
      timeoutMs: this.options.reloadTimeoutMs ?? 600_000,
      accepted: (response, answer) => response.ok && (answer as { success?: unknown } | null)?.success === true,
    });
  }

  /**
   * Refuses a version whose tensors could not all replace the served ones (SGLang would load it
   * and say `success`); the first time, the served ones are read from the engine's model path.
   */
  private async checkedShapes(dir: string, version: number): Promise<TensorShapes> {
    const refuse = (why: string): EngineError =>
      new EngineError(ErrorCodes.ENGINE_RELOAD, `version ${version} from ${dir} refused before loading: ${why}`, { details: { version, dir } });
    const next = await tensorShapes(dir).catch((err: unknown) => {
      throw refuse((err as Error).message);
    });
    this.served ??= await this.modelInfo()
      .then((info) => (typeof info?.model_path === 'string' ? tensorShapes(info.model_path) : null))
      .catch(() => null);
    const why = this.served && shapesMismatch(this.served, next);
    if (why) throw refuse(why);
    return next;
  }

  private async modelInfo(): Promise<{ model_path?: unknown; weight_version?: unknown } | null> {
    return (await engineJson(`${this.url}/get_model_info`, { timeoutMs: 10_000 })) as { model_path?: unknown; weight_version?: unknown } | null;
  }

  /** `/get_model_info`'s label (SGLang 0.5.23 has no `/get_weight_version`; older releases do). */
  async weightVersion(): Promise<string | null> {
    const body =
      (await this.modelInfo().catch(() => null)) ??
      ((await engineJson(`${this.url}/get_weight_version`, { timeoutMs: 10_000 })) as { weight_version?: unknown } | null);
    const v = body?.weight_version;
    return typeof v === 'string' ? v : typeof v === 'number' ? String(v) : null;
  }

  async pause(mode: PauseMode): Promise<void> {
    await engineJson(`${this.url}/pause_generation`, { body: { mode }, timeoutMs: 60_000 });
  }

  async resume(): Promise<void> {
    await engineJson(`${this.url}/continue_generation`, { body: {}, timeoutMs: 60_000 });
  }

  async abortAll(): Promise<void> {
    await engineJson(`${this.url}/abort_request`, { body: { rid: '', abort_all: true }, timeoutMs: 10_000 });
  }

  async load(): Promise<EngineLoadSample> {
    const response = await engineFetch(`${this.url}/metrics`, { timeoutMs: 5000 });
    const text = await readText(response, `${this.url}/metrics`);
    // Without --enable-metrics SGLang has no /metrics: the agent estimates the load itself.
    if (!response.ok) return { kvUsed: null, running: null, waiting: null, tokensPerSecond: null };
    const samples = parsePrometheusText(text, METRIC_NAMES);
    return {
      kvUsed: meanOf(samples, METRICS.kvUsed),
      running: sumOf(samples, METRICS.running),
      waiting: sumOf(samples, METRICS.waiting),
      tokensPerSecond: sumOf(samples, METRICS.throughput),
    };
  }

  async tokenize(text: string): Promise<number[]> {
    const body = (await engineJson(`${this.url}/tokenize`, { body: { prompt: text }, timeoutMs: 30_000 })) as { tokens?: unknown } | null;
    if (!Array.isArray(body?.tokens) || !body.tokens.every((t) => Number.isInteger(t)))
      throw protocolError(`${this.url}/tokenize`, 'no token ids in the answer');
    return body.tokens as number[];
  }

  /** `/tokenize` with `messages` (the reference engine's chat template; SGLang's own /tokenize takes only `prompt`). */
  toolMessageIds(content: string): Promise<number[]> {
    this.toolMessages ??= new ToolMessageIds(`${this.url}/tokenize`);
    return this.toolMessages.of(content);
  }

  /** How often tool messages were answered from the cache of their ids (hits) or asked of the engine (misses). */
  get toolMessageCache(): { hits: number; misses: number } {
    return { hits: this.toolMessages?.cache.hits ?? 0, misses: this.toolMessages?.cache.misses ?? 0 };
  }

  /** SGLang's `/detokenize` (`{tokens}` → `{text}`; needs a tokenizer, so not with `--skip-tokenizer-init`). */
  async detokenize(ids: readonly number[]): Promise<string> {
    const body = (await engineJson(`${this.url}/detokenize`, { body: { tokens: ids }, timeoutMs: 30_000 })) as { text?: unknown } | null;
    if (typeof body?.text !== 'string') throw protocolError(`${this.url}/detokenize`, 'no text in the answer');
    return body.text;
  }
}

/**
 * The tokens of a stream event that were not seen before. SGLang streams either the whole output
 * so far or only the new part (server flag `--incremental-streaming-output`); the event's
 * `completion_tokens` tells which: a list as long as the output so far is cumulative.
 */
function newTokens(meta: NonNullable<StreamChunk['meta_info']>, received: number, url: string): { tokens: number[]; logprobs: number[] } {
  const entries = meta.output_token_logprobs;
  if (entries === undefined || entries === null) return { tokens: [], logprobs: [] };
  if (!Array.isArray(entries)) throw protocolError(url, 'meta_info.output_token_logprobs is not a list (was return_logprob honoured?)');
  const total = typeof meta.completion_tokens === 'number' ? meta.completion_tokens : null;
  const cumulative = total !== null ? entries.length === total && entries.length >= received : entries.length >= received && received > 0;
  const fresh = cumulative ? entries.slice(received) : entries;
  const tokens: number[] = [];
  const logprobs: number[] = [];
  for (const e of fresh) {
    // [logprob, token id, token text or null]
    if (!Array.isArray(e) || typeof e[1] !== 'number')
      throw protocolError(url, `an output_token_logprobs entry is not [logprob, id, text]: ${JSON.stringify(e)}`);
    tokens.push(e[1]);
    // A missing logprob (some releases give none for a token) is stored as 0, never NaN.
    logprobs.push(typeof e[0] === 'number' && Number.isFinite(e[0]) ? e[0] : 0);
  }
  return { tokens, logprobs };
}

function finishReasonOf(type: unknown): GenerateResult['finishReason'] {
  if (type === 'length') return 'length';
  if (type === 'abort') return 'abort';
  return 'stop';
}
