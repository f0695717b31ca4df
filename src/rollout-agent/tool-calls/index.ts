/** Tool calls in generated tokens (parser.ts), their formats, and the tools an episode may call. */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { HermesParser } from './hermes.js';
import type { ToolCallParser } from './parser.js';
import { TokenCallsParser } from './token-calls.js';

export { callSpan, type ObservationInput, type ParsedTurn, type ToolCall, type ToolCallParser } from './parser.js';
export { HermesParser, parseHermesJson, type HermesOptions } from './hermes.js';
export { LOOKUP_TASK_CALLS, TokenCallsParser, type TokenCallsOptions } from './token-calls.js';
export { callProblem, DEFAULT_TOOL_TIMEOUT_MS, LOOKUP_TOOLS, parseToolSpecs, type ArgType, type ToolSpec } from './tool-specs.js';

export const TOOL_PARSERS = ['hermes', 'token-calls'] as const;
export type ToolParserName = (typeof TOOL_PARSERS)[number];

/**
 * `--tool-parser`: `hermes` needs the ids of `<tool_call>` and `</tool_call>` (`--tool-call-ids
 * open,close`; Qwen2.5/3: 151657,151658) and the engine's detokenizer; `token-calls` is the lookup
 * task's layout (its ids fixed by laminar.testing.tools).
 */
export function createToolCallParser(
  name: string,
  options: { callIds?: readonly number[]; decode?: (ids: readonly number[]) => Promise<string> },
): ToolCallParser {
  if (name === 'token-calls') return new TokenCallsParser();
  if (name === 'hermes') {
    const [open, close] = options.callIds ?? [];
    if (open === undefined || close === undefined || options.callIds!.length !== 2)
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--tool-parser hermes needs --tool-call-ids <open>,<close>: the ids of <tool_call> and </tool_call>');
    if (!options.decode) throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--tool-parser hermes needs an engine that detokenizes');
    return new HermesParser({ openTokenId: open, closeTokenId: close, decode: options.decode });
  }
  throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--tool-parser must be one of ${TOOL_PARSERS.join(', ')}, got ${JSON.stringify(name)}`);
}
