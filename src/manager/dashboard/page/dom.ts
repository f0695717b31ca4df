/** Small DOM helpers: the page builds its elements in code (no framework, no HTML strings). */

/** A new element with a class and text. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, className = '', text = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

/** The element of the page's skeleton with this id (page-html.ts makes them); throws when the page is not the manager's. */
export function byId(id: string): HTMLElement {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the page has no #${id}`);
  return node;
}

/** The skeleton's `<canvas>` with this id. */
export function canvasById(id: string): HTMLCanvasElement {
  const node = byId(id);
  if (!(node instanceof HTMLCanvasElement)) throw new Error(`the page's #${id} is not a <canvas>`);
  return node;
}

/** The skeleton's `<select>` with this id. */
export function selectById(id: string): HTMLSelectElement {
  const node = byId(id);
  if (!(node instanceof HTMLSelectElement)) throw new Error(`the page's #${id} is not a <select>`);
  return node;
}

/** Sets `textContent` only when it differs (a write re-lays out even when equal). */
export function setText(node: Node, text: string): void {
  if (node.textContent !== text) node.textContent = text;
}
