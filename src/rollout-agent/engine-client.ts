/**
 * What the rollout agent needs of an inference server, whatever its kind. One implementation per
 * server API (sglang-client.ts, vllm-client.ts); the agent and the RolloutEngine adapter
 * (http-engine.ts) only speak this interface, so a new server kind is one file.
 */

/** Sampling of one request. `seed` makes sampling a function of (seed, position) where the server supports it. */
export interface SamplingParams {
  temperature: number;
  topP: number;
  topK: number;
  seed: number | null;
  stopTokenIds: number[];
  ignoreEos: boolean;
}

export interface GenerateRequest {
  /** Request id at the engine (the trajectory id: unique, and lets the agent abort it by name). */
  rid: string;
  /** Prompt followed by the response generated so far (a resumed trajectory re-prefills it). */
  inputIds: number[];
  maxNewTokens: number;
  sampling: SamplingParams;
  /**
   * Progressive priority (turn-priority.ts): the trajectory's predicted remaining tokens, larger
   * served sooner; each client turns it into its server's sense. Null or absent: none sent.
   */
  priority?: number | null;
  /**
   * The LoRA adapter the request runs with: a name given to `loadLoraAdapter` (SGLang sends it
   * as `lora_path`, vLLM as `model`). Null or absent: the base model.
   */
  lora?: string | null;
}

export type FinishReason = 'length' | 'stop' | 'abort';

export interface GenerateResult {
  finishReason: FinishReason;
  /** The weight version the engine reported for the request, where it reports one. */
  weightVersion: string | null;
}

export interface GenerateHandlers {
  signal: AbortSignal;
  /** New tokens of the response, in order, with the logprob each was sampled with. */
  onTokens(tokens: number[], logprobs: number[], weightVersion: string | null): void;
}

/** The engine's load as its own metrics give it (null fields: the engine does not say). */
export interface EngineLoadSample {
  kvUsed: number | null;
  running: number | null;
  waiting: number | null;
  /** Generated tokens per second, as the engine reports it. */
  tokensPerSecond: number | null;
}

export interface ServerInfo {
  /** KV-cache capacity in tokens, where the engine tells it. */
  kvCapacityTokens: number | null;
  /** Requests it decodes at once at most (SGLang's max_running_requests), where the engine tells it. */
  maxRunning?: number | null;
  /** The engine's own description (kind, version, model path), for logs. */
  description: string;
}

/** How generation stops for a weight update (partial rollout): the engine's pause modes. */
export type PauseMode = 'in_place' | 'abort';

export interface EngineClient {
  readonly kind: string;
  readonly url: string;
  /** True when the engine answers its health check. */
  health(signal?: AbortSignal): Promise<boolean>;
  serverInfo(): Promise<ServerInfo>;
  /** Streams one request to its end; resolves with why it ended. Aborting `signal` cancels it at the engine. */
  generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult>;
  /** Loads the weights of a version directory; throws ERR_ENGINE_RELOAD when the engine refuses them. */
  loadWeights(dir: string, version: number): Promise<void>;
  /**
   * Loads the LoRA adapter in `dir` (PEFT's layout: adapter_config.json and
   * adapter_model.safetensors) under `name`, beside the base weights and the adapters already
   * loaded; requests then name it in `GenerateRequest.lora`. Throws ERR_ENGINE_RELOAD when the
   * engine refuses it (a name already loaded, too many adapters, an adapter that does not fit the
   * base). Absent: the engine cannot serve adapter versions.
   */
  loadLoraAdapter?(name: string, dir: string): Promise<void>;
  /**
   * Unloads adapter `name`: new requests naming it are refused at once. SGLang (and the reference
   * engine) answer once the requests running with it have finished; vLLM at once, its running
   * requests finishing on the adapter. Throws ERR_ENGINE_RELOAD when the engine refuses (a name
   * not loaded).
   */
  unloadLoraAdapter?(name: string): Promise<void>;
  /** The version the engine says it serves (null: none set, or the engine cannot tell). */
  weightVersion(): Promise<string | null>;
  pause(mode: PauseMode): Promise<void>;
  resume(): Promise<void>;
  /** Aborts every request at the engine (a restarted agent clears what its predecessor left running). */
  abortAll(): Promise<void>;
  load(): Promise<EngineLoadSample>;
  /** Token ids of a text, where the engine can tokenize (prompts given as text). */
  tokenize(text: string): Promise<number[]>;
  /**
   * Token ids of a tool message (an observation, appended after a tool call) through the
   * engine's chat template (chat-tokens.ts). Multi-turn episodes need it.
   */
  toolMessageIds?(content: string): Promise<number[]>;
  /** The text of token ids (the Hermes tool-call parser reads a call's JSON so). */
  detokenize?(ids: readonly number[]): Promise<string>;
}
