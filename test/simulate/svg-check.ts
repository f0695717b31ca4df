/**
 * A small well-formedness check for the report's SVGs without an XML library: one root <svg>
 * element in the SVG namespace, every tag closed in order, attributes quoted, entities known.
 * Returns the problems found (empty when well-formed).
 */
export function svgProblems(svg: string): string[] {
  const problems: string[] = [];
  const text = svg.trim();
  if (!text.startsWith('<svg')) problems.push('does not start with <svg');
  if (!text.endsWith('</svg>')) problems.push('does not end with </svg>');
  if (!/^<svg[^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/.test(text)) problems.push('no SVG namespace on the root');
  const stack: string[] = [];
  let roots = 0;
  const tag = /<(\/?)([A-Za-z][\w:.-]*)((?:\s+[\w:.-]+\s*=\s*(?:"[^"]*"|'[^']*'))*)\s*(\/?)>|<!--[\s\S]*?-->|<!\[CDATA\[[\s\S]*?\]\]>/g;
  let last = 0;
  for (let m = tag.exec(text); m !== null; m = tag.exec(text)) {
    const between = text.slice(last, m.index);
    if (between.includes('<')) problems.push(`malformed markup near ${JSON.stringify(between.slice(between.indexOf('<'), between.indexOf('<') + 40))}`);
    for (const e of between.match(/&[^;\s]*;?/g) ?? []) if (!/^&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);$/.test(e)) problems.push(`bad entity ${e}`);
    last = tag.lastIndex;
    if (m[2] === undefined) continue;
    const [, closing, name, , selfClosing] = m;
    if (closing) {
      const open = stack.pop();
      if (open !== name) problems.push(`</${name}> closes <${open ?? 'nothing'}>`);
    } else if (!selfClosing) {
      if (stack.length === 0) roots++;
      stack.push(name);
    } else if (stack.length === 0) roots++;
  }
  if (text.slice(last).trim() !== '') problems.push('text after the root element');
  if (stack.length > 0) problems.push(`unclosed: ${stack.join(' > ')}`);
  if (roots !== 1) problems.push(`${roots} root elements`);
  return problems;
}
