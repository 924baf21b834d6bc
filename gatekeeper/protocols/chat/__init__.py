"""Chat Completions: codec, fields, gate, answer (plain and streamed), and what both translations
read of a chat answer (read.py)."""
