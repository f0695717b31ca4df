/**
 * uPlot, the charting library (docs/design/dashboard.md, "Charting library"): loaded by the page
 * as a classic script (its minified IIFE build, served from the package) before the modules, so
 * it is a global here; its types come from the package and emit nothing.
 */
import type UPlotClass from 'uplot';

export type UPlot = UPlotClass;
export type UPlotOptions = UPlotClass.Options;
export type UPlotData = UPlotClass.AlignedData;
export type UPlotSeries = UPlotClass.Series;

/**
 * An axis on the chart's right. uPlot declares `Side` a const enum of its types only (the script
 * defines no value for it), and a type-only import cannot name its members: the value is written out.
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment
export const RIGHT_SIDE = 1 as UPlotClass.Axis.Side.Right;

/** The constructor the script defined; throws when the script did not load (the page says so). */
export function uPlotConstructor(): typeof UPlotClass {
  const found = (globalThis as { uPlot?: typeof UPlotClass }).uPlot;
  if (found === undefined) throw new Error('uPlot did not load: the charts cannot be drawn');
  return found;
}
