// One generateText call with three tools through gatekeeper, per provider; prints what the
// client saw, and which tools ran, as JSON. Usage: node vercel_ai.mjs BASE_URL MODEL (openai|anthropic)
import { generateText, jsonSchema, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";

const [base, modelId, which] = process.argv.slice(2);
const schema = jsonSchema({ type: "object", properties: { path: { type: "string" } } });
// Each tool runs when the model calls it (generateText executes the calls of its step).
const ran = [];
const execute = (name) => async () => { ran.push(name); return "hello"; };
const tools = Object.fromEntries(["read_file", "write_file", "execute_command"].map(
  (name) => [name, tool({ description: `the ${name} tool`, inputSchema: schema, execute: execute(name) })]));
// The lines of docs/frameworks.md, with the test proxy's address:
const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey: "..." });
const anthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey: "..." });
const model = which === "anthropic" ? anthropic(modelId) : openai(modelId);
const result = await generateText({ model, prompt: "hi", tools });
console.log(JSON.stringify({ text: result.text, toolCalls: result.toolCalls.map((c) => c.toolName), ran }));
