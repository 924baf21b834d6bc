"""The OpenAI Responses API: codec, fields, gate, answer (plain and streamed), and its translation
for chat-only upstreams."""
