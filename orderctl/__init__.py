"""The orders CLI: send orders, follow them, operate the pipeline. Local tooling, not deployed."""
