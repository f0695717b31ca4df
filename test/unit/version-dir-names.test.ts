/**
 * Pure parts of version directories: the directory name of a model (one flat, one-to-one,
 * path-safe component) and which files of a model directory count as engine files.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isEngineFile, readEngineFiles } from '../../src/relay/engine-files.js';
import { parseRelayOptions } from '../../src/relay/options.js';
import { modelDirName, validateModelId, versionDirName } from '../../src/relay/segments.js';

describe('version directory names', () => {
  it('encodes a model id into one path component', () => {
    expect(modelDirName('org/name')).toBe('org~2fname');
    expect(modelDirName('Qwen/Qwen2.5-7B-Instruct')).toBe('Qwen~2fQwen2.5-7B-Instruct');
    expect(modelDirName('a b~c')).toBe('a~20b~7ec');
    expect(modelDirName('é')).toBe('~c3~a9');
    // No hidden entry, no `.` or `..`, no separator.
    expect(modelDirName('.')).toBe('~2e');
    expect(modelDirName('..')).toBe('~2e.');
    expect(modelDirName('../../etc')).toBe('~2e.~2f..~2fetc');
    expect(modelDirName('.hidden')).toBe('~2ehidden');
    expect(versionDirName(12)).toBe('v12');
  });

  it('never gives two models one directory', () => {
    const ids = ['org/name', 'org~2fname', '.x', '~2ex', 'a.b', 'a~2eb', '..', '.~2e', 'A', 'a', 'x/y/z', 'x~2fy/z'];
    for (const id of ids) validateModelId(id);
    const names = ids.map(modelDirName);
    expect(new Set(names).size).toBe(ids.length);
    for (const n of names) {
      expect(n).toMatch(/^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$/);
      expect(n.includes('/')).toBe(false);
    }
  });
});

describe('engine files', () => {
  it('links what HF models ship for engines and tokenizers, never weights or indexes', () => {
    for (const name of [
      'config.json',
      'generation_config.json',
      'tokenizer.json',
      'tokenizer_config.json',
      'special_tokens_map.json',
      'added_tokens.json',
      'vocab.json',
      'vocab.txt',
      'merges.txt',
      'tokenizer.model',
      'spiece.model',
      'qwen.tiktoken',
      'chat_template.jinja',
      'chat_template.json',
      'preprocessor_config.json',
      'configuration_deepseek.py',
      'modeling_deepseek.py',
      'tokenization_chatglm.py',
    ]) {
      expect(isEngineFile(name), name).toBe(true);
    }
    for (const name of [
      'model.safetensors',
      'model-00001-of-00004.safetensors',
      'model.safetensors.index.json',
      'pytorch_model.bin',
      'pytorch_model.bin.index.json',
      'consolidated.00.pth',
      'model.gguf',
      'flax_model.msgpack',
      'tf_model.h5',
      'README.md',
      'LICENSE',
      '.gitattributes',
      'setup.py',
    ]) {
      expect(isEngineFile(name), name).toBe(false);
    }
  });

  it('refuses a directory that is missing, not a directory, or has no config.json', () => {
    const root = mkdtempSync(join(tmpdir(), 'laminar-engine-unit-'));
    try {
      writeFileSync(join(root, 'file'), 'x');
      mkdirSync(join(root, 'empty'));
      mkdirSync(join(root, 'subdir-config'));
      mkdirSync(join(root, 'subdir-config', 'config.json'));
      for (const bad of [join(root, 'missing'), join(root, 'file'), join(root, 'empty'), join(root, 'subdir-config')]) {
        expect(() => readEngineFiles(bad), bad).toThrow(expect.objectContaining({ code: 'ERR_BAD_ENGINE_FILES' }));
        expect(() => parseRelayOptions({ engineFiles: bad }), bad).toThrow(expect.objectContaining({ code: 'ERR_BAD_ENGINE_FILES' }));
      }
      // An HF cache snapshot: symlinks to blobs count as files; a dangling one does not.
      const snap = join(root, 'snapshot');
      mkdirSync(join(root, 'blobs'));
      mkdirSync(snap);
      writeFileSync(join(root, 'blobs', 'a1'), '{}');
      symlinkSync(join(root, 'blobs', 'a1'), join(snap, 'config.json'));
      symlinkSync(join(root, 'blobs', 'missing'), join(snap, 'tokenizer.json'));
      writeFileSync(join(snap, 'model.safetensors'), 'w');
      expect(readEngineFiles(snap)).toEqual({ dir: realpathSync(snap), files: ['config.json'], ignored: ['model.safetensors'] });
      expect(parseRelayOptions({ engineFiles: snap }).engineFiles?.files).toEqual(['config.json']);
      expect(parseRelayOptions({}).engineFiles).toBeNull();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
