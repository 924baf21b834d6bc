"""The client protocols: one package each (`chat/`, `responses/`, `messages/`: codec, fields,
gate, answer, translate); `base.py` holds the contract, `table.py` the registry (one entry per
protocol), `schema.py` the allowlists' language, the rest what the codecs share."""
