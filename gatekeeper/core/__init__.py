"""The core every front end talks to: `Gatekeeper` and the tier resolver."""
