"""Handlers: what each function does, as plain functions of a message and their dependencies."""
