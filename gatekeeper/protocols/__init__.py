"""One codec per client protocol; see base.py for the contract."""
