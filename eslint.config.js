// ESLint for the TypeScript: typescript-eslint's strict, type-checked rules (with the project's
// tsconfig), in `npm run lint` and therefore in `npm test`. Formatting is Prettier's job, not
// ESLint's. Rules turned off or relaxed below say why.
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  // python/: the Python client's tests drive the TypeScript side through small .mjs helpers, outside the TypeScript project.
  // .venv*/: the Python environments hold other projects' JavaScript (torch's and vLLM's pages).
  { ignores: ['dist/', 'build/', 'node_modules/', 'docs/examples/', 'scripts/', 'python/', 'eslint.config.js', '.venv/', '.venv-engines/', '.venv-gpu/'] },
  eslint.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: ['./test/tsconfig.json'], tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // noUncheckedIndexedAccess types every indexed read as possibly undefined; `!` marks the
      // reads whose index the code has already bounded (loops over a length, parsed fixed layouts).
      '@typescript-eslint/no-non-null-assertion': 'off',
      // Numbers and booleans in messages are what logs and errors are made of.
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true }],
      // `() => void f()` and `(x) => set.add(x)` shorthands are clear; only a void value used as
      // one is confusing.
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true, ignoreVoidOperator: true }],
    },
  },
  {
    // The dashboard page: browser modules in their own TypeScript project (DOM types, no Node).
    files: ['src/manager/dashboard/page/**/*.ts'],
    languageOptions: {
      parserOptions: { project: ['./src/manager/dashboard/page/tsconfig.json'], tsconfigRootDir: import.meta.dirname },
    },
  },
);
