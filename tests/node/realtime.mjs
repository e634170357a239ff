// The official OpenAI Node SDK's Realtime client (OpenAIRealtimeWS), unchanged, against the gateway: one session
// speaks one out-of-band response, whose PCM goes to a file; prints the events' types and the response.done.
// Usage: node realtime.mjs BASE_URL API_KEY MODEL VOICE OUTPUT TEXT
import { writeFileSync } from "node:fs";

import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";

const [baseURL, apiKey, model, voice, output, text] = process.argv.slice(2);
if (!text) {
  console.error("usage: node realtime.mjs BASE_URL API_KEY MODEL VOICE OUTPUT TEXT");
  process.exit(2);
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const rt = new OpenAIRealtimeWS({ model }, client);
const types = [];
const audio = [];
const timer = setTimeout(() => {
  console.error(`timed out after ${JSON.stringify(types)}`);
  process.exit(1);
}, 20000);

rt.on("event", (event) => types.push(event.type));
rt.on("error", (error) => {
  console.error(JSON.stringify(error.error ?? error.message));
  process.exit(1);
});
rt.socket.on("open", () => {
  rt.send({
    type: "session.update",
    session: { type: "realtime", output_modalities: ["audio"], audio: { output: { voice } } },
  });
  rt.send({
    type: "response.create",
    response: {
      conversation: "none",
      input: [{ type: "message", role: "user", content: [{ type: "input_text", text }] }],
    },
  });
});
rt.on("response.output_audio.delta", (event) => audio.push(Buffer.from(event.delta, "base64")));
rt.on("response.done", (event) => {
  clearTimeout(timer);
  writeFileSync(output, Buffer.concat(audio));
  console.log(JSON.stringify({ types, response: event.response }));
  rt.close();
});
