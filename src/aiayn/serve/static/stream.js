// The pages' one reader of a streamed answer (Server-Sent Events): sseEvents(response) yields each event's
// parsed JSON, up to OpenAI's closing "data: [DONE]" or the end of the stream.
"use strict";

async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const data = buffer.slice(0, cut).replace(/^data: /, "");
      buffer = buffer.slice(cut + 2);
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}
