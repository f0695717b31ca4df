/**
 * Tool calls spelled in token ids, for small vocabularies without text: `<tool_call>`, one id
 * naming the tool, the argument's ids, `</tool_call>`. The lookup task (laminar.testing.tools)
 * uses it with the reference engine: `[16, 20, 7, 5, 8, 17]` is lookup(key="314"), the argument
 * read as digits (id - 4). Observations are digit strings, or the word `error` for any result
 * that is not ok (the vocabulary has no room for messages).
 */
import { callSpan, type ObservationInput, type ParsedTurn, type ToolCallParser } from './parser.js';

export interface TokenCallsOptions {
  openTokenId: number;
  closeTokenId: number;
  /** Tool id → the tool's name and the name of its one argument. */
  tools: ReadonlyMap<number, { name: string; arg: string }>;
  /** Id of the digit '0' (digit d is digitBase + d). */
  digitBase: number;
}

/** The lookup task's layout (python/src/laminar/testing/tools.py). */
export const LOOKUP_TASK_CALLS: TokenCallsOptions = {
  openTokenId: 16,
  closeTokenId: 17,
  tools: new Map([[20, { name: 'lookup', arg: 'key' }]]),
  digitBase: 4,
};

export class TokenCallsParser implements ToolCallParser {
  readonly name = 'token-calls';
  readonly stopTokenIds: readonly number[];

  constructor(private readonly options: TokenCallsOptions = LOOKUP_TASK_CALLS) {
    this.stopTokenIds = [options.closeTokenId];
  }

  parse(turn: readonly number[]): Promise<ParsedTurn> {
    return Promise.resolve(this.parseNow(turn));
  }

  observationText(result: ObservationInput): string {
    const ok = (result.status === 'ok' || result.status === 'truncated') && /^[0-9]+$/.test(result.output);
    return ok ? result.output : 'error';
  }

  private parseNow(turn: readonly number[]): ParsedTurn {
    const { openTokenId, closeTokenId, tools, digitBase } = this.options;
    const span = callSpan(turn, openTokenId, closeTokenId);
    if ('none' in span) return { kind: 'answer' };
    if ('bad' in span) return { kind: 'bad_call', tool: null, message: span.bad };
    const [toolId, ...argIds] = span.inner;
    const tool = toolId === undefined ? undefined : tools.get(toolId);
    if (!tool) return { kind: 'bad_call', tool: null, message: `token ${toolId ?? '(none)'} names no tool` };
    if (argIds.length === 0) return { kind: 'bad_call', tool: tool.name, message: `${tool.name}: no argument` };
    if (!argIds.every((id) => id >= digitBase && id < digitBase + 10))
      return { kind: 'bad_call', tool: tool.name, message: `${tool.name}: the argument must be digits, got token ids ${argIds.join(',')}` };
    return { kind: 'call', call: { tool: tool.name, args: { [tool.arg]: argIds.map((id) => String(id - digitBase)).join('') } } };
  }
}
