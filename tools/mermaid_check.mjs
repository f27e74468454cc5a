// Parse Mermaid files with Mermaid's own parser (the one GitHub renders with).
// Used by tests/test_plan_mermaid.py when MERMAID_NODE_MODULES names a folder holding the npm packages
// `mermaid` and `jsdom` (e.g. `npm install --prefix /tmp/mmd mermaid@11 jsdom`, then
// MERMAID_NODE_MODULES=/tmp/mmd/node_modules). Prints "OK file type" or "FAIL file message"; exit 1 on a failure.
import { createRequire } from "module";
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const modules = process.env.MERMAID_NODE_MODULES;
const require = createRequire(path.join(modules, "noop.js"));
const { JSDOM } = require("jsdom");
const dom = new JSDOM("<!DOCTYPE html><body></body>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
globalThis.DOMParser = dom.window.DOMParser;
globalThis.Element = dom.window.Element;
try { Object.defineProperty(globalThis, "navigator", { value: dom.window.navigator, configurable: true }); } catch (e) {}
const entry = require.resolve("mermaid");
const mermaid = (await import(pathToFileURL(entry).href)).default;
mermaid.initialize({ startOnLoad: false });
let bad = 0;
for (const file of process.argv.slice(2)) {
  try {
    const result = await mermaid.parse(fs.readFileSync(file, "utf8"));
    console.log("OK", file, result.diagramType);
  } catch (e) {
    bad++;
    console.log("FAIL", file, String(e.message || e).slice(0, 400));
  }
}
process.exit(bad ? 1 : 0);
