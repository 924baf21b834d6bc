"""Translation of Responses and Messages to chat, for chat-only upstreams."""
