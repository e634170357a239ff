// The official OpenAI Node SDK, unchanged, against the gateway: streams one speech response to a file.
// Usage: node speak.mjs BASE_URL MODEL VOICE FORMAT OUTPUT [INPUT]
import { createWriteStream } from "node:fs";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

import OpenAI from "openai";

const [baseURL, model, voice, format, output, input = "Hello from the OpenAI Node SDK, through the speech gateway."] =
  process.argv.slice(2);
if (!output) {
  console.error("usage: node speak.mjs BASE_URL MODEL VOICE FORMAT OUTPUT [INPUT]");
  process.exit(2);
}

const client = new OpenAI({ baseURL, apiKey: "anything", maxRetries: 0 });
try {
  const response = await client.audio.speech.create({ model, voice, input, response_format: format });
  await pipeline(Readable.fromWeb(response.body), createWriteStream(output));
  console.log(JSON.stringify({ engine: response.headers.get("x-engine"), type: response.headers.get("content-type") }));
} catch (error) {
  console.error(error instanceof OpenAI.APIError ? `${error.status}: ${error.message}` : error);
  process.exit(1);
}
