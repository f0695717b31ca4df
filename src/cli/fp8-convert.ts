/** `laminar fp8-convert`: a bf16/f32 checkpoint to a block-quantised FP8 model directory, offline. */
import { Command } from 'commander';
import { availableParallelism } from 'node:os';
import { convertCheckpointToFp8 } from '../relay/fp8/convert-file.js';
import { compileKeepPattern, DEFAULT_FP8_KEEP } from '../relay/fp8/plan.js';

export function fp8ConvertCommand(): Command {
  return new Command('fp8-convert')
    .description(
      'convert a checkpoint (a .safetensors file or a directory of shards, BF16/F32) into an FP8 model directory: e4m3 weights with ' +
        '128x128 block scales (<name>_scale_inv) and config.json with quantization_config, as SGLang and vLLM load them',
    )
    .argument('<checkpoint>', 'a .safetensors file or a directory of shards (its config.json, if any, is carried over)')
    .argument('<out-dir>', 'where model.safetensors and config.json are written')
    .option('--fp8-keep <regex>', 'tensor names kept in their dtype (2-D BF16/F32 tensors not matching it are quantised)', DEFAULT_FP8_KEEP)
    .option('--threads <n>', 'conversion jobs at once', String(Math.min(4, availableParallelism())))
    .option('--json', 'print the result as JSON')
    .action(async (checkpoint: string, outDir: string, opts: { fp8Keep: string; threads: string; json?: boolean }) => {
      const threads = Math.max(1, Number.parseInt(opts.threads, 10) || 1);
      process.env.UV_THREADPOOL_SIZE ??= String(threads);
      const result = await convertCheckpointToFp8(checkpoint, outDir, { keep: compileKeepPattern(opts.fp8Keep), concurrency: threads });
      if (opts.json) process.stdout.write(`${JSON.stringify(result)}\n`);
      else
        process.stdout.write(
          `${result.quantised} of ${result.tensors} tensors quantised; ${result.sourceBytes} -> ${result.bytes} bytes in ${result.seconds.toFixed(2)} s` +
            `${result.config ? '' : ' (no config.json beside the checkpoint: none written)'}\n`,
        );
    });
}
