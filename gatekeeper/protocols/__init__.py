"""One codec per client protocol (chat, responses, messages); `base.py` holds the contract,
`table.py` the explicit table of codecs and translators, `translate/` the bridges to chat."""
