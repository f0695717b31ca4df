/**
 * Tool calls in generated tokens: what a turn asks for. A parser is pluggable (`--tool-parser`):
 * it names the token ids that end a turn at a call (they join the request's stop ids) and turns
 * a finished turn's tokens into an answer (no call: the episode ends), a call, or a bad call
 * (the call is there but does not parse, names no known tool, or has arguments of the wrong
 * type), and an action's result into the text of the observation appended after the call.
 *
 * - hermes.ts: Hermes/Qwen `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the JSON
 *   read from the engine's detokenization of the tokens between the two tags;
 * - token-calls.ts: calls spelled in token ids (`<tool_call> <tool> <arg ids> </tool_call>`), the
 *   lookup task's layout for the reference engine (python/src/laminar/testing/tools.py).
 */
/** A parsed call: the tool and its arguments (checked against the tool's spec by tool-specs.ts). */
export interface ToolCall {
  tool: string;
  args: Record<string, unknown>;
}

export type ParsedTurn =
  /** No call: the turn is the answer and the episode ends. */
  | { kind: 'answer' }
  | { kind: 'call'; call: ToolCall }
  /** A call that cannot be executed; `tool` when the name was readable. */
  | { kind: 'bad_call'; tool: string | null; message: string };

/** What the observation says, whatever the parser's format: the action's status and output. */
export interface ObservationInput {
  /** ok, truncated, error, timeout, failed or bad_call (the action service's statuses). */
  status: string;
  output: string;
  /** The error code of a result that is not ok. */
  code?: string;
}

export interface ToolCallParser {
  readonly name: string;
  /** Token ids that end a turn at a call (added to every request's stop ids). */
  readonly stopTokenIds: readonly number[];
  /** The tokens of one finished turn (this turn's only) → what it asks. */
  parse(turn: readonly number[]): Promise<ParsedTurn>;
  /** The content of the tool message that carries a result back to the model. */
  observationText(result: ObservationInput): string;
}

/** The call of a turn's tokens between `open` and `close` ids: the inner ids, or why there is none. */
export function callSpan(turn: readonly number[], open: number, close: number): { inner: number[] } | { none: true } | { bad: string } {
  const start = turn.indexOf(open);
  const end = turn.indexOf(close);
  if (start < 0 && end < 0) return { none: true };
  if (start < 0) return { bad: 'a closing tool-call tag without an opening one' };
  const after = turn.indexOf(close, start + 1);
  if (after < 0) return { bad: 'a tool call that is not closed (the turn ended inside it)' };
  if (turn.indexOf(open, start + 1) >= 0 && turn.indexOf(open, start + 1) < after) return { bad: 'a tool call opened twice' };
  return { inner: turn.slice(start + 1, after) };
}
