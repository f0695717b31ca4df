/**
 * Token ids of chat messages through the engine's chat template, for multi-turn episodes: an
 * observation is appended to a trajectory as the ids of one `tool` message (vLLM's `/tokenize`
 * with `messages`; the reference engine serves the same form, engine-http.md).
 *
 * A template may put something before the first message (Qwen's adds a default system prompt),
 * so the tool message's ids are taken as a difference: the ids of [user, tool] with the
 * generation prompt (what the model reads before its next turn) minus those of [user] alone.
 */
import { engineJson, protocolError } from './http.js';
import { TokenIdsCache } from './token-ids-cache.js';

export interface ChatMessage {
  role: 'user' | 'assistant' | 'tool';
  content: string;
}

/** The user message the difference is taken against: one digit, in every vocabulary. */
const ANCHOR: ChatMessage = { role: 'user', content: '0' };

/** POSTs `{messages, ...}` to `url` (an engine's /tokenize) and returns the ids. */
export async function tokenizeMessages(
  url: string,
  messages: ChatMessage[],
  generationPrompt: boolean,
  extra: Record<string, unknown> = {},
): Promise<number[]> {
  const body = (await engineJson(url, {
    body: { ...extra, messages, add_generation_prompt: generationPrompt, add_special_tokens: false },
    timeoutMs: 30_000,
  })) as { tokens?: unknown } | null;
  if (!Array.isArray(body?.tokens) || !body.tokens.every((t) => Number.isInteger(t))) throw protocolError(url, 'no token ids in the answer');
  return body.tokens as number[];
}

/**
 * Ids of a tool message as the model reads it after a call, by the difference of the module
 * docstring; a content the engine tokenized already is answered from a cache (token-ids-cache.ts).
 */
export class ToolMessageIds {
  private anchor: Promise<number[]> | null = null;
  /** The tool messages tokenized so far, by content. */
  readonly cache = new TokenIdsCache();

  constructor(
    private readonly url: string,
    private readonly extra: Record<string, unknown> = {},
  ) {}

  of(content: string): Promise<number[]> {
    return this.cache.of(content, (c) => this.tokenize(c));
  }

  private async tokenize(content: string): Promise<number[]> {
    this.anchor ??= tokenizeMessages(this.url, [ANCHOR], false, this.extra).catch((err: unknown) => {
      this.anchor = null;
      throw err;
    });
    const [anchor, full] = await Promise.all([this.anchor, tokenizeMessages(this.url, [ANCHOR, { role: 'tool', content }], true, this.extra)]);
    if (full.length < anchor.length || anchor.some((t, i) => full[i] !== t))
      throw protocolError(this.url, `the chat template renders a tool message by changing what comes before it`);
    return full.slice(anchor.length);
  }
}
