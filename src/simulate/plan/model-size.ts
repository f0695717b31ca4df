/**
 * `laminar plan --model`: which shipped scenario a model size starts from, and how a model of
 * another size is scaled from it. `7B`, `32B` and `72B` are the shipped scenarios' models as they
 * are; any other size (`14B`, `14e9`) starts from the shipped model nearest to it in log scale and
 * derives what a parameter count alone does not say:
 *
 * - weight bytes: the base's bytes per parameter (BF16 in every shipped scenario);
 * - layers: × r^(1/3) for a size ratio r, since a family grows depth and width together
 *   (parameters ∝ layers × width², width ∝ layers);
 * - KV bytes per token: × r^(2/3) (layers × the K/V width, each ∝ r^(1/3)), a multiple of 1 KiB;
 * - attention width (query heads × head dimension): × r^(1/3), whole heads of 128.
 *
 * Real families do not follow that rule exactly (Qwen2.5-7B has 4 KV heads, 14B 8), so a scaled
 * model is an estimate, and the plan prints every derived field with its formula.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { weightBytes as weightBytesOf } from '../scenario/derive.js';
import type { ScenarioData } from '../scenario/schema.js';

/** The sizes `--model` names without scaling, and their shipped scenarios (math task). */
export const SHIPPED_MODELS = Object.freeze({ '7B': 'math-7b', '32B': 'math-32b', '72B': 'math-72b' } as const);
export type ShippedModel = keyof typeof SHIPPED_MODELS;

/** Below this a `--model` number is taken for a typo (`14` for `14B`), not a parameter count. */
const FEWEST_PARAMS = 1e8;

export type ModelChoice = { kind: 'shipped'; name: ShippedModel } | { kind: 'params'; params: number };

/** One field of the plan's scenario that differs from its base, with the rule that gave it. */
export interface DerivedField {
  field: string;
  value: string;
  how: string;
}

/** `--model`: a shipped size (`7B`, case-insensitive), a size in billions (`14B`, `1.5b`) or a count (`14e9`). */
export function parseModel(text: string): ModelChoice {
  const trimmed = text.trim();
  const upper = trimmed.toUpperCase();
  if (Object.hasOwn(SHIPPED_MODELS, upper)) return { kind: 'shipped', name: upper as ShippedModel };
  const billions = /^(\d+(?:\.\d+)?)\s*B$/i.exec(trimmed);
  const params = billions ? Number(billions[1]) * 1e9 : trimmed === '' ? NaN : Number(trimmed);
  if (!Number.isFinite(params) || params < FEWEST_PARAMS) {
    throw new InvalidInputError(
      ErrorCodes.INVALID_ARG,
      `--model takes 7B, 32B, 72B or a parameter count such as 14B or 14e9 (at least ${FEWEST_PARAMS.toExponential(0)}), got ${JSON.stringify(text)}`,
      { model: text },
    );
  }
  return { kind: 'params', params };
}

/** The shipped model whose parameter count is nearest to `params` in log scale (a ratio, not a difference). */
export function nearestShipped(params: number, shippedParams: Readonly<Record<ShippedModel, number>>): ShippedModel {
  let best: ShippedModel = '7B';
  for (const name of Object.keys(shippedParams) as ShippedModel[]) {
    if (Math.abs(Math.log(params / shippedParams[name])) < Math.abs(Math.log(params / shippedParams[best]))) best = name;
  }
  return best;
}

const KV_GRANULE = 1024;
const fmt = (x: number, digits = 3): string => Number(x.toPrecision(digits)).toString();
const grouped = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** `base`'s model scaled to `params` parameters, and each field derived, with how. */
export function scaleModel(base: Pick<ScenarioData, 'model' | 'name'>, params: number): { model: ScenarioData['model']; derived: DerivedField[] } {
  const from = base.model;
  const r = params / from.params;
  const baseBytes = weightBytesOf(base);
  const weightBytes = baseBytes * r;
  const layers = Math.max(1, Math.round(from.layers * Math.cbrt(r)));
  const kvBytesPerToken = Math.max(KV_GRANULE, Math.round((from.kvBytesPerToken * r ** (2 / 3)) / KV_GRANULE) * KV_GRANULE);
  // Attention's width grows as the K/V width does (r^(1/3)), to a whole head of 128.
  const attentionWidth = from.attentionWidth === undefined ? undefined : Math.max(128, Math.round((from.attentionWidth * Math.cbrt(r)) / 128) * 128);
  const ratio = `r = ${fmt(params / 1e9)}B / ${fmt(from.params / 1e9)}B = ${fmt(r)}`;
  return {
    model: { name: `${fmt(params / 1e9)}B (scaled from ${from.name})`, params, layers, kvBytesPerToken, weightBytes, attentionWidth },
    derived: [
      {
        field: 'model.params',
        value: grouped.format(params),
        how: `--model; scaled from ${base.name} (${from.name}), the shipped model nearest in size: ${ratio}`,
      },
      {
        field: 'model.weightBytes',
        value: `${fmt(weightBytes / 1e9)} GB`,
        how: `${fmt(baseBytes / 1e9)} GB × r: the base's bytes per parameter`,
      },
      { field: 'model.layers', value: String(layers), how: `${from.layers} × r^(1/3), rounded: depth and width grow together` },
      {
        field: 'model.kvBytesPerToken',
        value: grouped.format(kvBytesPerToken),
        how: `${grouped.format(from.kvBytesPerToken)} × r^(2/3) (layers × K/V width), to a multiple of ${KV_GRANULE}`,
      },
      ...(attentionWidth === undefined
        ? []
        : [
            {
              field: 'model.attentionWidth',
              value: grouped.format(attentionWidth),
              how: `${grouped.format(from.attentionWidth!)} × r^(1/3), to whole heads of 128`,
            },
          ]),
    ],
  };
}
