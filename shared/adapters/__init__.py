"""Adapters: thin wrappers over Table Storage, Storage queues, HTTP and logging."""
