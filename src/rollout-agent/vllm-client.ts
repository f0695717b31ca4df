/**
 * vLLM's HTTP API, the subset a rollout agent needs (docs/reference/vllm.md gives the fields, the
 * releases each part fits, and what was not run here).
 *
 * - Generation: the OpenAI-compatible `/v1/completions` with the prompt as token ids, streamed,
 *   with the sampled token's logprob and token ids (`return_tokens_as_token_ids`).
 * - Weights: vLLM has no "load a directory" endpoint of SGLang's kind; the agent calls
 *   `/collective_rpc` (dev mode, `VLLM_SERVER_DEV_MODE=1`) on laminar's worker extension
 *   (`--worker-extension-cls laminar.integrations.vllm_worker.LaminarWorkerExtension`), which
 *   reloads every worker from the version directory and reports the version it serves.
 * - Pause/resume for partial rollout: `/pause` and `/resume` (dev mode, releases that have them).
 * - Versions per request: vLLM 0.32 and earlier do not say which weights produced a token; the
 *   client does: tokens that arrive after a reload succeeded are the new version's (a token
 *   generated just before the pause and delivered after the reload counts as new: a trajectory may
 *   be said to mix versions when it did not, never the reverse).
 * - Seeds: vLLM's CPU build crashes its engine core when a seeded request is preempted and
 *   recomputed (`RuntimeError: CPU Generator does not use offset`: a pause in place, KV pressure),
 *   so requests to a CPU engine go unseeded (the extension says the device; docs/reference/vllm.md).
 */
import { ErrorCodes } from '../common/errors.js';
import type { EngineClient, EngineLoadSample, GenerateHandlers, GenerateRequest, GenerateResult, PauseMode, ServerInfo } from './engine-client.js';
import { EngineError, engineFetch, engineHealthy, engineJson, protocolError, readText, streamEnded, streamedEvents } from './http.js';
import { meanOf, parsePrometheusText, sumOf, type Sample } from './prometheus-text.js';
import { ToolMessageIds } from './chat-tokens.js';
import { changeAdapter } from './lora-adapters.js';

const METRICS = {
  /** The KV-cache share in use: renamed in vLLM 0.9.2 (gpu_cache_usage_perc before, gone in 0.12). */
  kvUsed: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
  generated: 'vllm:generation_tokens_total',
  cacheInfo: 'vllm:cache_config_info',
} as const;
const METRIC_NAMES = new Set<string>([...METRICS.kvUsed, METRICS.running, METRICS.waiting, METRICS.generated, METRICS.cacheInfo]);

/** The worker extension's methods (python/src/laminar/integrations/vllm_worker.py). */
const RELOAD_METHOD = 'laminar_reload_weights';
const VERSION_METHOD = 'laminar_weight_version';
const INFO_METHOD = 'laminar_engine_info';

/** What laminar_engine_info answers (null fields: the worker cannot tell; absent: an older extension). */
export interface EngineInfo {
  device: string | null;
  vllm: string | null;
  reload: string | null;
}

/** What laminar_reload_weights answers on each worker (python/src/laminar/integrations/vllm_worker.py). */
interface ReloadResult {
  success?: unknown;
  weight_version?: unknown;
  message?: unknown;
  weights_changed?: unknown;
}

/** Compares dotted release numbers ("0.16.0" < "0.33.1"); a suffix such as "rc1" or "+cu128" is ignored. */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string): number[] =>
    v
      .split(/[^0-9.]/, 1)[0]!
      .split('.')
      .map((x) => Number(x) || 0);
  const [pa, pb] = [parts(a), parts(b)];
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

interface CompletionChunk {
  choices?: {
    finish_reason?: string | null;
    logprobs?: { tokens?: unknown; token_logprobs?: unknown } | null;
    token_ids?: unknown;
  }[];
}

/** After a read of a session fact that got no answer, the next one asks again this much later (ms). */
const INFO_RETRY_MS = 5000;

/**
 * Whether a failed read still says something of the server, to be kept for the session: it
 * answered (a 4xx: it has no such endpoint or method; a body of another shape). A read that got
 * no answer (unreachable, timed out) or a 5xx (a server still starting, an engine core busy)
 * says nothing.
 */
function serverAnswered(err: unknown): boolean {
  if (!(err instanceof EngineError)) return true;
  if (err.code === ErrorCodes.ENGINE_UNAVAILABLE) return false;
  const status = err.details?.status;
  return !(typeof status === 'number' && status >= 500);
}

/**
 * A fact read from the server once per session (its release, its workers' device), which the
 * client acts on: whether to seed a request (vLLM-CPU cannot recompute a seeded one), whether to
 * label a version, whether a pause can keep requests in place. Kept once the server answered,
 * "unknown" included; a read that got no answer gives `unknown` this time and asks again after
 * `retryMs`, so that a moment's failure (the first requests to a server just started) does not
 * become the session's answer. A tier run saw that: the release and device read as unknown for
 * a whole file, the client then seeded requests to a CPU engine, and its engine core failed.
 */
class SessionFact<T> {
  private value: Promise<T> | null = null;
  private failedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly read: () => Promise<T>,
    private readonly unknown: T,
    private readonly retryMs: number,
  ) {}

  get(): Promise<T> {
    if (this.value !== null) return this.value;
    if (performance.now() - this.failedAt < this.retryMs) return Promise.resolve(this.unknown);
    const reading: Promise<T> = this.read().catch((err: unknown) => {
      if (!serverAnswered(err)) {
        this.failedAt = performance.now();
        if (this.value === reading) this.value = null;
      }
      return this.unknown;
    });
    this.value = reading;
    return reading;
  }

  /** Reads again at the next get (a new session may face another server). */
  forget(): void {
    this.value = null;
    this.failedAt = Number.NEGATIVE_INFINITY;
  }
}

export class VllmClient implements EngineClient {
  readonly kind = 'vllm';
  readonly url: string;
  /** The version every worker loaded last (loaded again when a reload fails halfway). */
  private loaded: { dir: string; version: number } | null = null;
  /** The workers' device and reload mode, read once per session (null: no extension, or not read yet). */
  private readonly info: SessionFact<EngineInfo | null>;
  /** The server's release (GET /version; null: it does not say, or not read yet). */
  private readonly releaseInfo: SessionFact<string | null>;
  private toolMessages: ToolMessageIds | null = null;
  /** The last generation-tokens counter read and when, for a rate. */
  private lastGenerated: { at: number; tokens: number } | null = null;

  constructor(
    url: string,
    private readonly options: {
      model: string;
      servedModelName?: string;
      reloadTimeoutMs?: number;
      /** After a read of the release or the workers' device that got no answer, how long until the next asks again (default 5 s). */
      infoRetryMs?: number;
    },
  ) {
    this.url = url.replace(/\/+$/, '');
    const retryMs = options.infoRetryMs ?? INFO_RETRY_MS;
    this.info = new SessionFact(() => this.engineInfo(), null, retryMs);
    this.releaseInfo = new SessionFact(
      async () => {
        const body = (await engineJson(`${this.url}/version`, { timeoutMs: 5000 })) as { version?: unknown } | null;
        return typeof body?.version === 'string' ? body.version : null;
      },
      null,
      retryMs,
    );
  }

  health(signal?: AbortSignal): Promise<boolean> {
    return engineHealthy(`${this.url}/health`, signal);
  }

  async serverInfo(): Promise<ServerInfo> {
    const samples = await this.metrics().catch(() => [] as Sample[]);
    // cache_config_info carries the block count and size as labels.
    const info = samples.find((s) => s.name === METRICS.cacheInfo)?.labels ?? {};
    const blocks = Number(info.num_gpu_blocks);
    const blockSize = Number(info.block_size);
    // kv_cache_size_tokens from 0.24; blocks × block size before.
    const sized = Number(info.kv_cache_size_tokens);
    const capacity = sized > 0 ? sized : blocks > 0 && blockSize > 0 ? blocks * blockSize : null;
    // A new session may face another vLLM (restarted, upgraded): its release and device are read again.
    this.releaseInfo.forget();
    this.info.forget();
    const release = await this.release();
    const workers = await this.workersInfo();
    const device = workers?.device ? ` on ${workers.device}` : '';
    const unseeded = workers?.device === 'cpu' ? ', requests unseeded (vLLM-CPU cannot recompute seeded requests)' : '';
    return { kvCapacityTokens: capacity, description: `vllm${release ? ` ${release}` : ''}${device}${unseeded}` };
  }

  /** The workers' device, vLLM release and reload mode, from the extension (every worker the same, else an error). */
  async engineInfo(): Promise<EngineInfo> {
    const results = await this.collectiveRpc(INFO_METHOD, [], 10_000);
    const first = results[0] as Partial<EngineInfo> | null | undefined;
    if (!first || typeof first !== 'object') throw protocolError(`${this.url}/collective_rpc`, `${INFO_METHOD} answered no object`);
    const field = (v: unknown): string | null => (typeof v === 'string' ? v : null);
    return { device: field(first.device), vllm: field(first.vllm), reload: field(first.reload) };
  }

  /** engineInfo, read once per session; null when the workers do not say (an extension without it) or were not reached. */
  private workersInfo(): Promise<EngineInfo | null> {
    return this.info.get();
  }

  async generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {
    const url = `${this.url}/v1/completions`;
    // Seeds are left out for a CPU engine (see the file's comment).
    const seeded = request.sampling.seed !== null && (await this.workersInfo())?.device !== 'cpu';
    const body = completionBody(request, this.options.servedModelName ?? this.options.model, seeded);
    const response = await engineFetch(url, { body, signal: handlers.signal, timeoutMs: 24 * 3600_000 });
    const what = `completions ${request.rid}`;
    for await (const event of streamedEvents(response, url, what, handlers.signal)) {
      const choice = (event as CompletionChunk).choices?.[0];
      if (!choice) continue;
      const { tokens, logprobs } = tokensOf(choice, url);
      // The version the workers serve now (see the file's comment); null before the first reload.
      const version = this.loaded === null ? null : String(this.loaded.version);
      if (tokens.length > 0) handlers.onTokens(tokens, logprobs, version);
      if (choice.finish_reason)
        return { finishReason: choice.finish_reason === 'length' ? 'length' : choice.finish_reason === 'abort' ? 'abort' : 'stop', weightVersion: version };
    }
    throw streamEnded(what);
  }

  async loadWeights(dir: string, version: number): Promise<void> {
    const results = await this.reload(dir, version);
    // One result per worker (tensor-parallel rank): every one must have loaded this version.
    const failed = results.find((r) => (r as ReloadResult | null)?.success !== true || r.weight_version !== String(version));
    if (results.length === 0 || failed !== undefined) {
      const message = typeof failed?.message === 'string' ? failed.message : results.length === 0 ? 'no worker answered' : 'a worker reports another version';
      // A worker that changed some weights before failing serves a mix: the version it served
      // before is loaded again, so that it serves one whole version.
      if (results.some((r) => (r as ReloadResult | null)?.weights_changed === true) && this.loaded)
        await this.reload(this.loaded.dir, this.loaded.version).catch(() => undefined);
      throw new EngineError(ErrorCodes.ENGINE_RELOAD, `vLLM refused version ${version} from ${dir}: ${message}`, { details: { version, dir } });
    }
    this.loaded = { dir, version };
    // The prefix cache holds KV computed with the previous weights. (Nothing runs here: the agent
    // drained the engine, or paused it in place, which preempted what ran.)
    await engineJson(`${this.url}/reset_prefix_cache`, { method: 'POST', timeoutMs: 60_000 }).catch(() => undefined);
    // From 0.27 the engine keeps a version label (GET /weight_info): laminar's version.
    const release = await this.release();
    if (release !== null && compareVersions(release, '0.27.0') >= 0)
      await engineJson(`${this.url}/update_weight_version`, { body: { new_version: String(version) }, timeoutMs: 10_000 }).catch(() => undefined);
  }

  /**
   * `/v1/load_lora_adapter {lora_name, lora_path}` (vLLM started with `--enable-lora` and
   * `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`): 200 with a text line, or an error object.
   */
  async loadLoraAdapter(name: string, dir: string): Promise<void> {
    await this.changeAdapter('/v1/load_lora_adapter', { lora_name: name, lora_path: dir }, `LoRA adapter ${name} from ${dir}`);
  }

  /** `/v1/unload_lora_adapter {lora_name}`: at once (404 for a name not loaded); running requests finish on the adapter. */
  async unloadLoraAdapter(name: string): Promise<void> {
    await this.changeAdapter('/v1/unload_lora_adapter', { lora_name: name }, `the unload of LoRA adapter ${name}`);
  }

  private changeAdapter(path: string, body: Record<string, unknown>, what: string): Promise<void> {
    return changeAdapter({ url: `${this.url}${path}`, body, what, timeoutMs: this.options.reloadTimeoutMs ?? 600_000, accepted: (response) => response.ok });
  }

  async weightVersion(): Promise<string | null> {
    const results = await this.collectiveRpc(VERSION_METHOD, [], 10_000);
    // Every worker must serve the same version; anything else is "unknown".
    const first = results[0];
    return typeof first === 'string' && results.every((r) => r === first) ? first : null;
  }

  async pause(mode: PauseMode): Promise<void> {
    if (mode === 'in_place') {
      // vLLM 0.12-0.14 take no mode and abort everything: partial rollout needs 0.16 or later.
      const release = await this.release();
      if (release !== null && compareVersions(release, '0.16.0') < 0) {
        throw new EngineError(ErrorCodes.ENGINE_REQUEST, `vLLM ${release} cannot pause in place (it aborts every request): partial rollout needs vLLM >= 0.16`);
      }
    }
    // Each release ignores the parameter it does not know.
    const query = mode === 'abort' ? 'mode=abort&wait_for_inflight_requests=false' : 'mode=keep&wait_for_inflight_requests=false';
    await engineJson(`${this.url}/pause?${query}`, { method: 'POST', timeoutMs: 60_000 });
  }

  async resume(): Promise<void> {
    await engineJson(`${this.url}/resume`, { method: 'POST', timeoutMs: 60_000 });
  }

  async abortAll(): Promise<void> {
    // vLLM aborts a request when its client goes away: nothing of a previous agent is left running.
  }

  async load(): Promise<EngineLoadSample> {
    const samples = await this.metrics();
    const generated = sumOf(samples, METRICS.generated);
    let tokensPerSecond: number | null = null;
    const now = performance.now();
    if (generated !== null) {
      if (this.lastGenerated && now > this.lastGenerated.at) tokensPerSecond = ((generated - this.lastGenerated.tokens) * 1000) / (now - this.lastGenerated.at);
      this.lastGenerated = { at: now, tokens: generated };
    }
    return {
      kvUsed: METRICS.kvUsed.map((name) => meanOf(samples, name)).find((v) => v !== null) ?? null,
      running: sumOf(samples, METRICS.running),
      waiting: sumOf(samples, METRICS.waiting),
      tokensPerSecond: tokensPerSecond === null ? null : Math.max(0, tokensPerSecond),
    };
  }

  async tokenize(text: string): Promise<number[]> {
    const body = (await engineJson(`${this.url}/tokenize`, {
      body: { model: this.options.servedModelName ?? this.options.model, prompt: text },
      timeoutMs: 30_000,
    })) as {
      tokens?: unknown;
    } | null;
    if (!Array.isArray(body?.tokens) || !body.tokens.every((t) => Number.isInteger(t)))
      throw protocolError(`${this.url}/tokenize`, 'no token ids in the answer');
    return body.tokens as number[];
  }

  /** vLLM's `/tokenize` with `messages`: the model's own chat template. */
  toolMessageIds(content: string): Promise<number[]> {
    this.toolMessages ??= new ToolMessageIds(`${this.url}/tokenize`, { model: this.options.servedModelName ?? this.options.model });
    return this.toolMessages.of(content);
  }

  /** How often tool messages were answered from the cache of their ids (hits) or asked of the engine (misses). */
  get toolMessageCache(): { hits: number; misses: number } {
    return { hits: this.toolMessages?.cache.hits ?? 0, misses: this.toolMessages?.cache.misses ?? 0 };
  }

  /** vLLM's `/detokenize` (`{model, tokens}` → `{prompt}`). */
  async detokenize(ids: readonly number[]): Promise<string> {
    const url = `${this.url}/detokenize`;
    const body = (await engineJson(url, { body: { model: this.options.servedModelName ?? this.options.model, tokens: ids }, timeoutMs: 30_000 })) as {
      prompt?: unknown;
    } | null;
    if (typeof body?.prompt !== 'string') throw protocolError(url, 'no text in the answer');
    return body.prompt;
  }

  /** Every worker's answer to laminar_reload_weights (an error status is ERR_ENGINE_RELOAD). */
  private async reload(dir: string, version: number): Promise<ReloadResult[]> {
    try {
      return (await this.collectiveRpc(RELOAD_METHOD, [dir, String(version)], this.options.reloadTimeoutMs ?? 600_000)) as ReloadResult[];
    } catch (err) {
      if ((err as EngineError).code !== ErrorCodes.ENGINE_REQUEST) throw err;
      throw new EngineError(ErrorCodes.ENGINE_RELOAD, `vLLM did not reload version ${version} from ${dir}: ${(err as Error).message}`, { cause: err });
    }
  }

  /** vLLM's release (GET /version), or null when it does not say. */
  private release(): Promise<string | null> {
    return this.releaseInfo.get();
  }

  private async metrics(): Promise<Sample[]> {
    const response = await engineFetch(`${this.url}/metrics`, { timeoutMs: 5000 });
    const text = await readText(response, `${this.url}/metrics`);
    return response.ok ? parsePrometheusText(text, METRIC_NAMES) : [];
  }

  private async collectiveRpc(method: string, args: unknown[], timeoutMs: number): Promise<unknown[]> {
    const body = (await engineJson(`${this.url}/collective_rpc`, { body: { method, args, timeout: timeoutMs / 1000 }, timeoutMs: timeoutMs + 5000 })) as {
      results?: unknown;
    } | null;
    if (!Array.isArray(body?.results)) throw protocolError(`${this.url}/collective_rpc`, 'no results list in the answer (is VLLM_SERVER_DEV_MODE=1 set?)');
    return body.results as unknown[];
  }
}

/** The `/v1/completions` body of a request to the served `model` (`seeded`: whether its seed goes; see the file's comment). */
export function completionBody(request: GenerateRequest, model: string, seeded: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {
    // A LoRA adapter is a model of its own to vLLM's OpenAI API: requests name it in `model`.
    model: request.lora ?? model,
    prompt: request.inputIds,
    max_tokens: request.maxNewTokens,
    temperature: request.sampling.temperature,
    top_p: request.sampling.topP,
    top_k: request.sampling.topK,
    ignore_eos: request.sampling.ignoreEos,
    stream: true,
    logprobs: 0,
    return_tokens_as_token_ids: true,
    return_token_ids: true,
    // The model's generation_config.json would otherwise change the sampling (and the logprobs).
    repetition_penalty: 1,
    presence_penalty: 0,
    frequency_penalty: 0,
    min_p: 0,
    request_id: request.rid,
  };
  if (request.sampling.stopTokenIds.length > 0) body.stop_token_ids = request.sampling.stopTokenIds;
  // vLLM serves smaller values first (--scheduling-policy priority; the default fcfs policy
  // refuses a non-zero priority): the predicted length goes negated.
  if (request.priority != null && request.priority !== 0) body.priority = -request.priority;
  if (seeded && request.sampling.seed !== null) body.seed = request.sampling.seed;
  return body;
}

/** The sampled tokens of a completion chunk: ids from `token_ids` or from "token_id:N" strings. */
export function tokensOf(choice: NonNullable<CompletionChunk['choices']>[number], url: string): { tokens: number[]; logprobs: number[] } {
  const lp = choice.logprobs;
  const strings = Array.isArray(lp?.tokens) ? (lp.tokens as unknown[]) : [];
  const values = Array.isArray(lp?.token_logprobs) ? (lp.token_logprobs as unknown[]) : [];
  let tokens: number[];
  if (Array.isArray(choice.token_ids)) tokens = choice.token_ids as number[];
  else {
    tokens = strings.map((t) => {
      const m = typeof t === 'string' ? /^token_id:(\d+)$/.exec(t) : null;
      if (!m) throw protocolError(url, `a token is not "token_id:N" (was return_tokens_as_token_ids honoured?): ${JSON.stringify(t)}`);
      return Number(m[1]);
    });
  }
  const logprobs = tokens.map((_, i) => {
    const v = values[i];
    return typeof v === 'number' && Number.isFinite(v) ? v : 0;
  });
  return { tokens, logprobs };
}
