// The official openai-node SDK (npm `openai`) through gatekeeper, in its default mode: chat and
// Responses, plain and streamed (the SDK's own stream accumulators), and its own agent loop
// (`runTools`). Prints what the client saw as one JSON line.
// Usage: node openai_node.mjs BASE_URL MODEL
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "...", maxRetries: 0 });
const NAMES = ["read_file", "write_file", "execute_command"];
const parameters = { type: "object", properties: { path: { type: "string" } } };
const chatTools = NAMES.map((name) => ({ type: "function", function: { name, parameters } }));
const responsesTools = NAMES.map((name) => ({ type: "function", name, parameters }));
const messages = [{ role: "user", content: "read a.txt" }];

const chatSeen = (completion) => {
  const message = completion.choices[0].message;
  return { text: message.content, calls: (message.tool_calls ?? []).map((c) => c.function.name) };
};
const responsesSeen = (response) => ({
  text: response.output_text,
  calls: response.output.filter((item) => item.type === "function_call").map((item) => item.name),
});

const seen = {};
seen.chat = chatSeen(await client.chat.completions.create({ model, messages, tools: chatTools }));
const chatStream = client.chat.completions.stream({ model, messages, tools: chatTools });
seen.chatStream = chatSeen(await chatStream.finalChatCompletion());
seen.responses = responsesSeen(await client.responses.create({ model, input: "read a.txt", tools: responsesTools }));
const responsesStream = client.responses.stream({ model, input: "read a.txt", tools: responsesTools });
seen.responsesStream = responsesSeen(await responsesStream.finalResponse());

// The SDK's agent loop runs every call whose name it has a function for: all three here.
const ran = [];
const runnable = NAMES.map((name) => ({
  type: "function",
  function: { name, parameters, parse: JSON.parse, function: () => { ran.push(name); return "hello"; } },
}));
const runner = client.chat.completions.runTools({ model, messages, tools: runnable });
seen.runTools = { final: await runner.finalContent(), ran };
console.log(JSON.stringify(seen));
