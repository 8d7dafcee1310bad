"""The business domain: orders, the workflow and the state machine. No Azure imports here."""
