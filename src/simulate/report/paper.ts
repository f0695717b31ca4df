/**
 * The paper's numbers (src/simulate/paper-figures.json): read once, typed as far as the report
 * uses them. The file is the single source of the paper column; nothing here copies a number.
 */
import { readFileSync } from 'node:fs';
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { PAPER_FIGURES_FILE } from '../files.js';
import type { Scenario } from '../scenario/schema.js';

export type PaperModel = '7B' | '32B' | '72B';

export interface PaperFigure {
  id: string;
  what: string;
  value: unknown;
  /** "up to": the largest over the points or models the value is a mean of. */
  maxValue?: number;
  /** The best baseline's value beside laminar's. */
  baselineValue?: number;
  unit?: string;
  source: { section?: string; figure?: string; table?: string };
  role: 'validate' | 'input' | 'calibrate' | 'context' | 'out-of-scope';
  tolerance?: number | null;
  note?: string;
}

interface PaperFile {
  figures: PaperFigure[];
  models: { architectureNotFromPaper: Record<PaperModel, { params: number }> };
}

let cached: PaperFile | null = null;

function paperFile(): PaperFile {
  cached ??= JSON.parse(readFileSync(PAPER_FIGURES_FILE, 'utf8')) as PaperFile;
  return cached;
}

/** The figure `id` of paper-figures.json (an internal error if the file lost it). */
export function paperFigure(id: string): PaperFigure {
  const figure = paperFile().figures.find((f) => f.id === id);
  if (figure === undefined) throw new LaminarError(ErrorCodes.INTERNAL, `src/simulate/paper-figures.json has no figure ${id}`, { details: { id } });
  return figure;
}

/** The paper's model class whose published parameter count is within 5 % of the scenario's. */
export function modelKeyOf(s: Pick<Scenario, 'model'>): PaperModel | null {
  const models = paperFile().models.architectureNotFromPaper;
  for (const key of ['7B', '32B', '72B'] as const) {
    if (Math.abs(s.model.params / models[key].params - 1) <= 0.05) return key;
  }
  return null;
}
