/**
 * Hermes/Qwen tool calls: `<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>`.
 * `<tool_call>` and `</tool_call>` are single special tokens in the models that use this format
 * (Qwen2.5/3: 151657 and 151658), so the call is found on token ids and only its inside is
 * detokenized by the engine (its /detokenize) to read the JSON. `arguments` given as a JSON string
 * (some models write it so) is read as the object it holds. The first call of a turn is executed.
 */
import { callSpan, type ObservationInput, type ParsedTurn, type ToolCallParser } from './parser.js';

export interface HermesOptions {
  openTokenId: number;
  closeTokenId: number;
  /** The engine's detokenizer (the text of token ids). */
  decode(ids: readonly number[]): Promise<string>;
}

export class HermesParser implements ToolCallParser {
  readonly name = 'hermes';
  readonly stopTokenIds: readonly number[];

  constructor(private readonly options: HermesOptions) {
    this.stopTokenIds = [options.closeTokenId];
  }

  async parse(turn: readonly number[]): Promise<ParsedTurn> {
    const span = callSpan(turn, this.options.openTokenId, this.options.closeTokenId);
    if ('none' in span) return { kind: 'answer' };
    if ('bad' in span) return { kind: 'bad_call', tool: null, message: span.bad };
    return parseHermesJson(await this.options.decode(span.inner));
  }

  observationText(result: ObservationInput): string {
    if (result.status === 'ok' || result.status === 'truncated') return result.output;
    return JSON.stringify({ error: result.code ?? result.status, status: result.status, message: result.output });
  }
}

/** The call in the JSON text between the tags. */
export function parseHermesJson(text: string): ParsedTurn {
  let body: unknown;
  try {
    body = JSON.parse(text.trim());
  } catch (err) {
    return { kind: 'bad_call', tool: null, message: `the tool call is not JSON: ${(err as Error).message}` };
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { kind: 'bad_call', tool: null, message: 'the tool call is not a JSON object' };
  const { name, arguments: args } = body as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || name === '') return { kind: 'bad_call', tool: null, message: 'the tool call has no "name" string' };
  let value: unknown = args ?? {};
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      return { kind: 'bad_call', tool: name, message: '"arguments" is a string that is not JSON' };
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { kind: 'bad_call', tool: name, message: '"arguments" is not an object' };
  return { kind: 'call', call: { tool: name, args: value as Record<string, unknown> } };
}
