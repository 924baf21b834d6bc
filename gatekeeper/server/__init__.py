"""The network front end: the ASGI app, the upstream pool, SSE, the admin API and console."""
